package rwm

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/mat"

	"github.com/lm2lm/lm2lm/records"
)

// countdownCtx is a live ctx whose Err reports context.Canceled from its
// after-th call on (Done never fires): it ends at a chosen point inside a
// computation that polls Err, whatever the machine's speed.
type countdownCtx struct {
	context.Context
	after int64
	calls atomic.Int64
}

func newCountdown(after int64) *countdownCtx {
	return &countdownCtx{Context: context.Background(), after: after}
}

func (c *countdownCtx) Err() error {
	if c.calls.Add(1) >= c.after {
		return context.Canceled
	}
	return nil
}

// spd returns a random n×n symmetric positive definite matrix, row-major.
func spd(rng *rand.Rand, n int) []float64 {
	g := make([]float64, n*n)
	for i := range g {
		g[i] = rng.NormFloat64()
	}
	a := make([]float64, n*n)
	for i := range n {
		for j := range n {
			var s float64
			for k := range n {
				s += g[i*n+k] * g[j*n+k]
			}
			a[i*n+j] = s / float64(n)
		}
		a[i*n+i] += 0.5
	}
	return a
}

func TestCholeskyCtxMatchesGonum(t *testing.T) {
	// The blocked factorisation equals gonum's unblocked-interface
	// Cholesky (L = Uᵀ) to rounding, across block boundaries.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 5, cholBlock - 1, cholBlock, cholBlock + 1, 2*cholBlock + 7} {
		a := spd(rng, n)
		var ch mat.Cholesky
		require.True(t, ch.Factorize(mat.NewSymDense(n, append([]float64(nil), a...))))
		var u mat.TriDense
		ch.UTo(&u)
		l := append([]float64(nil), a...)
		ok, err := choleskyCtx(context.Background(), l, n)
		require.NoError(t, err)
		require.True(t, ok)
		for i := range n {
			for j := 0; j <= i; j++ {
				require.InDelta(t, u.At(j, i), l[i*n+j], 1e-12, "n=%d L[%d][%d]", n, i, j)
			}
			for j := i + 1; j < n; j++ {
				require.Equal(t, a[i*n+j], l[i*n+j], "n=%d: upper triangle untouched", n)
			}
		}
	}
}

func TestCholeskyCtxNotPositiveDefinite(t *testing.T) {
	// [[1, 2], [2, 1]] has eigenvalues 3 and −1; a 300×300 matrix with
	// one negative pivot past the first block fails there.
	ok, err := choleskyCtx(context.Background(), []float64{1, 2, 2, 1}, 2)
	require.NoError(t, err)
	require.False(t, ok)
	n := 300
	a := make([]float64, n*n)
	for i := range n {
		a[i*n+i] = 1
	}
	a[200*n+200] = -1
	ok, err = choleskyCtx(context.Background(), a, n)
	require.NoError(t, err)
	require.False(t, ok)
}

func TestCholeskyCtxCancelledInside(t *testing.T) {
	// A ctx that ends at its k-th check, for every k the factorisation of
	// 3 blocks makes (1 + 2 + 1 + 1 + 1 = 6 checks), returns its error:
	// the checks lie between the blocks, not only before the first.
	n := 3 * cholBlock
	a := spd(rand.New(rand.NewPCG(3, 4)), n)
	for k := int64(1); k <= 6; k++ {
		ctx := newCountdown(k)
		ok, err := choleskyCtx(ctx, append([]float64(nil), a...), n)
		require.ErrorIs(t, err, context.Canceled, "check %d", k)
		require.False(t, ok)
		require.Equal(t, k, ctx.calls.Load(), "stops at the check that saw the end")
	}
	ctx := newCountdown(7)
	ok, err := choleskyCtx(ctx, a, n)
	require.NoError(t, err)
	require.True(t, ok)
	require.EqualValues(t, 6, ctx.calls.Load())
}

// boundEvidence returns n real records of one task with three proposals.
func boundEvidence(t *testing.T, n int) records.Evidence {
	t.Helper()
	tk := records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1.2, SeedNoise: 0.004}
	rs := make([]records.Record, n)
	for i := range rs {
		p := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": []string{"2", "4", "0.5"}[i%3]}}
		g := math.Sin(float64(i)) * 0.008
		rs[i] = records.Record{Task: tk, Proposal: p, Gain: g, Loss: tk.RefLoss - g, Source: records.Real, Seeds: []uint64{uint64(i)}}
	}
	ev, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	return ev
}

func TestBuildCancelledInsideFactorisation(t *testing.T) {
	// Factorising 300 records checks ctx in the Gram matrix (5 row
	// blocks of ctxRows), the effects (5) and the Cholesky (3 block
	// columns, 6 checks); whichever check sees the end, the build
	// returns the ctx's error, wrapped.
	ev := boundEvidence(t, 300)
	e := testEmbedded(t, DefaultEmbeddedConfig())
	live := newCountdown(math.MaxInt64)
	require.NoError(t, e.build(live, &factor{}, ev))
	checks := live.calls.Load()
	require.EqualValues(t, 5+5+6, checks)
	for k := int64(1); k <= checks; k++ {
		err := e.build(newCountdown(k), &factor{}, ev)
		require.ErrorIs(t, err, context.Canceled, "check %d", k)
		require.Contains(t, err.Error(), "rwm: embedded: ")
	}
}

func TestPredictOwnerCancelledInsideFactorisation(t *testing.T) {
	// A query whose ctx ends while it factorises returns ctx's error and
	// holds nothing; the next query factorises and predicts.
	q := Query{Task: boundEvidence(t, 1).At(0).Task, Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "3"}}, Evidence: boundEvidence(t, 300)}
	e := testEmbedded(t, DefaultEmbeddedConfig())
	_, err := e.Predict(newCountdown(12), q) // Predict checks once, prepare 5 times, the Gram matrix 5: the 12th is the Cholesky's first
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 0, e.factors.snapshot().Len)
	_, err = e.Predict(context.Background(), q)
	require.NoError(t, err)
}

func TestTuneCancelledInsideGrid(t *testing.T) {
	// Tune on 40 records with a ctx that ends at any of its checks (each
	// configuration's start, effects, Gram rows and Cholesky blocks)
	// returns the ctx's error and base; with a ctx that never ends it
	// checks at least twice per configuration.
	ev := boundEvidence(t, 40)
	base := DefaultEmbeddedConfig()
	grid := TuneGrid(base)[:5]
	live := newCountdown(math.MaxInt64)
	_, _, err := Tune(live, base, ev, grid)
	require.NoError(t, err)
	checks := live.calls.Load()
	require.GreaterOrEqual(t, checks, int64(2*len(grid)))
	for k := int64(1); k <= checks; k++ {
		got, lm, err := Tune(newCountdown(k), base, ev, grid)
		require.ErrorIs(t, err, context.Canceled, "check %d", k)
		require.Equal(t, embeddedDigest(base), embeddedDigest(got))
		require.Zero(t, lm)
	}
}

func TestTunedPredictCancelledInsideTuning(t *testing.T) {
	// Tuned's first query with a ctx that ends in the middle of its
	// tuning returns the ctx's error; Tuned holds nothing and the next
	// query tunes again.
	q := tunedQuery()
	m := testTuned(t, DefaultEmbeddedConfig(), nil)
	_, err := m.Predict(newCountdown(100), q)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 0, m.Stats().Len)
	_, err = m.Predict(context.Background(), q)
	require.NoError(t, err)
	require.EqualValues(t, 2, m.Stats().Tunings)
}

func TestTooManyRecords(t *testing.T) {
	// A context over MaxRecords fails Predict, LogMarginal, Tune and
	// Tuned with ErrTooManyRecords naming both numbers; at the bound
	// all succeed.
	cfg := DefaultEmbeddedConfig()
	cfg.MaxRecords = 20
	at, over := boundEvidence(t, 20), boundEvidence(t, 21)
	q := Query{Task: at.At(0).Task, Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "3"}}, Evidence: at}
	ctx := context.Background()
	const msg = "rwm: embedded: 21 records in context, more than MaxRecords 20: rwm: too many records"

	_, err := testEmbedded(t, cfg).Predict(ctx, q)
	require.NoError(t, err)
	_, err = testTuned(t, cfg, nil).Predict(ctx, q)
	require.NoError(t, err)
	_, err = LogMarginal(ctx, cfg, at)
	require.NoError(t, err)
	_, _, err = Tune(ctx, cfg, at, nil)
	require.NoError(t, err)

	q.Evidence = over
	_, err = testEmbedded(t, cfg).Predict(ctx, q)
	require.ErrorIs(t, err, ErrTooManyRecords)
	require.EqualError(t, err, msg)
	_, err = testTuned(t, cfg, nil).Predict(ctx, q)
	require.ErrorIs(t, err, ErrTooManyRecords)
	require.Contains(t, err.Error(), msg)
	_, err = LogMarginal(ctx, cfg, over)
	require.ErrorIs(t, err, ErrTooManyRecords)
	require.EqualError(t, err, msg)
	_, _, err = Tune(ctx, cfg, over, nil)
	require.ErrorIs(t, err, ErrTooManyRecords)
	require.EqualError(t, err, msg)

	// A grid configuration's own bound holds too.
	small := cfg
	small.MaxRecords = 19
	_, _, err = Tune(ctx, cfg, at, []EmbeddedConfig{cfg, small})
	require.ErrorIs(t, err, ErrTooManyRecords)
	require.EqualError(t, err, "rwm: embedded: 20 records in context, more than MaxRecords 19: rwm: too many records")
}

func TestMaxRecordsDefault(t *testing.T) {
	// The default is documented; 0 reads as it; a negative bound is a
	// config error.
	require.Equal(t, 4000, DefaultMaxRecords)
	require.Equal(t, DefaultMaxRecords, DefaultEmbeddedConfig().MaxRecords)
	var c EmbeddedConfig
	require.NoError(t, c.checkRecords(DefaultMaxRecords))
	require.ErrorIs(t, c.checkRecords(DefaultMaxRecords+1), ErrTooManyRecords)
	d := DefaultEmbeddedConfig()
	d.MaxRecords = 0
	require.NoError(t, d.Validate())
	d.MaxRecords = -1
	require.EqualError(t, d.Validate(), "rwm: embedded: MaxRecords -1, want ≥ 0 (0: DefaultMaxRecords)")
	require.False(t, errors.Is(d.Validate(), ErrTooManyRecords))
}

func TestStructuralReasonQuotesExcerpts(t *testing.T) {
	// A megabyte mechanism, parameter name or value outside the catalogue
	// makes a reason of a few hundred bytes, naming its length.
	cfg := DefaultEmbeddedConfig()
	cfg.Cards = []records.Card{{Mechanism: "lr-scale", Params: []records.ParamSpec{
		{Name: "factor", Kind: "float", Min: 0.01, Max: 100},
		{Name: "mode", Kind: "enum", Choices: []string{"a", "b"}},
	}}}
	e := testEmbedded(t, cfg)
	ev := boundEvidence(t, 3)
	mb := strings.Repeat("7", 1<<20)
	for _, p := range []records.Proposal{
		{Mechanism: "m" + mb},
		{Mechanism: "lr-scale", Params: map[string]string{"p" + mb: "1"}},
		{Mechanism: "lr-scale", Params: map[string]string{"factor": "x" + mb}},
		{Mechanism: "lr-scale", Params: map[string]string{"factor": "2", "mode": "c" + mb}},
	} {
		got, err := e.Predict(context.Background(), Query{Task: ev.At(0).Task, Proposal: p, Evidence: ev})
		require.NoError(t, err)
		require.False(t, got.Valid)
		require.Contains(t, got.Reason, "bytes)")
		require.Less(t, len(got.Reason), 512, got.Reason[:min(len(got.Reason), 200)])
	}
}
