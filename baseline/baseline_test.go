package baseline_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/proposertest"
	"github.com/lm2lm/lm2lm/records"
)

func keys(smp []proposer.Sample) []string {
	out := make([]string, len(smp))
	for i, s := range smp {
		out[i] = s.Proposal.Key()
	}
	return out
}

func keysOf(ps ...records.Proposal) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Key()
	}
	return out
}

func newBestKnown(t *testing.T, tasks int) *baseline.BestKnown {
	t.Helper()
	cfg := baseline.DefaultBestKnownConfig()
	cfg.Tasks = tasks
	b, err := baseline.NewBestKnown(cfg, evidence())
	require.NoError(t, err)
	return b
}

// On a held-out task of family fa, the two sibling tasks' records rank the
// proposals in the order of fa's true gains; the infeasible one is last.
func TestBestKnownSiblings(t *testing.T) {
	b := newBestKnown(t, 2)
	require.Equal(t, 15, b.RealRuns())
	got, err := b.Propose(context.Background(), records.State{Task: a3}, 5, nil)
	require.NoError(t, err)
	require.Equal(t, keysOf(lr2, warm100, qk, lrHalf, warm50), keys(got))
	r := b.Rank(a3)
	require.Equal(t, 3.0, r[0].Mean)
	require.Equal(t, 2, r[0].Records)
	require.Equal(t, -6.0, r[4].Mean, "an infeasible record counts −c = −6")
}

// With three tasks pooled the other family's records dilute the means:
// hand-derived over a1, a2, b1 (σ units): lr2 (3+3−3)/3 = 1, qk
// (−1−1+4)/3 = 2/3, warm100 (1+1+0)/3 = 2/3 (a tie broken by key), lrHalf
// (−2−2+0)/3 = −4/3, warm50 (−6−6+0)/3 = −4.
func TestBestKnownThreeTasksHandDerived(t *testing.T) {
	b := newBestKnown(t, 3)
	r := b.Rank(a3)
	require.Len(t, r, 5)
	want := []struct {
		p    records.Proposal
		mean float64
	}{{lr2, 1}, {qk, 2.0 / 3}, {warm100, 2.0 / 3}, {lrHalf, -4.0 / 3}, {warm50, -4}}
	for i, w := range want {
		require.Equal(t, w.p.Key(), r[i].Proposal.Key(), "rank %d", i)
		require.InDelta(t, w.mean, r[i].Mean, 1e-12, "rank %d", i)
		require.Equal(t, 3, r[i].Records)
	}
}

// The nearest task is the task itself, then its family; a task whose family
// has one sibling with records gets that sibling's ranking.
func TestBestKnownNearest(t *testing.T) {
	b := newBestKnown(t, 1)
	got, err := b.Propose(context.Background(), records.State{Task: b2}, 1, nil)
	require.NoError(t, err)
	require.Equal(t, keysOf(qk), keys(got), "b2's only sibling with records is b1, where qk is best")
	// a1 itself has records: with one task pooled only its own count.
	r := b.Rank(a1)
	require.Equal(t, 1, r[0].Records)
	require.Equal(t, lr2.Key(), r[0].Proposal.Key())
}

// Changes already in the history are skipped; the list restarts when n
// exceeds what is known.
func TestBestKnownHistoryAndWrap(t *testing.T) {
	b := newBestKnown(t, 2)
	s := records.State{Task: a3, History: []records.Record{record(a3, lr2)}}
	got, err := b.Propose(context.Background(), s, 5, nil)
	require.NoError(t, err)
	require.Equal(t, keysOf(warm100, qk, lrHalf, warm50, warm100), keys(got))

	cfg := baseline.DefaultBestKnownConfig()
	cfg.Tasks, cfg.KeepHistory = 2, true
	kb, err := baseline.NewBestKnown(cfg, evidence())
	require.NoError(t, err)
	got, err = kb.Propose(context.Background(), s, 1, nil)
	require.NoError(t, err)
	require.Equal(t, keysOf(lr2), keys(got))
}

func TestBestKnownErrors(t *testing.T) {
	_, err := baseline.NewBestKnown(baseline.DefaultBestKnownConfig(), records.Evidence{})
	require.ErrorIs(t, err, baseline.ErrNoRecords)
	cfg := baseline.DefaultBestKnownConfig()
	cfg.Tasks = 0
	_, err = baseline.NewBestKnown(cfg, evidence())
	require.ErrorIs(t, err, baseline.ErrConfig)
	cfg = baseline.DefaultBestKnownConfig()
	cfg.Clip = 0
	_, err = baseline.NewBestKnown(cfg, evidence())
	require.ErrorIs(t, err, baseline.ErrConfig)
}

func TestBestKnownConformance(t *testing.T) {
	proposertest.Run(t, func(t *testing.T) proposer.Proposer { return newBestKnown(t, 3) },
		proposertest.Options{Deterministic: true, Catalogue: cat})
}

func newRerank(t *testing.T, w *oracle) *baseline.Rerank {
	t.Helper()
	ev := evidence()
	w.evidence = ev.Len()
	r, err := baseline.NewRerank(baseline.DefaultRerankConfig(), proposertest.FromProposals(all...), w, ev)
	require.NoError(t, err)
	return r
}

// Best-of-32 under a world model that knows the truth returns the truly
// best distinct proposals; under one that has it backwards, the worst
// feasible ones. The world model sees every real record.
func TestRerankKnownAnswer(t *testing.T) {
	w := &oracle{}
	r := newRerank(t, w)
	require.Equal(t, 15, r.RealRuns())
	got, err := r.Propose(context.Background(), records.State{Task: a3}, 3, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, keysOf(lr2, warm100, qk), keys(got))
	require.EqualValues(t, 32, w.calls.Load(), "one prediction per base sample")

	got, err = r.Propose(context.Background(), records.State{Task: b2}, 6, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	k := keys(got)
	require.Equal(t, qk.Key(), k[0], "qk is fb's best")
	require.ElementsMatch(t, keysOf(warm100, lrHalf, warm50), k[1:4], "fb's three zero-gain proposals, in draw order")
	require.Equal(t, lr2.Key(), k[4], "lr2 is fb's worst")
	require.Equal(t, qk.Key(), k[5], "five distinct proposals: the sixth restarts the list")

	neg := newRerank(t, &oracle{negate: true})
	got, err = neg.Propose(context.Background(), records.State{Task: a3}, 1, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, keysOf(lrHalf), keys(got), "the worst feasible proposal of fa, rated best by a backwards model")
}

// When the world model rates nothing valid, the base's samples come back
// as drawn.
func TestRerankNothingValid(t *testing.T) {
	w := &oracle{}
	ev := evidence()
	w.evidence = ev.Len()
	base := proposertest.FromProposals(warm50)
	r, err := baseline.NewRerank(baseline.RerankConfig{N: 4, Parallel: 2}, base, w, ev)
	require.NoError(t, err)
	got, err := r.Propose(context.Background(), records.State{Task: a3}, 2, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	require.Equal(t, keysOf(warm50, warm50), keys(got))
}

func TestRerankConformance(t *testing.T) {
	proposertest.Run(t, func(t *testing.T) proposer.Proposer { return newRerank(t, &oracle{}) },
		proposertest.Options{Deterministic: true, Catalogue: cat})
}

func TestRerankConfig(t *testing.T) {
	_, err := baseline.NewRerank(baseline.RerankConfig{N: 0, Parallel: 1}, proposertest.FromProposals(qk), &oracle{}, evidence())
	require.ErrorIs(t, err, baseline.ErrConfig)
	_, err = baseline.NewRerank(baseline.DefaultRerankConfig(), nil, &oracle{}, evidence())
	require.ErrorIs(t, err, baseline.ErrConfig)
}

// RandomDraws draws distinct catalogue pairs that M_0 does not hold, the
// same ones for the same seed, and stops when none are left.
func TestRandomDraws(t *testing.T) {
	m0 := evidence()
	tasks := []records.Task{a1, a2, a3, b1}
	d := baseline.RandomDraws(rand.New(rand.NewPCG(7, 7)), tasks, cat, 5, m0)
	require.Len(t, d, 5, "a3 has five pairs M_0 lacks")
	seen := map[string]bool{}
	for _, x := range d {
		require.Equal(t, "a3", x.Task.ID, "every other task's pairs are in M_0")
		require.False(t, seen[x.Proposal.Key()], "repeat %s", x.Proposal.Key())
		seen[x.Proposal.Key()] = true
	}
	again := baseline.RandomDraws(rand.New(rand.NewPCG(7, 7)), tasks, cat, 5, m0)
	require.Equal(t, d, again)
	require.Empty(t, baseline.RandomDraws(rand.New(rand.NewPCG(7, 7)), tasks[:2], cat, 3, m0))
}

// M'_0 is M_0 plus the extra random records, measured for real; a second
// build over the same store pays for nothing.
func TestStaticPlusRandom(t *testing.T) {
	ctx := context.Background()
	l := &lab{}
	store := records.NewMemStore()
	pcfg := builder.DefaultPoolConfig()
	pcfg.Store = store
	pool, err := builder.NewPool(l, pcfg)
	require.NoError(t, err)
	m0 := evidence()
	tasks := []records.Task{a3, b2}
	ev, spent, err := baseline.StaticPlusRandom(ctx, rand.New(rand.NewPCG(3, 3)), m0, tasks, cat, 6, l, pool, 2)
	require.NoError(t, err)
	require.Equal(t, m0.Len()+6, ev.Len())
	require.Equal(t, baseline.Spent{Runs: 6, Cost: records.Cost{DeviceSeconds: 12, WallSeconds: 6}}, spent)
	require.EqualValues(t, 6, l.runs.Load())
	for _, r := range ev.Records()[m0.Len():] {
		want := record(r.Task, r.Proposal)
		require.Equal(t, want.Gain, r.Gain, r.Proposal.Key())
		require.Equal(t, want.Infeasible != "", r.Infeasible != "", r.Proposal.Key())
	}
	again, spent, err := baseline.StaticPlusRandom(ctx, rand.New(rand.NewPCG(3, 3)), m0, tasks, cat, 6, l, pool, 2)
	require.NoError(t, err)
	require.Equal(t, baseline.Spent{Reused: 6}, spent)
	require.Equal(t, ev.Len(), again.Len())
	require.EqualValues(t, 6, l.runs.Load())
}

// With History, the real records of the state's history join the evidence
// of its predictions and synthetic ones never do; without it the world
// model sees the given evidence alone.
func TestRerankHistory(t *testing.T) {
	real := record(a3, qk)
	synth := record(a3, warm100)
	synth.Source = records.Synthetic
	s := records.State{Task: a3, History: []records.Record{real, synth}}
	for _, tc := range []struct {
		history bool
		want    int
	}{{false, 15}, {true, 16}} {
		w := &oracle{evidence: tc.want}
		r, err := baseline.NewRerank(baseline.RerankConfig{N: 8, Parallel: 2, History: tc.history}, proposertest.FromProposals(all...), w, evidence())
		require.NoError(t, err)
		got, err := r.Propose(context.Background(), s, 2, rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err, "history %v", tc.history)
		require.Equal(t, keysOf(lr2, warm100), keys(got))
		require.EqualValues(t, 8, w.calls.Load())
		require.Equal(t, 15, r.RealRuns(), "the history's records are the state's, not a run the method paid for")
		// A state without a history: the evidence alone.
		w.evidence = 15
		_, err = r.Propose(context.Background(), records.State{Task: a3}, 1, rand.New(rand.NewPCG(1, 2)))
		require.NoError(t, err)
	}
	// A history record that is not valid evidence is an error naming it.
	bad := real
	bad.Gain = math.NaN()
	w := &oracle{evidence: 16}
	r, err := baseline.NewRerank(baseline.RerankConfig{N: 8, Parallel: 2, History: true}, proposertest.FromProposals(all...), w, evidence())
	require.NoError(t, err)
	_, err = r.Propose(context.Background(), records.State{Task: a3, History: []records.Record{bad}}, 1, rand.New(rand.NewPCG(1, 2)))
	require.ErrorIs(t, err, records.ErrInvalid)
	require.ErrorContains(t, err, "history of a3")
}
