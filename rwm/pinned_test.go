package rwm_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/rwmtest"
)

// requireClose requires two predictions to agree as a refit's and a
// pinned model's must: validity and interval flags exactly, the numbers
// within 1e-9 relative.
func requireClose(t require.TestingT, want, got rwm.Prediction, msg ...any) {
	require.Equal(t, want.Valid, got.Valid, msg...)
	require.Equal(t, want.HasInterval, got.HasInterval, msg...)
	for _, v := range [][2]float64{{want.Gain, got.Gain}, {want.Low, got.Low}, {want.High, got.High}} {
		require.LessOrEqual(t, math.Abs(v[0]-v[1]), 1e-9*max(math.Abs(v[0]), 1e-300), "%v: want %v, got %v", msg, v[0], v[1])
	}
}

// without returns ev without the records of task id, and those records.
func without(ev records.Evidence, id string) (rest records.Evidence, own []records.Record) {
	var others []records.Record
	for i := range ev.Len() {
		if r := ev.At(i); r.Task.ID == id {
			own = append(own, r)
		} else {
			others = append(others, r)
		}
	}
	return mustEvidence(others), own
}

// pinOn tunes a fresh Tuned of base on rest and returns the pinned model
// and the configuration it pinned.
func pinOn(t require.TestingT, base rwm.EmbeddedConfig, rest records.Evidence) (rwm.WorldModel, rwm.EmbeddedConfig) {
	m, err := rwm.NewTuned(base, nil)
	require.NoError(t, err)
	w, err := m.Pin(context.Background(), rest)
	require.NoError(t, err)
	cfg, _, err := m.Config(context.Background(), rest)
	require.NoError(t, err)
	return w, cfg
}

// A pinned model predicts M without a task plus a state's history as a
// fresh embedded model of the pinned configuration does, whatever the
// records added: none, one, the task's whole history, duplicates of
// records already there, an infeasible record, a record of a new task,
// family, mechanism, parameter or descriptor; and an evidence that lacks
// one of M's records (not an extension) too.
func TestPinnedMatchesRefit(t *testing.T) {
	var calls atomic.Int64
	ev := dialsEvidence(120, 8, 7)
	held := ev.At(0).Task
	rest, own := without(ev, held.ID)
	require.NotEmpty(t, own)
	odd := held
	odd.ID, odd.Family = "new-task", "new-family"
	odd.Descriptors = map[string]float64{"d00": 3, "d03": -40, "fresh": 2}
	infeasible := own[0]
	infeasible.Infeasible, infeasible.Gain, infeasible.Loss = "diverged", 0, 0
	infeasible.Seeds = []uint64{999}
	for name, base := range map[string]rwm.EmbeddedConfig{
		"effects": dialsConfig(dials{&calls}), "plain": rwm.DefaultEmbeddedConfig(),
	} {
		w, cfg := pinOn(t, base, rest)
		for _, tc := range []struct {
			name  string
			evid  func() (records.Evidence, error)
			query records.Task
		}{
			{"none", func() (records.Evidence, error) { return rest, nil }, held},
			{"one", func() (records.Evidence, error) { return rest.Add(own[0]) }, held},
			{"history", func() (records.Evidence, error) { return rest.Add(own...) }, held},
			{"duplicates", func() (records.Evidence, error) { return rest.Add(own[0], own[0], rest.At(3)) }, held},
			{"infeasible", func() (records.Evidence, error) { return rest.Add(infeasible, own[1]) }, held},
			{"new names", func() (records.Evidence, error) {
				return rest.Add(real(odd, prop("z9", "novel", "7"), 2, 77), real(odd, prop("s2", "factor", "2"), -1, 78))
			}, odd},
			{"first first", func() (records.Evidence, error) {
				// The added records sort before every record of M.
				first := held
				first.ID = "0-first"
				return rest.Add(real(first, prop("s1", "factor", "4"), 1, 80))
			}, held},
			{"not an extension", func() (records.Evidence, error) {
				rs := rest.Records()
				return records.NewEvidence(append(rs[1:], own...)...)
			}, held},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				evid, err := tc.evid()
				require.NoError(t, err)
				for _, p := range []records.Proposal{prop("s3", "factor", "2"), prop("o1", "k", "a"), prop("x", "factor", "2"), prop("z9", "novel", "3")} {
					q := rwm.Query{Task: tc.query, Proposal: p, Evidence: evid}
					requireClose(t, predict(t, newEmbedded(t, cfg), q), predict(t, w, q), p.Mechanism)
				}
			})
		}
	}
}

// A pinned model's predictions depend on the query alone: states
// predicted in one order on one pinned model and in the other on another
// are the same bit for bit.
func TestPinnedOrderIndependent(t *testing.T) {
	var calls atomic.Int64
	ev := dialsEvidence(100, 6, 9)
	rest, own := without(ev, ev.At(0).Task.ID)
	base := dialsConfig(dials{&calls})
	var states []rwm.Query
	for i := range own {
		s, err := rest.Add(own[:i+1]...)
		require.NoError(t, err)
		states = append(states, rwm.Query{Task: own[0].Task, Proposal: prop("s4", "factor", "2"), Evidence: s})
	}
	first, _ := pinOn(t, base, rest)
	second, _ := pinOn(t, base, rest)
	got := make([]rwm.Prediction, len(states))
	for i, q := range states {
		got[i] = predict(t, first, q)
	}
	for i := len(states) - 1; i >= 0; i-- {
		require.Equal(t, got[i], predict(t, second, states[i]), "state %d", i)
	}
}

// A pinned model honours ctx: an ended one is refused before any work,
// and one that ends while an extension is built stops it with ctx's
// error, which is not kept: the next call builds it.
func TestPinnedCancel(t *testing.T) {
	ev := dialsEvidence(80, 6, 4)
	rest, own := without(ev, ev.At(0).Task.ID)
	var calls atomic.Int64
	w, cfg := pinOn(t, dialsConfig(dials{&calls}), rest)
	s, err := rest.Add(own...)
	require.NoError(t, err)
	q := rwm.Query{Task: own[0].Task, Proposal: prop("s1", "factor", "2"), Evidence: s}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = w.Predict(ctx, q)
	require.ErrorIs(t, err, context.Canceled)

	// The Effector cancels the ctx when the added records' effects are
	// computed.
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	cancelling := cancelOn{dials: dials{&calls}, id: own[0].Task.ID, cancel: ccancel}
	w2, _ := pinOn(t, dialsConfig(cancelling), rest)
	_, err = w2.Predict(cctx, q)
	require.ErrorIs(t, err, context.Canceled)
	// The error is not kept: the next query builds the extension.
	want := predict(t, newEmbedded(t, cfg), q)
	requireClose(t, want, predict(t, w2, q))
	requireClose(t, want, predict(t, w, q))
}

// cancelOn is dials that calls cancel when asked about task id.
type cancelOn struct {
	dials
	id     string
	cancel context.CancelFunc
}

func (c cancelOn) Effect(t records.Task, p records.Proposal) (map[string]float64, error) {
	if t.ID == c.id {
		c.cancel()
	}
	return c.dials.Effect(t, p)
}

// The pinned model passes the conformance suite: pinned on the suite's
// first 10 records, the queries on longer evidences extend them.
func TestPinnedConformance(t *testing.T) {
	rwmtest.Run(t, func(t *testing.T) rwm.WorldModel {
		w, _ := pinOn(t, rwm.DefaultEmbeddedConfig(), rwmtest.Evidence(10))
		return w
	}, rwmtest.Options{Deterministic: true})
}

// Property: for random records, a random held-out task and a random
// history of its records (and of others), the pinned model's prediction
// agrees with a fresh embedded model's of the pinned configuration within
// 1e-9 relative, with effects and descriptors on or off.
func TestPinnedMatchesRefitProperty(t *testing.T) {
	var calls atomic.Int64
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(12, 60).Draw(rt, "records")
		nt := rapid.IntRange(2, 6).Draw(rt, "tasks")
		ev := dialsEvidence(n, nt, rapid.Uint64().Draw(rt, "seed"))
		held := ev.At(rapid.IntRange(0, n-1).Draw(rt, "held")).Task
		rest, own := without(ev, held.ID)
		base := rwm.DefaultEmbeddedConfig()
		if rapid.Bool().Draw(rt, "effects") {
			base = dialsConfig(dials{&calls})
		}
		m, err := rwm.NewTuned(base, rwm.TuneGrid(base)[:3*rapid.IntRange(1, 27).Draw(rt, "grid")])
		require.NoError(rt, err)
		w, err := m.Pin(context.Background(), rest)
		require.NoError(rt, err)
		cfg, _, err := m.Config(context.Background(), rest)
		require.NoError(rt, err)
		fresh := newEmbedded(rt, cfg)
		for s := range rapid.IntRange(1, 3).Draw(rt, "states") {
			var h []records.Record
			for range rapid.IntRange(0, 8).Draw(rt, fmt.Sprint("history", s)) {
				if len(own) > 0 && rapid.IntRange(0, 4).Draw(rt, "other") > 0 {
					h = append(h, own[rapid.IntRange(0, len(own)-1).Draw(rt, "own")])
				} else {
					h = append(h, ev.At(rapid.IntRange(0, n-1).Draw(rt, "any")))
				}
			}
			evid, err := rest.Add(h...)
			require.NoError(rt, err)
			p := prop(rapid.SampledFrom([]string{"s0", "s3", "s6", "o1", "x"}).Draw(rt, "mech"), "factor",
				rapid.SampledFrom([]string{"0.25", "2", "3"}).Draw(rt, "factor"))
			q := rwm.Query{Task: held, Proposal: p, Evidence: evid}
			want, err := fresh.Predict(context.Background(), q)
			require.NoError(rt, err)
			got, err := w.Predict(context.Background(), q)
			require.NoError(rt, err)
			requireClose(rt, want, got)
		}
	})
}
