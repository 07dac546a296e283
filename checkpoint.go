package lm2lm

import (
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// ErrCheckpoint marks a checkpoint that cannot be written or restored
// (loop.ErrCheckpoint). Its errors quote the strings a checkpoint holds as
// records.Excerpt does.
var ErrCheckpoint = loop.ErrCheckpoint

// trainerPart is the Trainer's part of a loop checkpoint: its step, the
// current rollout's mini-batches left and the policy's checkpoint.
type trainerPart struct {
	Step    int               `json:"step"`
	Batches [][]proposer.Item `json:"batches"`
	Policy  []byte            `json:"policy"`
}

// MarshalBinary returns a checkpoint of the trainer between steps: the
// loop's (loop.Loop.Checkpoint) holding, as its driver's part, the step,
// the current rollout's mini-batches left and the policy's checkpoint. The
// policy must implement encoding.BinaryMarshaler (the embedded policy
// does). Restore it into a trainer built with the same Config and
// Components by UnmarshalBinary; training then continues exactly as if it
// had not stopped, bit for bit (Go's JSON encoding of float64
// round-trips).
func (t *Trainer) MarshalBinary() ([]byte, error) {
	pm, ok := t.c.Policy.(encoding.BinaryMarshaler)
	if !ok {
		return nil, fmt.Errorf("%w: policy %T cannot be marshalled", ErrCheckpoint, t.c.Policy)
	}
	pol, err := pm.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %w", ErrCheckpoint, err)
	}
	part, err := json.Marshal(trainerPart{Step: t.step, Batches: t.batches, Policy: pol})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return t.loop.Checkpoint(part)
}

// UnmarshalBinary restores a checkpoint written by MarshalBinary, or by a
// Trainer of an earlier version (formats lm2lm/Trainer/v1 to v3). The
// trainer must have been built with the same Config (the seed and WMRL
// being on or off are checked) and a policy that implements
// encoding.BinaryUnmarshaler. The whole checkpoint is validated before any
// state is replaced: the loop's part (loop.Loop.Restore); a trainer's part
// (a loop checkpoint of another driver, such as the environment service's,
// is refused); the step and the calibrations done against the schedule,
// a calibration in flight (a step that failed in its runs) included;
// mini-batches as many as the rollout has left,
// of the training and unmeasured tasks, with finite advantages, log-probs
// and temperatures, one log-prob per token, and tokens the policy knows
// (when it is a proposer.Scorer); and the policy's own checkpoint. On
// error, which wraps ErrCheckpoint, the trainer is unchanged. The
// trainer's pool is replaced by a new one holding the checkpoint's
// records, so a Components.Pool the host keeps is not updated afterwards
// (read Trainer.Pool instead).
func (t *Trainer) UnmarshalBinary(data []byte) error {
	pu, ok := t.c.Policy.(encoding.BinaryUnmarshaler)
	if !ok {
		return fmt.Errorf("%w: policy %T cannot be unmarshalled", ErrCheckpoint, t.c.Policy)
	}
	var part trainerPart
	err := t.loop.Restore(data, func(driver json.RawMessage, st loop.Status) error {
		if len(driver) == 0 {
			return fmt.Errorf("no trainer's part: a loop checkpoint of another driver")
		}
		if err := json.Unmarshal(driver, &part); err != nil {
			return fmt.Errorf("trainer's part: %w", err)
		}
		if err := t.checkProgress(part.Step, st.Calibrations); err != nil {
			return err
		}
		// A step that failed in its calibration's runs leaves them pending:
		// the retry executes them. Under the fixed schedule the point is
		// due at the step.
		if u := st.Calibrations; st.Calibrating && t.cfg.Trigger == nil && t.cfg.Schedule.Steps[u] != part.Step {
			return fmt.Errorf("calibration %d in flight at step %d, scheduled at step %d", u, part.Step, t.cfg.Schedule.Steps[u])
		}
		if err := t.checkBatches(part); err != nil {
			return err
		}
		// Last: the policy validates its checkpoint before replacing anything.
		if err := pu.UnmarshalBinary(part.Policy); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.step, t.batches, t.pendingCal, t.pinned = part.Step, part.Batches, nil, nil
	return nil
}

// checkProgress checks the step and the calibrations done: a Trainer
// calibrates at the start of the step after a point's scheduled step, so
// no point before the step is left undone (with a trigger: no point past
// its deadline) and, under the fixed schedule, none after it is done.
func (t *Trainer) checkProgress(step, done int) error {
	if step < 0 || step > t.cfg.Steps {
		return fmt.Errorf("step %d outside 0..%d", step, t.cfg.Steps)
	}
	if t.cfg.Calibration == Static {
		return nil
	}
	h := 0
	if t.cfg.Trigger != nil {
		h = t.cfg.Trigger.Horizon
	}
	for u, s := range t.cfg.Schedule.Steps {
		if s+h < step && u >= done {
			return fmt.Errorf("calibration %d not done at step %d, its deadline is step %d", u, step, s+h)
		}
		if t.cfg.Trigger == nil && s > step && u < done {
			return fmt.Errorf("%d calibrations done at step %d, schedule %v", done, step, t.cfg.Schedule.Steps)
		}
	}
	return nil
}

// checkBatches checks the rest of the rollout: as many mini-batches as
// steps are left before the next rollout, items of training tasks with
// finite numbers, and samples the policy can score.
func (t *Trainer) checkBatches(part trainerPart) error {
	re := t.cfg.RolloutEvery
	if want := (re - part.Step%re) % re; len(part.Batches) != want {
		return fmt.Errorf("%d mini-batches left at step %d, want %d", len(part.Batches), part.Step, want)
	}
	tasks := map[string]records.Task{}
	for _, task := range append(append([]records.Task(nil), t.c.Tasks...), t.c.Unmeasured...) {
		tasks[task.ID] = task
	}
	sc, _ := t.c.Policy.(proposer.Scorer)
	for b, batch := range part.Batches {
		if len(batch) == 0 {
			return fmt.Errorf("mini-batch %d is empty", b)
		}
		for i, it := range batch {
			if err := checkItem(it, tasks, sc); err != nil {
				return fmt.Errorf("mini-batch %d item %d: %w", b, i, err)
			}
		}
	}
	return nil
}

// checkItem checks one mini-batch item.
func checkItem(it proposer.Item, tasks map[string]records.Task, sc proposer.Scorer) error {
	if task, ok := tasks[it.State.Task.ID]; !ok || task.Validate() != nil {
		return fmt.Errorf("task %q is not a training task", records.Excerpt(it.State.Task.ID))
	}
	s := it.Sample
	switch {
	case math.IsNaN(it.Advantage) || math.IsInf(it.Advantage, 0):
		return fmt.Errorf("advantage %g is not finite", it.Advantage)
	case math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0) || s.Temperature < 0:
		return fmt.Errorf("temperature %g", s.Temperature)
	case s.Invalid:
		return nil
	case len(s.LogProbs) != len(s.Tokens) || len(s.Tokens) == 0:
		return fmt.Errorf("%d log-probs for %d tokens", len(s.LogProbs), len(s.Tokens))
	}
	for k, lp := range s.LogProbs {
		if math.IsNaN(lp) || math.IsInf(lp, 0) || lp > 0 {
			return fmt.Errorf("log-prob %d = %g", k, lp)
		}
	}
	if err := s.Proposal.Validate(); err != nil {
		return err
	}
	if sc != nil {
		lp, err := sc.Score(context.Background(), it.State, s)
		if err != nil {
			return fmt.Errorf("tokens the policy does not know: %w", err)
		}
		if len(lp) != len(s.Tokens) {
			return fmt.Errorf("the policy scores %d tokens, the sample has %d", len(lp), len(s.Tokens))
		}
	}
	return nil
}
