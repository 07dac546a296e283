package proposer_test

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

// labFamilies are the lab's model families with their metrics.
var labFamilies = []struct {
	family string
	metric records.Metric
}{
	{lab.FamilyARProse, records.BitsPerByte},
	{lab.FamilyARCode, records.BitsPerByte},
	{lab.FamilyMDM, records.NatsPerToken},
	{lab.FamilyCentre, records.NatsPerToken},
}

// randomLabState draws a valid state of a lab family with a history of
// 0..MaxHistory records instantiating random cards of cat.
func randomLabState(rng *rand.Rand, cat []records.Card) records.State {
	f := labFamilies[rng.IntN(len(labFamilies))]
	task := records.Task{ID: f.family + "-t", Family: f.family, Split: records.Train, Metric: f.metric,
		RefLoss: 2, SeedNoise: 0.02, Budget: 100 << rng.IntN(5)}
	s := records.State{Task: task}
	for range rng.IntN(records.MaxHistory + 1) {
		c := cat[rng.IntN(len(cat))]
		pr := records.Proposal{Mechanism: c.Mechanism, Params: map[string]string{}}
		for _, ps := range c.Params {
			pr.Params[ps.Name] = ps.Choices[rng.IntN(len(ps.Choices))]
		}
		s.History = append(s.History, records.Record{Task: task, Proposal: pr, Gain: 0.02 * rng.NormFloat64(), Source: records.Synthetic})
	}
	return s
}

func newLabPolicy(t testing.TB, mutate func(*proposer.PolicyConfig)) *proposer.Policy {
	t.Helper()
	cfg := proposer.DefaultPolicyConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := proposer.NewPolicy(lab.Catalogue(), cfg, rand.New(rand.NewPCG(7, 7)))
	require.NoError(t, err)
	return p
}

func TestPolicyConforms(t *testing.T) {
	cat := lab.Catalogue()
	t.Run("uniform", func(t *testing.T) {
		proposertest.RunTrainable(t, func(t *testing.T) proposer.Trainable { return newLabPolicy(t, nil) },
			proposertest.Options{Deterministic: true, RequireLogProbs: true, Catalogue: cat})
	})
	t.Run("random-init-no-change-T0.7", func(t *testing.T) {
		proposertest.RunTrainable(t, func(t *testing.T) proposer.Trainable {
			return newLabPolicy(t, func(c *proposer.PolicyConfig) { c.InitStd, c.NoChange, c.Temperature = 0.5, true, 0.7 })
		}, proposertest.Options{Deterministic: true, RequireLogProbs: true, Catalogue: cat, AllowNoChange: true})
	})
}

// trainSteps runs DAPO on a bandit: the reward of a proposal is rewards
// of its card, whatever its parameters and the state. Each step samples
// `states` fresh states, G = 8 proposals each, keeps the informative
// groups (METHOD.md §1 dynamic sampling), computes mean-centred advantages
// with dapo.Advantages (METHOD.md §1: Â_i = R_i − mean(R_group)) and calls
// Update once.
func trainSteps(t testing.TB, p *proposer.Policy, rewards map[string]float64, steps, states int, rng *rand.Rand) {
	t.Helper()
	const g = 8
	ctx := context.Background()
	cat := p.Catalogue()
	for range steps {
		var batch []proposer.Item
		for range states {
			s := randomLabState(rng, cat)
			smp, err := p.Propose(ctx, s, g, rng)
			require.NoError(t, err)
			r := make([]float64, g)
			for i, x := range smp {
				r[i] = rewards[x.Proposal.Mechanism]
			}
			if !dapo.Informative(r, 1e-9) {
				continue
			}
			for i, a := range dapo.Advantages(r, dapo.MeanCentered, 0) {
				batch = append(batch, proposer.Item{State: s, Sample: smp[i], Advantage: a})
			}
		}
		_, err := p.Update(ctx, batch)
		require.NoError(t, err)
	}
}

// expected returns the mean over states of E_{card∼π}[reward] and of the
// probability of the card best.
func expected(p *proposer.Policy, rewards map[string]float64, best string, states []records.State) (reward, pBest float64) {
	mech := p.Mechanisms()
	for _, s := range states {
		for k, pk := range p.CardProbs(s) {
			reward += pk * rewards[mech[k]]
			if mech[k] == best {
				pBest += pk
			}
		}
	}
	n := float64(len(states))
	return reward / n, pBest / n
}

func TestLearnsBanditOnLabCatalogue(t *testing.T) {
	// Seeded and cheap (about 40 × 128 samples), so it also runs under
	// -short. The bandit: every card of the lab's catalogue earns its prior mean
	// (in units of σ_e, the scale of normalised rewards, METHOD.md §1
	// Reward 1). embed-dim, at 2.0, is the unique best; five cards follow
	// at 1.5.
	cat := lab.Catalogue()
	require.GreaterOrEqual(t, len(cat), 24)
	rewards := map[string]float64{}
	best, bestR := "", math.Inf(-1)
	for _, c := range cat {
		require.NotNil(t, c.Prior, "card %s has no prior", c.Mechanism)
		rewards[c.Mechanism] = c.Prior.Mean
		if c.Prior.Mean > bestR {
			best, bestR = c.Mechanism, c.Prior.Mean
		}
	}
	require.Equal(t, "embed-dim", best)

	p := newLabPolicy(t, nil)
	rng := rand.New(rand.NewPCG(2026, 11))
	eval := make([]records.State, 64)
	for i := range eval {
		eval[i] = randomLabState(rng, cat)
	}
	r0, p0 := expected(p, rewards, best, eval)
	var mean float64
	for _, r := range rewards {
		mean += r
	}
	require.InDelta(t, mean/float64(len(cat)), r0, 1e-12, "the initial policy is uniform")
	require.InDelta(t, 1/float64(len(cat)), p0, 1e-12)

	const steps, states = 40, 16 // 40 updates of ≤ 16 × 8 samples
	trainSteps(t, p, rewards, steps/2, states, rng)
	rHalf, _ := expected(p, rewards, best, eval)
	trainSteps(t, p, rewards, steps-steps/2, states, rng)
	r1, p1 := expected(p, rewards, best, eval)
	t.Logf("expected reward %.3f → %.3f → %.3f (best %.1f); P(%s) %.3f → %.3f after %d steps", r0, rHalf, r1, bestR, best, p0, p1, steps)
	require.Greater(t, rHalf, r0, "expected reward must rise")
	require.Greater(t, r1, rHalf, "expected reward must keep rising")
	require.Greater(t, r1, 0.95*bestR, "expected reward after %d steps", steps)
	require.Greater(t, p1, 0.9, "probability of the best card after %d steps", steps)
}

func TestLearnsFamilyDependentBandit(t *testing.T) {
	// A contextual bandit: the best card depends on the task family, so
	// only the state features (METHOD.md §1 Vocabulary: s = (e, h)) can
	// tell the policy which card to propose. Each family's best card earns
	// 1, every other card 0; flat groups carry no signal and are dropped
	// (METHOD.md §1 dynamic sampling).
	cat := lab.Catalogue()
	bestOf := map[string]string{
		lab.FamilyARProse: "lr-scale", lab.FamilyARCode: "dropout",
		lab.FamilyMDM: "wsd", lab.FamilyCentre: "context",
	}
	p := newLabPolicy(t, nil)
	rng := rand.New(rand.NewPCG(2027, 5))
	ctx := context.Background()
	probBest := func() float64 {
		var sum float64
		mech := p.Mechanisms()
		for _, f := range labFamilies {
			s := records.State{Task: records.Task{ID: "eval", Family: f.family, Split: records.HeldOut, Metric: f.metric, RefLoss: 1, SeedNoise: 0.1, Budget: 400}}
			for k, pk := range p.CardProbs(s) {
				if mech[k] == bestOf[f.family] {
					sum += pk
				}
			}
		}
		return sum / float64(len(labFamilies))
	}
	p0 := probBest()
	const steps = 60
	for range steps {
		var batch []proposer.Item
		for range 16 {
			s := randomLabState(rng, cat)
			smp, err := p.Propose(ctx, s, 8, rng)
			require.NoError(t, err)
			r := make([]float64, len(smp))
			for i, x := range smp {
				if x.Proposal.Mechanism == bestOf[s.Task.Family] {
					r[i] = 1
				}
			}
			if !dapo.Informative(r, 1e-9) {
				continue
			}
			for i, a := range dapo.Advantages(r, dapo.MeanCentered, 0) {
				batch = append(batch, proposer.Item{State: s, Sample: smp[i], Advantage: a})
			}
		}
		_, err := p.Update(ctx, batch)
		require.NoError(t, err)
	}
	p1 := probBest()
	t.Logf("mean P(family's best card) %.3f → %.3f after %d steps", p0, p1, steps)
	require.Greater(t, p1, 0.9, "after %d steps", steps)
}

func TestSuperviseLearnsRecords(t *testing.T) {
	// The SFT baseline (METHOD.md §1 Data and evaluation): maximum
	// likelihood on records concentrates the policy on their proposals.
	ctx := context.Background()
	p := newLabPolicy(t, nil)
	rng := rand.New(rand.NewPCG(6, 6))
	cat := p.Catalogue()
	target := records.Proposal{Mechanism: "wsd", Params: map[string]string{}}
	for _, c := range cat {
		if c.Mechanism == "wsd" {
			target.Params[c.Params[0].Name] = c.Params[0].Choices[1]
		}
	}
	var examples []proposer.Item
	for range 32 {
		examples = append(examples, proposer.Item{State: randomLabState(rng, cat), Sample: proposer.Sample{Proposal: target}})
	}
	first, err := p.Supervise(ctx, examples)
	require.NoError(t, err)
	var last proposer.Stats
	for range 30 {
		last, err = p.Supervise(ctx, examples)
		require.NoError(t, err)
	}
	require.Less(t, last.Loss, first.Loss/10, "mean NLL %g → %g", first.Loss, last.Loss)
	lp, err := p.Score(ctx, randomLabState(rng, cat), proposer.Sample{Proposal: target})
	require.NoError(t, err)
	require.Greater(t, math.Exp(lp[0]+lp[1]), 0.9, "probability of the supervised proposal")
}

func TestMarshalRoundTrip(t *testing.T) {
	p, q, data, rng := trainedRoundTrip(t, func(c *proposer.PolicyConfig) { c.NoChange, c.Temperature = true, 0.9 }, 7)
	requireSamePolicies(t, p, q, lab.Catalogue(), 20, rng)

	// The Adam state travels too: one more identical update keeps the two
	// policies identical.
	requireSameAfterUpdate(t, p, q, data)
}

// trainedRoundTrip is a lab policy (configured by opt) trained 3 DAPO steps
// on rewards i mod m by card, its checkpoint data, the policy restored from
// it with the same config and size, and the rng of the steps, for more.
func trainedRoundTrip(t *testing.T, opt func(*proposer.PolicyConfig), m int) (p, q *proposer.Policy, data []byte, rng *rand.Rand) {
	t.Helper()
	p = newLabPolicy(t, opt)
	rng = rand.New(rand.NewPCG(3, 4))
	rewards := map[string]float64{}
	for i, c := range lab.Catalogue() {
		rewards[c.Mechanism] = float64(i % m)
	}
	trainSteps(t, p, rewards, 3, 8, rng)
	data, err := p.MarshalBinary()
	require.NoError(t, err)
	q = new(proposer.Policy)
	require.NoError(t, q.UnmarshalBinary(data))
	require.Equal(t, p.Config(), q.Config())
	require.Equal(t, p.NumParams(), q.NumParams())
	return p, q, data, rng
}

// requireSamePolicies asserts that p and q, restored from p's checkpoint,
// propose the same samples from the same sources on n random lab states,
// score them alike (with the log-probs the samples carry) and give the
// same card probabilities.
func requireSamePolicies(t *testing.T, p, q *proposer.Policy, cat []records.Card, n int, rng *rand.Rand) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		s := randomLabState(rng, cat)
		a, err := p.Propose(ctx, s, 8, rand.New(rand.NewPCG(uint64(i), 0)))
		require.NoError(t, err)
		b, err := q.Propose(ctx, s, 8, rand.New(rand.NewPCG(uint64(i), 0)))
		require.NoError(t, err)
		if diff := cmp.Diff(a, b); diff != "" {
			t.Fatalf("samples differ after a round trip (-before +after):\n%s", diff)
		}
		for _, x := range a {
			la, err := p.Score(ctx, s, x)
			require.NoError(t, err)
			lb, err := q.Score(ctx, s, x)
			require.NoError(t, err)
			require.Equal(t, la, lb, "log-probs must be identical")
			require.Equal(t, x.LogProbs, la)
		}
		require.Equal(t, p.CardProbs(s), q.CardProbs(s))
	}
}

// requireSameAfterUpdate applies one identical DAPO update to p and to q,
// restored from p's checkpoint data, and asserts that their statistics
// and checkpoints stay identical and differ from data.
func requireSameAfterUpdate(t *testing.T, p, q *proposer.Policy, data []byte) {
	t.Helper()
	ctx := context.Background()
	cat := lab.Catalogue()
	batchRng := rand.New(rand.NewPCG(9, 9))
	var batch []proposer.Item
	for range 4 {
		s := randomLabState(batchRng, cat)
		smp, err := p.Propose(ctx, s, 8, batchRng)
		require.NoError(t, err)
		for i, x := range smp {
			batch = append(batch, proposer.Item{State: s, Sample: x, Advantage: float64(i%3) - 1})
		}
	}
	sa, err := p.Update(ctx, batch)
	require.NoError(t, err)
	sb, err := q.Update(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, sa, sb)
	da, err := p.MarshalBinary()
	require.NoError(t, err)
	db, err := q.MarshalBinary()
	require.NoError(t, err)
	require.True(t, bytes.Equal(da, db), "checkpoints differ after the same update")
	require.False(t, bytes.Equal(data, da), "the update changed nothing")
}

func TestUnmarshalRejects(t *testing.T) {
	p := newLabPolicy(t, nil)
	good, err := p.MarshalBinary()
	require.NoError(t, err)
	for name, data := range map[string][]byte{
		"empty":        nil,
		"not JSON":     []byte("policy"),
		"wrong format": bytes.Replace(good, []byte(`lm2lm/proposer.Policy/v1`), []byte(`other/v9`), 1),
		"bad config":   bytes.Replace(good, []byte(`"temperature":1`), []byte(`"temperature":-1`), 1),
		"short theta":  bytes.Replace(good, []byte(`"theta":[0,`), []byte(`"theta":[`), 1),
		"param count":  bytes.Replace(good, []byte(`"params":`), []byte(`"params":1`), 1),
	} {
		t.Run(name, func(t *testing.T) {
			q := newLabPolicy(t, nil)
			require.ErrorIs(t, q.UnmarshalBinary(data), proposer.ErrCheckpoint)
			after, err := q.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, good, after, "a failed UnmarshalBinary must leave the policy unchanged")
		})
	}
}

func TestUpdateRejectsBadItems(t *testing.T) {
	ctx := context.Background()
	p := newLabPolicy(t, nil)
	rng := rand.New(rand.NewPCG(5, 5))
	s := randomLabState(rng, p.Catalogue())
	smp, err := p.Propose(ctx, s, 2, rng)
	require.NoError(t, err)
	before, err := p.MarshalBinary()
	require.NoError(t, err)
	// Pick a sample whose card has parameters.
	var x proposer.Sample
	for {
		smp, err = p.Propose(ctx, s, 1, rng)
		require.NoError(t, err)
		if len(smp[0].Tokens) > 1 {
			x = smp[0]
			break
		}
	}
	edit := func(f func(*proposer.Item)) []proposer.Item {
		it := proposer.Item{State: s, Sample: x, Advantage: 1}
		it.Sample.LogProbs = append([]float64(nil), x.LogProbs...)
		it.Sample.Tokens = append([]string(nil), x.Tokens...)
		it.Sample.Proposal.Params = map[string]string{}
		for k, v := range x.Proposal.Params {
			it.Sample.Proposal.Params[k] = v
		}
		f(&it)
		return []proposer.Item{{State: s, Sample: x, Advantage: -1}, it}
	}
	tests := []struct {
		name  string
		batch []proposer.Item
		want  error
	}{
		{"invalid sample", edit(func(it *proposer.Item) { it.Sample.Invalid, it.Sample.Reason = true, "unparseable" }), proposer.ErrBadItem},
		{"unknown card", edit(func(it *proposer.Item) { it.Sample.Proposal.Mechanism = "teleport" }), proposer.ErrNotInCatalogue},
		{"off-grid value", edit(func(it *proposer.Item) {
			for k := range it.Sample.Proposal.Params {
				it.Sample.Proposal.Params[k] = "12345.678"
			}
		}), proposer.ErrNotInCatalogue},
		{"missing parameter", edit(func(it *proposer.Item) { it.Sample.Proposal.Params = nil }), proposer.ErrNotInCatalogue},
		{"log-probs not per token", edit(func(it *proposer.Item) { it.Sample.LogProbs = it.Sample.LogProbs[:1] }), proposer.ErrBadItem},
		{"positive old log-prob", edit(func(it *proposer.Item) { it.Sample.LogProbs[0] = 0.5 }), proposer.ErrBadItem},
		{"NaN advantage", edit(func(it *proposer.Item) { it.Advantage = math.NaN() }), proposer.ErrBadItem},
		{"tokens disagree", edit(func(it *proposer.Item) { it.Sample.Tokens[0] = "no-such-card" }), proposer.ErrBadItem},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Update(ctx, tt.batch)
			require.ErrorIs(t, err, tt.want)
			after, err := p.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, before, after, "a failed Update must leave the policy unchanged")
		})
	}
}

func TestEncodeMatchesPropose(t *testing.T) {
	ctx := context.Background()
	p := newLabPolicy(t, func(c *proposer.PolicyConfig) { c.NoChange = true })
	rng := rand.New(rand.NewPCG(8, 8))
	smp, err := p.Propose(ctx, randomLabState(rng, p.Catalogue()), 64, rng)
	require.NoError(t, err)
	for _, x := range smp {
		toks, err := p.Encode(x.Proposal)
		require.NoError(t, err)
		require.Equal(t, x.Tokens, toks)
	}
	// Formatting does not matter: "0.50" is the choice "0.5".
	toks, err := p.Encode(records.Proposal{Mechanism: " LR-Scale ", Params: map[string]string{"factor": "0.50"}})
	require.NoError(t, err)
	require.Equal(t, []string{"lr-scale", "factor=0.5"}, toks)
}

func TestUpdateConcurrentWithPropose(t *testing.T) {
	ctx := context.Background()
	p := newLabPolicy(t, nil)
	cat := p.Catalogue()
	rng := rand.New(rand.NewPCG(1, 2))
	s := randomLabState(rng, cat)
	smp, err := p.Propose(ctx, s, 16, rng)
	require.NoError(t, err)
	batch := make([]proposer.Item, len(smp))
	for i, x := range smp {
		batch[i] = proposer.Item{State: s, Sample: x, Advantage: float64(i%2)*2 - 1}
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for g := range errs {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 0))
			for range 20 {
				if _, err := p.Propose(ctx, s, 8, r); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	for range 5 {
		_, err := p.Update(ctx, batch)
		require.NoError(t, err)
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

func FuzzUnmarshalBinary(f *testing.F) {
	cat := []records.Card{
		{Mechanism: "a", Params: []records.ParamSpec{{Name: "x", Kind: "enum", Choices: []string{"1", "2"}}}},
		{Mechanism: "b"},
	}
	p, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil)
	require.NoError(f, err)
	good, err := p.MarshalBinary()
	require.NoError(f, err)
	f.Add(good)
	f.Add(good[:len(good)/2])
	hcfg := proposer.DefaultPolicyConfig()
	hcfg.Hidden, hcfg.DescriptorBuckets = 2, 16
	h, err := proposer.NewPolicy(cat, hcfg, rand.New(rand.NewPCG(1, 2)))
	require.NoError(f, err)
	withHidden, err := h.MarshalBinary()
	require.NoError(f, err)
	f.Add(withHidden)
	f.Add(bytes.Replace(withHidden, []byte(`"hidden":2`), []byte(`"hidden":2,"hidden_init_std":1`), 1))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"format":"lm2lm/proposer.Policy/v1","config":{"temperature":1,"family_buckets":1000000}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var q proposer.Policy
		if err := q.UnmarshalBinary(data); err != nil {
			return
		}
		// An accepted checkpoint gives a working policy that round-trips.
		s := proposertest.DefaultStates(nil)[1]
		smp, err := q.Propose(context.Background(), s, 4, rand.New(rand.NewPCG(1, 1)))
		if err != nil {
			t.Fatalf("Propose after UnmarshalBinary: %v", err)
		}
		for _, x := range smp {
			if err := proposertest.CheckSample(x, proposertest.Options{RequireLogProbs: true, Catalogue: q.Catalogue(), AllowNoChange: true}); err != nil {
				t.Fatalf("sample after UnmarshalBinary: %v", err)
			}
		}
		again, err := q.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary after UnmarshalBinary: %v", err)
		}
		var r proposer.Policy
		if err := r.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-reading a checkpoint: %v", err)
		}
	})
}

// A checkpoint is decoded strictly: one that names a field the policy
// no longer has (a lever removed from PolicyConfig, such as
// descriptor_spread or hidden_init_std, which would change the features
// or the draws without changing the number of parameters) is refused,
// never read as a different policy.
func TestCheckpointWithUnknownFieldIsRefused(t *testing.T) {
	cfg := proposer.DefaultPolicyConfig()
	cfg.Hidden, cfg.DescriptorBuckets = 2, 16
	p, err := proposer.NewPolicy(lab.Catalogue(), cfg, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	good, err := p.MarshalBinary()
	require.NoError(t, err)
	var q proposer.Policy
	require.NoError(t, q.UnmarshalBinary(good))
	for _, field := range []string{`"descriptor_spread":2`, `"hidden_init_std":1`, `"history_proposal_buckets":64`} {
		bad := bytes.Replace(good, []byte(`"descriptor_buckets":16`), []byte(`"descriptor_buckets":16,`+field), 1)
		require.NotEqual(t, good, bad)
		err := q.UnmarshalBinary(bad)
		require.ErrorIs(t, err, proposer.ErrCheckpoint, field)
		require.ErrorContains(t, err, "unknown field", field)
	}
	bad := append(append([]byte(nil), good...), []byte(`{}`)...)
	require.ErrorIs(t, q.UnmarshalBinary(bad), proposer.ErrCheckpoint, "data after the checkpoint")
}

func TestZeroPolicy(t *testing.T) {
	var p proposer.Policy
	s := proposertest.DefaultStates(nil)[0]
	_, err := p.Propose(context.Background(), s, 1, rand.New(rand.NewPCG(1, 1)))
	require.ErrorIs(t, err, proposer.ErrNotInitialised)
	_, err = p.Update(context.Background(), []proposer.Item{{State: s}})
	require.ErrorIs(t, err, proposer.ErrNotInitialised)
	_, err = p.Supervise(context.Background(), []proposer.Item{{State: s}})
	require.ErrorIs(t, err, proposer.ErrNotInitialised)
	require.Nil(t, p.CardProbs(s))
}
