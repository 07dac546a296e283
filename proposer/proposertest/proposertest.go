package proposertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Options tunes Run and RunTrainable to what an implementation promises.
// The zero value checks the contract every Proposer must meet.
type Options struct {
	// States are the research states the suite proposes for; nil means
	// DefaultStates(Catalogue).
	States []records.State
	// N is the number of proposals per call; 0 means 8 (METHOD.md §1 Policy
	// optimisation: G = 8 proposals per state).
	N int
	// Deterministic: the implementation promises that two calls with
	// equally seeded rngs return equal samples (an embedded policy, or an
	// LLM client against a scripted server).
	Deterministic bool
	// RequireLogProbs: every valid sample must carry log-probs (set it for
	// the embedded policy and for servers known to return them).
	RequireLogProbs bool
	// Catalogue, when non-empty, restricts valid proposals to the cards:
	// the mechanism must be a card's and every parameter of the card must
	// be present with one of its Choices, and no other parameter may appear.
	Catalogue []records.Card
	// AllowNoChange admits the no-change proposal (records.NoChange) when
	// Catalogue is set.
	AllowNoChange bool
	// Concurrency is the number of goroutines in the concurrent-use check;
	// 0 means 4.
	Concurrency int
}

func (o Options) withDefaults() Options {
	if o.N == 0 {
		o.N = 8
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.States == nil {
		o.States = DefaultStates(o.Catalogue)
	}
	return o
}

// DefaultStates returns three valid research states: an autoregressive task
// with an empty history, a diffusion task with a history of three records
// (a positive gain, a negative gain, an infeasible run) and an
// autoregressive task of another family with a full history
// (records.MaxHistory). History proposals are taken from cat when it is
// non-empty (each card with the first of every parameter's choices), else
// from a fixed list of mechanism names.
func DefaultStates(cat []records.Card) []records.State {
	ar := records.Task{ID: "pt-ar", Family: "pt-ar-family", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 1.5, SeedNoise: 0.01, Budget: 300, Description: "conformance AR task"}
	diff := records.Task{ID: "pt-diff", Family: "pt-diff-family", Split: records.Train, Metric: records.NatsPerToken,
		RefLoss: 3.2, SeedNoise: 0.05, Budget: 1200, Description: "conformance diffusion task"}
	held := records.Task{ID: "pt-held", Family: "pt-held-family", Split: records.HeldOut, Metric: records.BitsPerByte,
		RefLoss: 1.2, SeedNoise: 0.02, Budget: 0, Description: "conformance held-out task"}
	prop := func(i int) records.Proposal {
		if len(cat) == 0 {
			names := []string{"lr-scale", "warmup", "weight-decay", "width"}
			return records.Proposal{Mechanism: names[i%len(names)]}
		}
		c := cat[i%len(cat)]
		p := records.Proposal{Mechanism: c.Mechanism}
		if len(c.Params) > 0 {
			p.Params = make(map[string]string, len(c.Params))
			for _, ps := range c.Params {
				if len(ps.Choices) > 0 {
					p.Params[ps.Name] = ps.Choices[0]
				}
			}
		}
		return p
	}
	rec := func(t records.Task, i int, gain float64, infeasible string) records.Record {
		r := records.Record{Task: t, Proposal: prop(i), Gain: gain, Loss: t.RefLoss - gain,
			Source: records.Real, Infeasible: infeasible}
		if infeasible != "" {
			r.Gain, r.Loss = 0, 0
		}
		return r
	}
	full := make([]records.Record, records.MaxHistory)
	for i := range full {
		full[i] = rec(held, i, 0.01*float64(i%3-1), "")
		full[i].Source = records.Synthetic
	}
	return []records.State{
		{Task: ar},
		{Task: diff, History: []records.Record{rec(diff, 0, 0.04, ""), rec(diff, 1, -0.02, ""), rec(diff, 2, 0, "diverged")}},
		{Task: held, History: full},
	}
}

// Run checks that the proposers made by newProposer meet the Proposer
// contract. It calls newProposer once per subtest; the returned proposer may
// be registered for cleanup with t.Cleanup.
//
// Checks: Propose returns exactly n samples for n = 1 and n = opts.N, none
// for n = 0, and an error for n < 0; every sample is either marked Invalid
// with a non-empty Reason or carries a proposal that passes
// records.Proposal.Validate (and opts.Catalogue); its Temperature is finite
// and ≥ 0; its LogProbs, when present, are one per token, finite and ≤ 0
// (required when opts.RequireLogProbs); Propose does not modify the state; a
// cancelled or expired ctx yields an error wrapping ctx.Err(); concurrent
// calls with separate rngs succeed (run the suite under -race). With
// opts.Deterministic, equally seeded calls return equal samples, concurrent
// calls return what serial calls return, and mutating a result does not
// change later results.
func Run(t *testing.T, newProposer func(t *testing.T) proposer.Proposer, opts Options) {
	t.Helper()
	o := opts.withDefaults()
	require.NotEmpty(t, o.States, "proposertest: no states")
	for i, s := range o.States {
		require.NoError(t, s.Validate(), "proposertest: state %d is invalid", i)
	}

	t.Run("Count", func(t *testing.T) {
		p := newProposer(t)
		for si, s := range o.States {
			for _, n := range []int{1, o.N} {
				got, err := p.Propose(context.Background(), s, n, seeded(uint64(si), uint64(n)))
				require.NoError(t, err, "state %d n=%d", si, n)
				require.Len(t, got, n, "state %d: Propose(n=%d)", si, n)
			}
		}
	})

	t.Run("Zero", func(t *testing.T) {
		p := newProposer(t)
		got, err := p.Propose(context.Background(), o.States[0], 0, seeded(1, 0))
		require.NoError(t, err, "Propose(n=0)")
		require.Empty(t, got, "Propose(n=0)")
	})

	t.Run("Negative", func(t *testing.T) {
		p := newProposer(t)
		_, err := p.Propose(context.Background(), o.States[0], -1, seeded(1, 1))
		require.Error(t, err, "Propose(n=-1) must fail")
	})

	t.Run("Samples", func(t *testing.T) { checkSamples(t, newProposer(t), o) })

	t.Run("Cancelled", func(t *testing.T) {
		p := newProposer(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := p.Propose(ctx, o.States[0], o.N, seeded(3, 0))
		require.ErrorIs(t, err, context.Canceled, "Propose with a cancelled ctx")

		ctx, cancel = context.WithDeadline(context.Background(), time.Unix(0, 0))
		defer cancel()
		_, err = p.Propose(ctx, o.States[0], o.N, seeded(3, 1))
		require.ErrorIs(t, err, context.DeadlineExceeded, "Propose with an expired ctx")
	})

	t.Run("Concurrent", func(t *testing.T) { checkConcurrent(t, newProposer(t), o) })

	if !o.Deterministic {
		return
	}

	t.Run("Deterministic", func(t *testing.T) {
		p := newProposer(t)
		for si, s := range o.States {
			a, err := p.Propose(context.Background(), s, o.N, seeded(4, uint64(si)))
			require.NoError(t, err)
			b, err := p.Propose(context.Background(), s, o.N, seeded(4, uint64(si)))
			require.NoError(t, err)
			if diff := cmp.Diff(a, b, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("state %d: equally seeded calls differ (-first +second):\n%s", si, diff)
			}
		}
	})

	t.Run("OwnedResult", func(t *testing.T) { checkOwnedResult(t, newProposer(t), o) })
}

// RunTrainable runs Run and then checks the Trainable contract: Update on a
// batch of the proposer's own samples with mean-centred advantages returns
// finite Stats (ClipFrac in [0, 1], Entropy ≥ 0, Tokens > 0); a cancelled
// ctx yields an error wrapping context.Canceled. With opts.Deterministic, a
// cancelled Update and an Update on an empty batch leave the samples
// unchanged. When the proposer implements proposer.Scorer, scores before an
// update equal the samples' LogProbs and one Update with a positive
// advantage on a single sample raises that sample's log-likelihood. When it
// implements proposer.Supervisor, Supervise is held to the same: finite
// Stats, cancellation, empty batches, and one step raises the
// log-likelihood of its example (with a Scorer).
func RunTrainable(t *testing.T, newTrainable func(t *testing.T) proposer.Trainable, opts Options) {
	t.Helper()
	Run(t, func(t *testing.T) proposer.Proposer { return newTrainable(t) }, opts)
	o := opts.withDefaults()
	ctx := context.Background()

	t.Run("UpdateStats", func(t *testing.T) {
		p := newTrainable(t)
		for si, s := range o.States {
			st, err := p.Update(ctx, batchOf(t, p, o, s, uint64(si)))
			require.NoError(t, err, "state %d", si)
			require.NoError(t, checkStats(st), "state %d", si)
		}
	})

	t.Run("SuperviseStats", func(t *testing.T) {
		p := newTrainable(t)
		sv, ok := p.(proposer.Supervisor)
		if !ok {
			t.Skip("proposer does not implement proposer.Supervisor")
		}
		st, err := sv.Supervise(ctx, batchOf(t, p, o, o.States[0], 10))
		require.NoError(t, err)
		require.NoError(t, checkStats(st))
	})

	t.Run("UpdateCancelled", func(t *testing.T) {
		p := newTrainable(t)
		items := batchOf(t, p, o, o.States[0], 20)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		unchanged(t, p, o, 7, "a cancelled update", func() {
			_, err := p.Update(cctx, items)
			require.ErrorIs(t, err, context.Canceled, "Update with a cancelled ctx")
			if sv, ok := p.(proposer.Supervisor); ok {
				_, err = sv.Supervise(cctx, items)
				require.ErrorIs(t, err, context.Canceled, "Supervise with a cancelled ctx")
			}
		})
	})

	t.Run("EmptyBatch", func(t *testing.T) {
		p := newTrainable(t)
		unchanged(t, p, o, 8, "an empty update", func() {
			_, err := p.Update(ctx, nil)
			require.NoError(t, err, "Update(empty batch)")
			if sv, ok := p.(proposer.Supervisor); ok {
				_, err = sv.Supervise(ctx, nil)
				require.NoError(t, err, "Supervise(empty batch)")
			}
		})
	})

	t.Run("Learns", func(t *testing.T) { checkLearns(t, newTrainable(t), o) })
}

// batchOf is a batch of p's own samples on s (seeded with seed) with
// mean-centred advantages; it fails t when every sample is invalid.
func batchOf(t *testing.T, p proposer.Trainable, o Options, s records.State, seed uint64) []proposer.Item {
	t.Helper()
	smp, err := p.Propose(context.Background(), s, o.N, seeded(6, seed))
	require.NoError(t, err)
	items := make([]proposer.Item, 0, len(smp))
	for i, x := range smp {
		if x.Invalid {
			continue
		}
		// Alternating ±1 advantages: mean-centred for an even count
		// (METHOD.md §1 Policy optimisation, Â_i = R_i − mean(R)).
		items = append(items, proposer.Item{State: s, Sample: x, Advantage: float64(1 - 2*(i%2))})
	}
	require.NotEmpty(t, items, "proposertest: every sample was invalid")
	return items
}

// unchanged runs do and, with o.Deterministic, checks that p proposes on
// the first state what it proposed before (seeded with seed): what did
// nothing to the policy.
func unchanged(t *testing.T, p proposer.Trainable, o Options, seed uint64, what string, do func()) {
	t.Helper()
	ctx, s := context.Background(), o.States[0]
	before, err := p.Propose(ctx, s, o.N, seeded(seed, 0))
	require.NoError(t, err)
	do()
	if !o.Deterministic {
		return
	}
	after, err := p.Propose(ctx, s, o.N, seeded(seed, 0))
	require.NoError(t, err)
	if diff := cmp.Diff(before, after, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s changed the policy (-before +after):\n%s", what, diff)
	}
}

// checkLearns checks, where p scores samples (proposer.Scorer), that Score
// matches a sample's log-probabilities before any update, and that an
// update with advantage +1 (and a supervised step, where p supervises)
// raises the sample's log-likelihood.
func checkLearns(t *testing.T, p proposer.Trainable, o Options) {
	ctx := context.Background()
	sc, ok := p.(proposer.Scorer)
	if !ok {
		t.Skip("proposer does not implement proposer.Scorer")
	}
	for si, s := range o.States {
		items := batchOf(t, p, o, s, 30+uint64(si))
		for i, it := range items {
			got, err := sc.Score(ctx, s, it.Sample)
			require.NoError(t, err)
			require.InDeltaSlice(t, it.Sample.LogProbs, got, 1e-9, "state %d item %d: Score before any update", si, i)
		}
		one := items[0]
		one.Advantage = 1
		before := sum(one.Sample.LogProbs)
		_, err := p.Update(ctx, []proposer.Item{one})
		require.NoError(t, err)
		lp, err := sc.Score(ctx, s, one.Sample)
		require.NoError(t, err)
		require.Greater(t, sum(lp), before, "state %d: Update with advantage +1 must raise the sample's log-likelihood", si)

		sv, ok := p.(proposer.Supervisor)
		if !ok {
			continue
		}
		before = sum(lp)
		_, err = sv.Supervise(ctx, []proposer.Item{one})
		require.NoError(t, err)
		lp, err = sc.Score(ctx, s, one.Sample)
		require.NoError(t, err)
		require.Greater(t, sum(lp), before, "state %d: Supervise must raise the example's log-likelihood", si)
	}
}

// CheckSample reports the first way smp breaks the Sample contract under
// opts (see Run), or nil.
func CheckSample(smp proposer.Sample, opts Options) error {
	if math.IsNaN(smp.Temperature) || math.IsInf(smp.Temperature, 0) || smp.Temperature < 0 {
		return fmt.Errorf("temperature %g, want finite and ≥ 0", smp.Temperature)
	}
	if len(smp.LogProbs) > 0 && len(smp.LogProbs) != len(smp.Tokens) {
		return fmt.Errorf("%d log-probs for %d tokens", len(smp.LogProbs), len(smp.Tokens))
	}
	for i, lp := range smp.LogProbs {
		if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 0 {
			return fmt.Errorf("log-prob[%d] = %g, want finite and ≤ 0", i, lp)
		}
	}
	if smp.Invalid {
		if strings.TrimSpace(smp.Reason) == "" {
			return errors.New("invalid sample without a reason")
		}
		return nil
	}
	if opts.RequireLogProbs && len(smp.LogProbs) == 0 {
		return errors.New("valid sample without log-probs")
	}
	if err := smp.Proposal.Validate(); err != nil {
		return fmt.Errorf("valid sample with an invalid proposal (mark it Invalid instead): %w", err)
	}
	if len(opts.Catalogue) > 0 {
		return inCatalogue(smp.Proposal, opts.Catalogue, opts.AllowNoChange)
	}
	return nil
}

func inCatalogue(p records.Proposal, cat []records.Card, allowNoChange bool) error {
	if p.IsNoChange() {
		if !allowNoChange {
			return errors.New("no-change proposal not allowed")
		}
		return nil
	}
	key := func(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
	for _, c := range cat {
		if key(c.Mechanism) != key(p.Mechanism) {
			continue
		}
		if len(p.Params) != len(c.Params) {
			return fmt.Errorf("proposal %s has %d parameters, card has %d", p.Key(), len(p.Params), len(c.Params))
		}
		for _, ps := range c.Params {
			v, ok := p.Params[ps.Name]
			if !ok {
				return fmt.Errorf("proposal %s lacks parameter %s", p.Key(), ps.Name)
			}
			found := false
			for _, ch := range ps.Choices {
				if sameValue(ch, v) {
					found = true
					break
				}
			}
			if !found {
				return fmt.Errorf("proposal %s: %s = %q is not one of %q", p.Key(), ps.Name, v, ps.Choices)
			}
		}
		return nil
	}
	return fmt.Errorf("proposal %s: mechanism %q is not in the catalogue", p.Key(), p.Mechanism)
}

func sameValue(a, b string) bool {
	fa, ea := strconv.ParseFloat(strings.TrimSpace(a), 64)
	fb, eb := strconv.ParseFloat(strings.TrimSpace(b), 64)
	if ea == nil && eb == nil {
		return fa == fb
	}
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}

func checkStats(st proposer.Stats) error {
	for _, x := range []struct {
		name string
		v    float64
	}{{"Loss", st.Loss}, {"ClipFrac", st.ClipFrac}, {"Entropy", st.Entropy}, {"KL", st.KL}} {
		if math.IsNaN(x.v) || math.IsInf(x.v, 0) {
			return fmt.Errorf("Stats.%s = %g, want finite", x.name, x.v)
		}
	}
	if st.ClipFrac < 0 || st.ClipFrac > 1 {
		return fmt.Errorf("Stats.ClipFrac = %g, want in [0, 1]", st.ClipFrac)
	}
	if st.Entropy < 0 {
		return fmt.Errorf("Stats.Entropy = %g, want ≥ 0", st.Entropy)
	}
	if st.Tokens <= 0 {
		return fmt.Errorf("Stats.Tokens = %d, want > 0", st.Tokens)
	}
	return nil
}

func seeded(a, b uint64) *rand.Rand { return rand.New(rand.NewPCG(a, b)) }

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func cloneState(s records.State) records.State {
	out := s
	out.History = make([]records.Record, len(s.History))
	for i, r := range s.History {
		out.History[i] = r
		out.History[i].Proposal = cloneProposal(r.Proposal)
		out.History[i].Seeds = append([]uint64(nil), r.Seeds...)
	}
	return out
}

func cloneProposal(p records.Proposal) records.Proposal {
	if p.Params != nil {
		m := make(map[string]string, len(p.Params))
		for k, v := range p.Params {
			m[k] = v
		}
		p.Params = m
	}
	return p
}

func cloneSamples(xs []proposer.Sample) []proposer.Sample {
	out := make([]proposer.Sample, len(xs))
	for i, x := range xs {
		out[i] = cloneSample(x)
	}
	return out
}

func cloneSample(x proposer.Sample) proposer.Sample {
	x.Proposal = cloneProposal(x.Proposal)
	x.Tokens = append([]string(nil), x.Tokens...)
	x.LogProbs = append([]float64(nil), x.LogProbs...)
	return x
}

// checkConcurrent calls p from o.Concurrency goroutines with separate
// rngs: every call succeeds with o.N samples, and with o.Deterministic
// each returns what a serial call with the same rng returns.
func checkConcurrent(t *testing.T, p proposer.Proposer, o Options) {
	const calls = 3
	type key struct{ g, c int }
	var (
		mu   sync.Mutex
		got  = map[key][]proposer.Sample{}
		errs []error
		wg   sync.WaitGroup
	)
	for g := range o.Concurrency {
		wg.Go(func() {
			for c := range calls {
				s := o.States[(g+c)%len(o.States)]
				smp, err := p.Propose(context.Background(), s, o.N, seeded(uint64(100+g), uint64(c)))
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("goroutine %d call %d: %w", g, c, err))
				} else {
					got[key{g, c}] = smp
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs, "concurrent Propose failed")
	for k, smp := range got {
		require.Len(t, smp, o.N, "goroutine %d call %d", k.g, k.c)
	}
	if !o.Deterministic {
		return
	}
	for k, smp := range got {
		s := o.States[(k.g+k.c)%len(o.States)]
		want, err := p.Propose(context.Background(), s, o.N, seeded(uint64(100+k.g), uint64(k.c)))
		require.NoError(t, err)
		if diff := cmp.Diff(want, smp, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("goroutine %d call %d: concurrent result differs from serial (-serial +concurrent):\n%s", k.g, k.c, diff)
		}
	}
}

// checkOwnedResult mutates a result of p and asks again with the same rng:
// the second result is the first as it was returned.
func checkOwnedResult(t *testing.T, p proposer.Proposer, o Options) {
	s := o.States[len(o.States)-1]
	a, err := p.Propose(context.Background(), s, o.N, seeded(5, 0))
	require.NoError(t, err)
	want := cloneSamples(a)
	for i := range a {
		for j := range a[i].Tokens {
			a[i].Tokens[j] = "mutated"
		}
		for j := range a[i].LogProbs {
			a[i].LogProbs[j] = 1
		}
		for k := range a[i].Proposal.Params {
			a[i].Proposal.Params[k] = "mutated"
		}
	}
	b, err := p.Propose(context.Background(), s, o.N, seeded(5, 0))
	require.NoError(t, err)
	if diff := cmp.Diff(want, b, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("mutating a result changed a later result (-want +got):\n%s", diff)
	}
}

// checkSamples checks every sample of o.N for each state (CheckSample)
// and that Propose leaves the state as it was.
func checkSamples(t *testing.T, p proposer.Proposer, o Options) {
	for si, s := range o.States {
		before := cloneState(s)
		got, err := p.Propose(context.Background(), s, o.N, seeded(2, uint64(si)))
		require.NoError(t, err)
		for i, smp := range got {
			if err := CheckSample(smp, o); err != nil {
				t.Errorf("state %d sample %d: %v", si, i, err)
			}
		}
		if diff := cmp.Diff(before, s, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("state %d: Propose modified the state (-before +after):\n%s", si, diff)
		}
	}
}
