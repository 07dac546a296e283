package records_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/records/storetest"
)

// poolRecord is record number n of task task, of source src; its "n"
// parameter identifies it.
func poolRecord(task records.Task, n int, src records.Source) records.Record {
	r := storetest.Record(n)
	r.Task, r.Source = task, src
	r.Proposal.Params = map[string]string{"n": strconv.Itoa(n)}
	r.Loss = task.RefLoss - r.Gain
	return r
}

func recordN(t *testing.T, r records.Record) int {
	t.Helper()
	n, err := strconv.Atoi(r.Proposal.Params["n"])
	require.NoError(t, err)
	return n
}

// mixedPool holds k records of each fixture task, cycling through the
// three sources, added in one interleaved order.
func mixedPool(t *testing.T, k int) *records.Pool {
	t.Helper()
	var rs []records.Record
	srcs := []records.Source{records.Real, records.Synthetic, records.Predicted}
	for n := range k {
		for _, task := range storetest.Tasks {
			rs = append(rs, poolRecord(task, n, srcs[n%3]))
		}
	}
	p, err := records.NewPool(rs...)
	require.NoError(t, err)
	return p
}

func TestPoolAdd(t *testing.T) {
	p := &records.Pool{} // the zero value is usable
	task := storetest.Tasks[0]
	require.NoError(t, p.Add(poolRecord(task, 0, records.Real)))
	bad := poolRecord(task, 2, records.Real)
	bad.Gain = math.NaN()
	require.ErrorIs(t, p.Add(poolRecord(task, 1, records.Synthetic), bad), records.ErrInvalid)
	require.Equal(t, 1, p.Len(), "all or none")
	require.Equal(t, 1, p.Count(task.ID))
	require.Zero(t, p.Count("other"))

	// The pool keeps copies.
	r := poolRecord(task, 3, records.Predicted)
	require.NoError(t, p.Add(r))
	r.Proposal.Params["n"] = "99"
	got := p.Records(task.ID)
	require.Equal(t, []int{0, 3}, []int{recordN(t, got[0]), recordN(t, got[1])})
	got[1].Proposal.Params["n"] = "98"
	require.Equal(t, 3, recordN(t, p.Records(task.ID)[1]))
}

// TestPoolEvidenceRealOnly: METHOD.md §1 Synthetic state expansion —
// synthetic records build histories but are not evidence for the RWM.
func TestPoolEvidenceRealOnly(t *testing.T) {
	p := mixedPool(t, 9)
	ev, err := p.Evidence()
	require.NoError(t, err)
	require.Equal(t, 9, ev.Len(), "3 real records per task")
	for i := range ev.Len() {
		require.Equal(t, records.Real, ev.At(i).Source)
	}
	// Histories do draw on synthetic and predicted records.
	rng := rand.New(rand.NewPCG(1, 1))
	seen := map[records.Source]int{}
	for _, s := range p.States(rng, storetest.Tasks, 300, records.MaxHistory) {
		for _, r := range s.History {
			seen[r.Source]++
		}
	}
	require.Positive(t, seen[records.Synthetic])
	require.Positive(t, seen[records.Predicted])
	require.Positive(t, seen[records.Real])

	// A pool of synthetic records alone gives empty evidence, never an error.
	syn, err := records.NewPool(poolRecord(storetest.Tasks[0], 0, records.Synthetic))
	require.NoError(t, err)
	ev, err = syn.Evidence()
	require.NoError(t, err)
	require.Zero(t, ev.Len())
}

func TestPoolSampleShape(t *testing.T) {
	p := mixedPool(t, 20)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, maxHist := range []int{0, 1, 3, records.MaxHistory} {
		for range 500 {
			task := storetest.Tasks[rng.IntN(len(storetest.Tasks))]
			s := p.Sample(rng, task, maxHist)
			require.NoError(t, s.Validate())
			require.Equal(t, task, s.Task)
			require.LessOrEqual(t, len(s.History), maxHist)
			var ns []int
			for _, r := range s.History {
				require.Equal(t, task.ID, r.Task.ID)
				ns = append(ns, recordN(t, r))
			}
			// Oldest first by pool order and without replacement: strictly
			// increasing record numbers.
			require.True(t, slices.IsSorted(ns) && len(slices.Compact(slices.Clone(ns))) == len(ns), "history %v", ns)
		}
	}
	// A task with fewer records than maxHist, and one with none.
	small, err := records.NewPool(poolRecord(storetest.Tasks[0], 0, records.Real), poolRecord(storetest.Tasks[0], 1, records.Synthetic))
	require.NoError(t, err)
	lens := map[int]int{}
	for range 300 {
		lens[len(small.Sample(rng, storetest.Tasks[0], records.MaxHistory).History)]++
		require.Empty(t, small.Sample(rng, storetest.Tasks[1], records.MaxHistory).History)
	}
	require.Len(t, lens, 3, "lengths 0, 1 and 2 all occur: %v", lens)
}

func TestPoolSampleDeterministic(t *testing.T) {
	p := mixedPool(t, 15)
	draw := func() []records.State {
		return p.States(rand.New(rand.NewPCG(42, 43)), storetest.Tasks, 50, records.MaxHistory)
	}
	a, b := draw(), draw()
	if diff := cmp.Diff(a, b, cmpOpts...); diff != "" {
		t.Fatalf("same seed, different states (-a +b):\n%s", diff)
	}
	c := p.States(rand.New(rand.NewPCG(42, 44)), storetest.Tasks, 50, records.MaxHistory)
	require.NotEqual(t, summary(t, a), summary(t, c), "another seed, another draw")

	// The states are copies.
	for _, s := range a {
		for i := range s.History {
			s.History[i].Proposal.Params["n"] = "-1"
		}
	}
	if diff := cmp.Diff(draw(), b, cmpOpts...); diff != "" {
		t.Fatalf("mutating sampled states changed the pool (-now +before):\n%s", diff)
	}
}

// TestPoolSampleDistribution checks the documented law of Sample: the
// history length L is uniform on 0..min(maxHist, k), and given L every
// record of the task is included with probability L/k, so each record's
// overall inclusion rate is E[L]/k.
func TestPoolSampleDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("statistical test")
	}
	const k, draws = 20, 90_000
	task := storetest.Tasks[0]
	var rs []records.Record
	for n := range k {
		rs = append(rs, poolRecord(task, n, records.Synthetic))
	}
	p, err := records.NewPool(rs...)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(11, 12))
	var lens [records.MaxHistory + 1]int
	var incl [k]int
	for range draws {
		s := p.Sample(rng, task, records.MaxHistory)
		lens[len(s.History)]++
		for _, r := range s.History {
			incl[recordN(t, r)]++
		}
	}
	// Each length has probability 1/9: count ~ Binomial(90000, 1/9), mean
	// 10000, sd = sqrt(90000·(1/9)·(8/9)) ≈ 94.3; allow 5 sd.
	for l, c := range lens {
		require.InDelta(t, 10_000, c, 5*94.3, "length %d", l)
	}
	// E[L] = 4, so each record appears in 4/20 = 0.2 of the draws:
	// mean 18000, sd = sqrt(90000·0.2·0.8) = 120 (draws are independent).
	for n, c := range incl {
		require.InDelta(t, 18_000, c, 5*120, "record %d", n)
	}
}

func TestPoolSamplePanics(t *testing.T) {
	p := mixedPool(t, 2)
	rng := rand.New(rand.NewPCG(1, 2))
	require.PanicsWithValue(t, "records: Pool.Sample: maxHist 9 outside 0..8", func() { p.Sample(rng, storetest.Tasks[0], 9) })
	require.Panics(t, func() { p.Sample(rng, storetest.Tasks[0], -1) })
	require.Panics(t, func() { p.States(rng, nil, 1, 4) })
	require.Empty(t, p.States(rng, nil, 0, 4))
}

// summary lists each state's task and history record numbers.
func summary(t *testing.T, ss []records.State) []string {
	var out []string
	for _, s := range ss {
		line := s.Task.ID + ":"
		for _, r := range s.History {
			line += " " + strconv.Itoa(recordN(t, r))
		}
		out = append(out, line)
	}
	return out
}
