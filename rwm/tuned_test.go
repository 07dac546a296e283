package rwm_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

func TestTunedConformance(t *testing.T) {
	rwmtest.Run(t, func(*testing.T) rwm.WorldModel {
		return newTuned(t, rwm.DefaultEmbeddedConfig(), nil)
	}, rwmtest.Options{Deterministic: true, Parallel: 6})
}

// flatRecords are 30 records whose gains depend on the mechanism only, not
// on the task: Tune picks the grid's strongest task correlations for them
// (CorrAny 0.6 instead of the default 0.3, TestTune).
func flatRecords() []records.Record {
	var rs []records.Record
	for i := range 30 {
		tk := task([]string{"a", "b", "c"}[i%3], []string{"f1", "f2", "f3"}[i%3], records.BitsPerByte)
		mech := []string{"m1", "m2", "m3", "m4", "m5"}[(i/3)%5]
		rs = append(rs, real(tk, prop(mech), float64((i/3)%5)*2-4, uint64(i)))
	}
	return rs
}

func TestTunedPredictsWithTheTunedConfig(t *testing.T) {
	// Tuned's prediction is NewEmbedded(cfg).Predict with cfg what Tune
	// returns on the query's evidence (METHOD.md §1 Research World Model:
	// still a function of the task, the proposal and the records).
	ctx := context.Background()
	base := rwm.DefaultEmbeddedConfig()
	m := newTuned(t, base, nil)
	flat := evidence(t, flatRecords()...)
	queries := func(ev records.Evidence) []rwm.Query {
		var qs []rwm.Query
		for _, tk := range []records.Task{task("a", "f1", records.BitsPerByte), task("new", "f9", records.BitsPerByte), rwmtest.Task(1)} {
			for _, p := range append(rwmtest.Proposals(), prop("m5"), prop("m1")) {
				qs = append(qs, rwm.Query{Task: tk, Proposal: p, Evidence: ev})
			}
		}
		return qs
	}
	for name, ev := range map[string]records.Evidence{"flat": flat, "suite40": rwmtest.Evidence(40), "suite5": rwmtest.Evidence(5)} {
		t.Run(name, func(t *testing.T) {
			cfg, lm, err := rwm.Tune(ctx, base, ev, nil)
			require.NoError(t, err)
			got, gotLM, err := m.Config(ctx, ev)
			require.NoError(t, err)
			require.Equal(t, cfg, got)
			require.Equal(t, lm, gotLM)
			want := newEmbedded(t, cfg)
			for _, q := range queries(ev) {
				require.Equal(t, predict(t, want, q), predict(t, m, q), q.Proposal.Key())
			}
		})
	}
	// On the flat records the tuned model is not the base one: a new task
	// of an unrelated family borrows more from them (CorrAny 0.6, not 0.3).
	cfg, _, err := m.Config(ctx, flat)
	require.NoError(t, err)
	require.Equal(t, 0.6, cfg.CorrAny)
	q := rwm.Query{Task: task("new", "f9", records.BitsPerByte), Proposal: prop("m5"), Evidence: flat}
	tuned, plain := predict(t, m, q), predict(t, newEmbedded(t, base), q)
	require.Greater(t, tuned.Gain, plain.Gain)
	require.Greater(t, tuned.Gain, 0.0)
	// With fewer than 10 records Tune keeps base: the plain prediction.
	q.Evidence = rwmtest.Evidence(5)
	require.Equal(t, predict(t, newEmbedded(t, base), q), predict(t, m, q))
}

// smallGrid is a 2-configuration grid that keeps the counting tests fast.
func smallGrid(base rwm.EmbeddedConfig) []rwm.EmbeddedConfig {
	wide := base
	wide.NoiseSigmas *= 2
	return []rwm.EmbeddedConfig{base, wide}
}

func TestTunedTunesOncePerEvidence(t *testing.T) {
	ctx := context.Background()
	base := rwm.DefaultEmbeddedConfig()
	base.CacheSize = 2
	m := newTuned(t, base, smallGrid(base))
	a, b, c := rwmtest.Evidence(20), rwmtest.Evidence(21), rwmtest.Evidence(22)
	q := func(ev records.Evidence, i int) rwm.Query {
		return rwm.Query{Task: rwmtest.Task(i % 3), Proposal: rwmtest.Proposals()[i%5], Evidence: ev}
	}
	for i := range 10 {
		predict(t, m, q(a, i))
	}
	require.Equal(t, rwm.TunedStats{Tunings: 1, Hits: 9, Len: 1}, m.Stats())
	// The same records in another order are the same evidence.
	rs := a.Records()
	slices.Reverse(rs)
	predict(t, m, q(evidence(t, rs...), 0))
	require.Equal(t, rwm.TunedStats{Tunings: 1, Hits: 10, Len: 1}, m.Stats())
	// A calibration point adds records: one more tuning, then A is still held.
	predict(t, m, q(b, 0))
	predict(t, m, q(b, 1))
	predict(t, m, q(a, 2))
	require.Equal(t, rwm.TunedStats{Tunings: 2, Hits: 12, Len: 2}, m.Stats())
	// A third evidence evicts the least recently used (B), which is tuned
	// again when it comes back.
	predict(t, m, q(c, 0))
	predict(t, m, q(a, 0))
	predict(t, m, q(b, 0))
	require.Equal(t, rwm.TunedStats{Tunings: 4, Hits: 13, Evictions: 2, Len: 2}, m.Stats())
	// An invalid query is refused before any tuning.
	bad := q(rwmtest.Evidence(30), 0)
	bad.Task.SeedNoise = 0
	_, err := m.Predict(ctx, bad)
	require.ErrorIs(t, err, records.ErrInvalid)
	require.Equal(t, int64(4), m.Stats().Tunings)
}

func TestTunedConcurrentFirstQueriesTuneOnce(t *testing.T) {
	// Run with -race: 16 goroutines query two new evidence sets at once;
	// each set is tuned exactly once and every answer agrees with a
	// sequential model's.
	base := rwm.DefaultEmbeddedConfig()
	m, ref := newTuned(t, base, nil), newTuned(t, base, nil)
	evs := []records.Evidence{rwmtest.Evidence(24), evidence(t, flatRecords()...)}
	queries := make([]rwm.Query, 16)
	want := make([]rwm.Prediction, len(queries))
	for i := range queries {
		queries[i] = rwm.Query{Task: rwmtest.Task(i % 4), Proposal: rwmtest.Proposals()[i%5], Evidence: evs[i%2]}
		want[i] = predict(t, ref, queries[i])
	}
	got := make([]rwm.Prediction, len(queries))
	errs := make([]error, len(queries))
	var wg sync.WaitGroup
	for i := range queries {
		wg.Go(func() { got[i], errs[i] = m.Predict(context.Background(), queries[i]) })
	}
	wg.Wait()
	for i := range queries {
		require.NoError(t, errs[i])
		require.Equal(t, want[i], got[i])
	}
	s := m.Stats()
	require.Equal(t, int64(2), s.Tunings)
	require.Equal(t, int64(14), s.Hits+s.Coalesced)
}

func TestTunedCancelled(t *testing.T) {
	m := newTuned(t, rwm.DefaultEmbeddedConfig(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q := rwm.Query{Task: rwmtest.Task(0), Proposal: rwmtest.Proposals()[0], Evidence: rwmtest.Evidence(20)}
	_, err := m.Predict(ctx, q)
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = m.Config(ctx, q.Evidence)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, rwm.TunedStats{}, m.Stats())
}

func TestTunedID(t *testing.T) {
	base := rwm.DefaultEmbeddedConfig()
	id := newTuned(t, base, nil).ID()
	require.Regexp(t, `^rwm\.Tuned/[0-9a-f]{16}$`, id)
	require.Equal(t, id, newTuned(t, base, rwm.TuneGrid(base)).ID())
	require.NotEqual(t, newEmbedded(t, base).ID(), id)
	other := base
	other.NoiseSigmas = 0.5
	ids := map[string]string{
		"default":    id,
		"small grid": newTuned(t, base, smallGrid(base)).ID(),
		"base noise": newTuned(t, other, nil).ID(),
		"base only":  newTuned(t, base, []rwm.EmbeddedConfig{base}).ID(),
	}
	desc := base
	desc.DescriptorWeight = 0.5
	ids["descriptors"] = newTuned(t, desc, nil).ID()
	priors := base
	priors.Priors = map[string]records.Prior{"lr-scale": {Mean: 1, Std: 2}}
	ids["priors"] = newTuned(t, priors, nil).ID()
	seen := map[string]string{}
	for name, id := range ids {
		require.NotContains(t, seen, id, "%s and %s share an ID", name, seen[id])
		seen[id] = name
	}
	// The grid is copied: changing the caller's slice changes nothing.
	grid := smallGrid(base)
	m := newTuned(t, base, grid)
	grid[1].NoiseSigmas = 9
	require.Equal(t, 2.0, m.Grid()[1].NoiseSigmas)
	require.Equal(t, base, m.Base())
}

func TestNewTunedRejectsBadConfig(t *testing.T) {
	base := rwm.DefaultEmbeddedConfig()
	bad := base
	bad.Lengthscale = math.NaN()
	_, err := rwm.NewTuned(base, []rwm.EmbeddedConfig{})
	require.ErrorIs(t, err, rwm.ErrConfig)
	require.EqualError(t, err, "rwm: invalid config: tuned: empty grid")
	_, err = rwm.NewTuned(bad, nil)
	require.ErrorIs(t, err, rwm.ErrConfig)
	require.EqualError(t, err, bad.Validate().Error())
	_, err = rwm.NewTuned(base, []rwm.EmbeddedConfig{base, bad})
	require.ErrorIs(t, err, rwm.ErrConfig)
	require.EqualError(t, err, fmt.Sprintf("rwm: invalid config: tuned: grid[1]: %v", bad.Validate()))
}

// Pin fixes the configuration tuned on one evidence: its model predicts
// that evidence as Tuned does, and an evidence extended by a record with
// the pinned hyperparameters, without tuning again (lm2lm.Config.
// HeldOutTask's one tuning per task).
func TestTunedPin(t *testing.T) {
	ctx := context.Background()
	base := rwm.DefaultEmbeddedConfig()
	m := newTuned(t, base, nil)
	flat := evidence(t, flatRecords()...)
	pinned, err := m.Pin(ctx, flat)
	require.NoError(t, err)
	require.Equal(t, rwm.TunedStats{Tunings: 1, Len: 1}, m.Stats())
	cfg, _, err := m.Config(ctx, flat)
	require.NoError(t, err)
	require.Equal(t, 0.6, cfg.CorrAny, "the flat records' tuning is not the base")
	newTask := task("new", "f9", records.BitsPerByte)
	q := rwm.Query{Task: newTask, Proposal: prop("m5"), Evidence: flat}
	require.Equal(t, predict(t, m, q), predict(t, pinned, q))
	// Extended by a record of the new task: the pinned configuration, not
	// a new tuning.
	q.Evidence, err = flat.Add(real(newTask, prop("m1"), 3, 99))
	require.NoError(t, err)
	got := predict(t, pinned, q)
	require.Equal(t, predict(t, newEmbedded(t, cfg), q), got)
	require.Equal(t, int64(1), m.Stats().Tunings, "Pin's model never tunes")
	// Tuned itself tunes the extended evidence.
	predict(t, m, q)
	require.Equal(t, int64(2), m.Stats().Tunings)
	// A second Pin of the same evidence is a hit; an ended ctx is refused.
	again, err := m.Pin(ctx, flat)
	require.NoError(t, err)
	require.Equal(t, got, predict(t, again, q))
	require.Equal(t, int64(2), m.Stats().Tunings)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Pin(cctx, rwmtest.Evidence(40))
	require.ErrorIs(t, err, context.Canceled)
}

// A Ledger over a Tuned pins through to it: the pinned model predicts as
// the Tuned's own pinned model, tunes no more, and its calls are the
// ledger's; a Ledger over a model that does not pin returns itself.
func TestLedgerPinsThrough(t *testing.T) {
	ctx := context.Background()
	m := newTuned(t, rwm.DefaultEmbeddedConfig(), nil)
	l := rwm.NewLedger(m)
	flat := evidence(t, flatRecords()...)
	pinned, err := l.Pin(ctx, flat)
	require.NoError(t, err)
	direct, err := m.Pin(ctx, flat)
	require.NoError(t, err)
	newTask := task("new", "f9", records.BitsPerByte)
	q := rwm.Query{Task: newTask, Proposal: prop("m5"), Evidence: flat}
	q.Evidence, err = flat.Add(real(newTask, prop("m1"), 3, 99))
	require.NoError(t, err)
	require.Equal(t, predict(t, direct, q), predict(t, pinned, q))
	require.Equal(t, int64(1), m.Stats().Tunings, "one tuning, on the pinned evidence")
	require.Equal(t, int64(1), l.Stats().Calls, "the pinned model's call is the ledger's")
	require.Equal(t, direct.(rwm.Identifier).ID(), pinned.(rwm.Identifier).ID())

	e := newEmbedded(t, rwm.DefaultEmbeddedConfig())
	el := rwm.NewLedger(e)
	same, err := el.Pin(ctx, flat)
	require.NoError(t, err)
	require.Same(t, el, same)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Pin(cctx, rwmtest.Evidence(40))
	require.ErrorIs(t, err, context.Canceled)
}
