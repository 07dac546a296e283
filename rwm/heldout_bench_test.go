package rwm_test

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// heldOutStates returns, for evidence ev, ev without the records of
// ev.At(0)'s task and nStates evidences that add to it 1 to 8 records of
// that task (a state's history), drawn from a seeded generator: the
// evidences of lm2lm.Config.HeldOutTask for one task.
func heldOutStates(ev records.Evidence, nStates int, seed uint64) (rest records.Evidence, states []records.Evidence) {
	id := ev.At(0).Task.ID
	var own, others []records.Record
	for i := range ev.Len() {
		if r := ev.At(i); r.Task.ID == id {
			own = append(own, r)
		} else {
			others = append(others, r)
		}
	}
	rest = mustEvidence(others)
	rng := rand.New(rand.NewPCG(seed, 3))
	for range nStates {
		h := make([]records.Record, 1+rng.IntN(8))
		for i := range h {
			h[i] = own[rng.IntN(len(own))]
		}
		s, err := rest.AddReal(h...)
		if err != nil {
			panic(err)
		}
		states = append(states, s)
	}
	return rest, states
}

// BenchmarkHeldOutStates measures what HeldOutTask asks of a tuned world
// model with effects on (dialsConfig) for one task and one M of 300
// records over 16 tasks: pinning it on M without the task (a tuning over
// TuneGrid's 81 configurations), then predicting 8 proposals for each of
// 128 states whose evidences add 1 to 8 records of the task's history.
// "pin" is the tuning alone and "states" the 128 states' predictions on a
// pinned model; "tuned" is what a Tuned that is not pinned does instead
// for the first 16 states: a tuning on each state's evidence, then its 8
// predictions.
func BenchmarkHeldOutStates(b *testing.B) {
	ev := dialsEvidence(300, 16, 11)
	rest, states := heldOutStates(ev, 128, 5)
	task := ev.At(0).Task
	props := []records.Proposal{prop("s1", "factor", "2"), prop("s3", "factor", "3"), prop("s5", "factor", "0.5"), prop("o1", "k", "a"),
		prop("o2", "k", "b"), prop("s0", "factor", "4"), prop("s6", "factor", "0.25"), prop("x", "factor", "2")}
	var calls atomic.Int64
	cfg := dialsConfig(dials{&calls})
	ctx := context.Background()
	pin := func() rwm.WorldModel {
		w, err := newTuned(b, cfg, nil).Pin(ctx, rest)
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	b.Run("pin", func(b *testing.B) {
		for b.Loop() {
			pin()
		}
	})
	b.Run("tuned", func(b *testing.B) {
		for b.Loop() {
			m := newTuned(b, cfg, nil)
			for _, s := range states[:16] {
				for _, p := range props {
					if _, err := m.Predict(ctx, rwm.Query{Task: task, Proposal: p, Evidence: s}); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	})
	b.Run("states", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			w := pin()
			b.StartTimer()
			for _, s := range states {
				for _, p := range props {
					if _, err := w.Predict(ctx, rwm.Query{Task: task, Proposal: p, Evidence: s}); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	})
}
