package lm2lm_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// seen counts, per query, the evidence records on the query's own task and
// on the others.
type seen struct {
	mu         sync.Mutex
	own, other []int
	task       []string
}

func (s *seen) world() rwm.Func {
	return func(_ context.Context, q rwm.Query) (rwm.Prediction, error) {
		var own, other int
		for _, r := range q.Evidence.Records() {
			if r.Source != records.Real {
				panic("a record that is not real in evidence")
			}
			if r.Task.ID == q.Task.ID {
				own++
			} else {
				other++
			}
		}
		s.mu.Lock()
		s.own, s.other, s.task = append(s.own, own), append(s.other, other), append(s.task, q.Task.ID)
		s.mu.Unlock()
		return rwm.Prediction{Gain: truth[q.Proposal.Mechanism][q.Proposal.Params["level"]] * q.Task.SeedNoise, Valid: true}, nil
	}
}

// heldOutEvidence is M of the held-out tests: 3 records on t0 and 2 on t1.
func heldOutEvidence(t *testing.T) records.Evidence {
	ev := m0(t, "wider", "lr", "decay")
	for _, m := range []string{"deeper", "smooth"} {
		rec, _, err := lm2lm.RunReal(context.Background(), oracle{}, oracle{}, tasks()[1], prop(m, "1"))
		require.NoError(t, err)
		ev, err = ev.Add(rec)
		require.NoError(t, err)
	}
	return ev
}

// With HeldOutTask, a training state's predictions read M without its own
// task's records, plus the real records of its history (at most M's records
// of that task, never a synthetic one); without it, M whole.
func TestHeldOutTaskEvidence(t *testing.T) {
	ownInM := map[string]int{"t0": 3, "t1": 2, "t2": 0}
	for _, held := range []bool{false, true} {
		cfg := smallConfig()
		cfg.Steps, cfg.Calibration, cfg.HeldOutTask = 16, lm2lm.Static, held
		var s seen
		pol, err := proposer.NewPolicy(catalogue(), proposer.DefaultPolicyConfig(), nil)
		require.NoError(t, err)
		tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: s.world(), Tasks: tasks(), Evidence: heldOutEvidence(t)})
		require.NoError(t, err)
		_, err = tr.Run(context.Background(), nil)
		require.NoError(t, err)
		require.NotEmpty(t, s.task)
		withHistory, fewer := 0, 0
		for k, id := range s.task {
			if !held {
				require.Equal(t, ownInM[id], s.own[k], id)
				require.Equal(t, 5-ownInM[id], s.other[k], id)
				continue
			}
			require.Equal(t, 5-ownInM[id], s.other[k], "every record of the other tasks, on %s", id)
			require.LessOrEqual(t, s.own[k], ownInM[id], "only the history's real records of %s", id)
			if s.own[k] > 0 {
				withHistory++
			}
			if s.own[k] < ownInM[id] {
				fewer++
			}
		}
		if held {
			require.Positive(t, withHistory, "some states' histories hold real records of their task")
			require.Positive(t, fewer, "and some states see fewer than all of their task's records")
		}
	}
}

// pinning is a world model that is an rwm.Pinner: it counts its Pin calls
// by the task missing from the pinned evidence, and the models it returns
// predict as seen's world, tagged with that task.
type pinning struct {
	seen
	mu     sync.Mutex
	pins   map[string]int    // Pin calls by the task whose records are absent
	judged map[string]string // query task → task of the pinned model that judged it
}

func (p *pinning) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	panic("under HeldOutTask a Pinner's own Predict is never called")
}

func (p *pinning) Pin(_ context.Context, ev records.Evidence) (rwm.WorldModel, error) {
	absent := map[string]bool{"t0": true, "t1": true, "t2": true}
	for _, r := range ev.Records() {
		delete(absent, r.Task.ID)
	}
	missing := ""
	for id := range absent {
		if ev.Len() == 5-map[string]int{"t0": 3, "t1": 2, "t2": 0}[id] {
			missing = id
		}
	}
	p.mu.Lock()
	p.pins[missing]++
	p.mu.Unlock()
	inner := p.world()
	return rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
		p.mu.Lock()
		if prev, ok := p.judged[q.Task.ID]; ok && prev != missing {
			p.mu.Unlock()
			panic("a task's states judged by models pinned for different tasks")
		}
		p.judged[q.Task.ID] = missing
		p.mu.Unlock()
		return inner(ctx, q)
	}), nil
}

// With HeldOutTask and a world model that is an rwm.Pinner, each task's
// states are judged by the model pinned on M without that task, pinned once
// per task while M does not change, on that task's state evidences (its
// history's real records added).
func TestHeldOutTaskPinsOncePerTask(t *testing.T) {
	cfg := smallConfig()
	cfg.Steps, cfg.Calibration, cfg.HeldOutTask = 16, lm2lm.Static, true
	w := &pinning{pins: map[string]int{}, judged: map[string]string{}}
	pol, err := proposer.NewPolicy(catalogue(), proposer.DefaultPolicyConfig(), nil)
	require.NoError(t, err)
	tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: w, Tasks: tasks(), Evidence: heldOutEvidence(t)})
	require.NoError(t, err)
	_, err = tr.Run(context.Background(), nil)
	require.NoError(t, err)
	require.NotEmpty(t, w.task)
	require.Equal(t, map[string]int{"t0": 1, "t1": 1, "t2": 1}, w.pins, "one pin per task over every rollout of a static M")
	require.Equal(t, map[string]string{"t0": "t0", "t1": "t1", "t2": "t2"}, w.judged)
	ownInM := map[string]int{"t0": 3, "t1": 2, "t2": 0}
	for k, id := range w.task {
		require.Equal(t, 5-ownInM[id], w.other[k], id)
		require.LessOrEqual(t, w.own[k], ownInM[id], id)
	}
}
