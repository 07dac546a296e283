package lm2lm

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// ErrCheckpoint marks a checkpoint that cannot be written or restored.
// Its errors quote the strings a checkpoint holds (its format, task IDs)
// as records.Excerpt does, so that a damaged or hostile checkpoint cannot
// make an error of its own size.
var ErrCheckpoint = errors.New("lm2lm: checkpoint")

// checkpointFormat names the checkpoint layout (version 3: a Loop's step
// in flight and scored groups; version 2: a checksummed envelope, WMRL
// state). Version 2 and version 1 checkpoints (a bare checkpoint with
// "version": 1, no checksum, no WMRL) are still read.
const checkpointFormat = "lm2lm/Trainer/v3"

// checkpointFormatV2 is the previous layout, read as it is: version 3 only
// adds the step in flight and the scored groups of a Loop.
const checkpointFormatV2 = "lm2lm/Trainer/v2"

// envelope is the outer JSON of a checkpoint: the format, the SHA-256 of
// the body's bytes (hex) and the body, a checkpoint.
type envelope struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	Body   json.RawMessage `json:"body"`
}

// checkpoint is the JSON form of a trainer's state between steps.
type checkpoint struct {
	Version  int                         `json:"version,omitempty"` // 1 in version 1 checkpoints; absent in the body of version 2
	Seed     uint64                      `json:"seed"`
	Step     int                         `json:"step"`
	RNG      []byte                      `json:"rng"`
	Evidence []records.Record            `json:"evidence"`
	Pool     map[string][]records.Record `json:"pool"`
	Batches  [][]proposer.Item           `json:"batches"`
	Cost     records.Cost                `json:"cost"`
	Runs     int                         `json:"runs"`
	Reused   int                         `json:"reused,omitempty"`
	Policy   []byte                      `json:"policy"`
	// Calibrations is the number of schedule points already executed.
	Calibrations int `json:"calibrations,omitempty"`
	// WMRL is the correction's state (debiaser and weighter) when WMRL is
	// on; absent otherwise.
	WMRL json.RawMessage `json:"wmrl,omitempty"`
	// Trigger is the last calibration (step, predicted and real rewards)
	// when Config.Trigger is set and a calibration has run; absent
	// otherwise.
	Trigger *lastCalibration `json:"trigger,omitempty"`
	// InFlight is a Loop's step in flight (version 3); absent between
	// steps, so always absent from a Trainer's checkpoint.
	InFlight *inFlight `json:"in_flight,omitempty"`
	// Since holds the groups a Loop scored since its last calibration
	// (ScoreGroups, version 3); absent when none.
	Since []groupJSON `json:"since,omitempty"`
}

// Loop.MarshalBinary writes the loop's part of a checkpoint (Policy
// empty); Trainer.MarshalBinary adds the policy's.

// MarshalBinary returns a checkpoint of the loop: the step, the random
// source, the evidence M, the pool of the training and unmeasured tasks, the rest of the
// current rollout, the cost so far, WMRL's debiaser and weighter when WMRL
// is on, the step in flight when there is one (InStep) and the groups
// scored since the last calibration (ScoreGroups). It is the trainer's
// checkpoint format with no policy. Restore it into a loop built with the
// same Config and tasks by UnmarshalBinary; the loop then continues
// exactly as if it had not stopped, bit for bit.
func (l *Loop) MarshalBinary() ([]byte, error) {
	cp, err := l.checkpoint()
	if err != nil {
		return nil, err
	}
	return seal(cp)
}

// UnmarshalBinary restores a checkpoint written by Loop.MarshalBinary or
// Trainer.MarshalBinary (its policy is ignored), validated as
// Trainer.UnmarshalBinary validates it (tokens unchecked: the loop knows
// no policy). On error, which wraps ErrCheckpoint, the loop is unchanged.
func (l *Loop) UnmarshalBinary(data []byte) error {
	cp, err := openCheckpoint(data)
	if err != nil {
		return err
	}
	st, err := l.restoreState(cp, nil)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	l.restore(cp, st)
	return nil
}

// checkpoint returns the loop's state as a checkpoint body.
func (l *Loop) checkpoint() (checkpoint, error) {
	rng, err := l.src.MarshalBinary()
	if err != nil {
		return checkpoint{}, fmt.Errorf("%w: rng: %w", ErrCheckpoint, err)
	}
	corr, err := l.core.corr.state()
	if err != nil {
		return checkpoint{}, fmt.Errorf("%w: WMRL: %w", ErrCheckpoint, err)
	}
	cp := checkpoint{Seed: l.cfg.Seed, Step: l.step, RNG: rng,
		Evidence: l.m.Records(), Pool: map[string][]records.Record{}, Batches: l.batches,
		Calibrations: l.calDone, WMRL: corr, Cost: l.cost, Runs: l.runs, Reused: l.reused}
	if l.cfg.Trigger != nil && l.last.Step >= 0 {
		last := l.last
		cp.Trigger = &last
	}
	for _, task := range l.stateTasks() {
		cp.Pool[task.ID] = l.pool.Records(task.ID)
	}
	cp.InFlight = l.inFlight()
	if len(l.since.groups) > 0 {
		cp.Since = groupsJSON(&l.since)
	}
	return cp, nil
}

// seal encodes cp in the checksummed envelope.
func seal(cp checkpoint) ([]byte, error) {
	body, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	sum := sha256.Sum256(body)
	b, err := json.Marshal(envelope{Format: checkpointFormat, SHA256: hex.EncodeToString(sum[:]), Body: body})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return b, nil
}

// restore replaces the loop's state by a validated checkpoint's.
func (l *Loop) restore(cp checkpoint, st restored) {
	l.abandon()
	l.step, l.m, l.pool, l.batches, l.calDone = cp.Step, st.m, st.pool, cp.Batches, cp.Calibrations
	l.src, l.rng, l.core.corr = st.src, rand.New(st.src), st.corr
	l.pendingCal = nil
	l.held = heldOut{}
	l.last = lastCalibration{Step: -1}
	if cp.Trigger != nil {
		l.last = *cp.Trigger
	}
	l.cost, l.runs, l.reused = cp.Cost, cp.Runs, cp.Reused
	l.since = rolloutData{}
	if st.since != nil {
		l.since = *st.since
	}
	if st.fl != nil {
		st.fl.apply(l)
	}
}

// MarshalBinary returns a checkpoint of the trainer between steps: the
// loop's (Loop.MarshalBinary) and the policy's. The policy must implement
// encoding.BinaryMarshaler (the embedded policy does). The checkpoint is a
// JSON envelope holding a format name and the SHA-256 of its body. Restore
// it into a trainer built with the same Config and Components by
// UnmarshalBinary; training then continues exactly as if it had not
// stopped, bit for bit (Go's JSON encoding of float64 round-trips).
func (t *Trainer) MarshalBinary() ([]byte, error) {
	pm, ok := t.c.Policy.(encoding.BinaryMarshaler)
	if !ok {
		return nil, fmt.Errorf("%w: policy %T cannot be marshalled", ErrCheckpoint, t.c.Policy)
	}
	pol, err := pm.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %w", ErrCheckpoint, err)
	}
	cp, err := t.loop.checkpoint()
	if err != nil {
		return nil, err
	}
	cp.Policy = pol
	return seal(cp)
}

// UnmarshalBinary restores a checkpoint written by MarshalBinary. The
// trainer must have been built with the same Config (the seed and WMRL
// being on or off are checked) and a policy that implements
// encoding.BinaryUnmarshaler. The whole checkpoint is validated before any
// state is replaced: the format and checksum; the step and the calibrations
// done against the schedule; the random source; real-only, valid evidence;
// pool records of the training and unmeasured tasks only (WithUnmeasured);
// mini-batches as many as the rollout has left, of those tasks, with finite advantages, log-probs
// and temperatures, one log-prob per token, and tokens the policy knows
// (when it is a proposer.Scorer); a finite, non-negative cost; WMRL's state
// (calibrate.ErrState); and the policy's own checkpoint. On error, which
// wraps ErrCheckpoint, the trainer is unchanged. The trainer's pool is
// replaced by a new one holding the checkpoint's records of those tasks,
// so a Components.Pool the host keeps is not updated afterwards
// (read Trainer.Pool instead).
func (t *Trainer) UnmarshalBinary(data []byte) error {
	cp, err := openCheckpoint(data)
	if err != nil {
		return err
	}
	sc, _ := t.c.Policy.(proposer.Scorer)
	st, err := t.loop.restoreState(cp, sc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if cp.InFlight != nil || cp.Since != nil {
		return fmt.Errorf("%w: a trainer resumes between steps; the checkpoint holds a step in flight or scored groups", ErrCheckpoint)
	}
	pu, ok := t.c.Policy.(encoding.BinaryUnmarshaler)
	if !ok {
		return fmt.Errorf("%w: policy %T cannot be unmarshalled", ErrCheckpoint, t.c.Policy)
	}
	// Last: the policy validates its checkpoint before replacing anything.
	if err := pu.UnmarshalBinary(cp.Policy); err != nil {
		return fmt.Errorf("%w: policy: %w", ErrCheckpoint, err)
	}
	t.loop.restore(cp, st)
	t.pinned = nil
	return nil
}

// openCheckpoint checks the envelope's format and checksum and decodes
// the body; a version 1 checkpoint is decoded as it is.
func openCheckpoint(data []byte) (checkpoint, error) {
	var cp checkpoint
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return cp, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if env.Format == "" {
		if err := json.Unmarshal(data, &cp); err != nil {
			return cp, fmt.Errorf("%w: %w", ErrCheckpoint, err)
		}
		if cp.Version != 1 || len(cp.WMRL) > 0 {
			return cp, fmt.Errorf("%w: neither format %q nor version 1", ErrCheckpoint, checkpointFormat)
		}
		return cp, nil
	}
	if env.Format != checkpointFormat && env.Format != checkpointFormatV2 {
		return cp, fmt.Errorf("%w: format %q, want %q", ErrCheckpoint, records.Excerpt(env.Format), checkpointFormat)
	}
	sum := sha256.Sum256(env.Body)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return cp, fmt.Errorf("%w: checksum mismatch: the checkpoint is corrupt", ErrCheckpoint)
	}
	if err := json.Unmarshal(env.Body, &cp); err != nil {
		return cp, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if cp.Version != 0 {
		return cp, fmt.Errorf("%w: body version %d in format %q", ErrCheckpoint, cp.Version, checkpointFormat)
	}
	return cp, nil
}

// restored is the state a checkpoint restores, built and validated before
// the trainer is touched.
type restored struct {
	m     records.Evidence
	pool  *records.Pool
	src   *rand.PCG
	corr  correction
	since *rolloutData
	fl    *restoredFlight
}

// restoreState validates cp against the loop and builds its state; sc,
// when not nil, checks the mini-batches' tokens.
func (l *Loop) restoreState(cp checkpoint, sc proposer.Scorer) (restored, error) {
	var st restored
	if err := l.checkProgress(cp); err != nil {
		return st, err
	}
	var err error
	if st.m, err = records.NewEvidence(cp.Evidence...); err != nil {
		return st, fmt.Errorf("evidence: %w", err)
	}
	if st.pool, err = l.restorePool(cp.Pool); err != nil {
		return st, err
	}
	st.src = &rand.PCG{}
	if err := st.src.UnmarshalBinary(cp.RNG); err != nil {
		return st, fmt.Errorf("rng: %w", err)
	}
	if err := l.checkBatches(cp, sc); err != nil {
		return st, err
	}
	if !realrun.FiniteCost(cp.Cost) || cp.Runs < 0 {
		return st, fmt.Errorf("cost %+v of %d runs is not finite and non-negative", cp.Cost, cp.Runs)
	}
	if st.corr, err = l.core.corr.restored(cp.WMRL); err != nil {
		return st, fmt.Errorf("WMRL: %w", err)
	}
	if cp.Since != nil {
		if st.since, err = l.groupsFromJSON(cp.Since); err != nil {
			return st, fmt.Errorf("scored groups: %w", err)
		}
	}
	if cp.InFlight != nil {
		if st.fl, err = l.checkInFlight(cp); err != nil {
			return st, fmt.Errorf("step in flight: %w", err)
		}
	}
	return st, nil
}

// checkProgress checks the seed, the step and the calibrations done.
func (l *Loop) checkProgress(cp checkpoint) error {
	switch {
	case cp.Seed != l.cfg.Seed:
		return fmt.Errorf("written with seed %d, trainer has seed %d", cp.Seed, l.cfg.Seed)
	case cp.Step < 0 || cp.Step > l.cfg.Steps:
		return fmt.Errorf("step %d outside 0..%d", cp.Step, l.cfg.Steps)
	case l.cfg.Calibration == Static && cp.Calibrations != 0:
		return fmt.Errorf("%d calibrations done, calibration is static", cp.Calibrations)
	case cp.Calibrations < 0 || cp.Calibrations > len(l.cfg.Schedule.Steps):
		return fmt.Errorf("%d calibrations done, schedule has %d", cp.Calibrations, len(l.cfg.Schedule.Steps))
	}
	if l.cfg.Calibration == Static {
		return nil
	}
	if l.cfg.Trigger != nil {
		return l.checkTrigger(cp)
	}
	if cp.Trigger != nil {
		return fmt.Errorf("trigger state, the trainer has no calibration trigger")
	}
	for u, s := range l.cfg.Schedule.Steps {
		// A calibration runs at the start of step s+1: done before any later
		// step, not done before its own.
		if (s < cp.Step && u >= cp.Calibrations && !l.deferred) || (s > cp.Step && u < cp.Calibrations) {
			return fmt.Errorf("%d calibrations done at step %d, schedule %v", cp.Calibrations, cp.Step, l.cfg.Schedule.Steps)
		}
	}
	return nil
}

// checkTrigger checks the calibrations done and the last calibration under
// a calibration trigger: no point past its deadline is left undone, and
// the last calibration ran at a rollout boundary no later than the step
// and its point's deadline, with finite rewards in matching groups.
func (l *Loop) checkTrigger(cp checkpoint) error {
	h := l.cfg.Trigger.Horizon
	for u, s := range l.cfg.Schedule.Steps {
		if s+h < cp.Step && u >= cp.Calibrations {
			return fmt.Errorf("calibration %d not done at step %d, its deadline is step %d", u, cp.Step, s+h)
		}
	}
	last := cp.Trigger
	switch {
	case cp.Calibrations == 0 && last == nil:
		return nil
	case cp.Calibrations == 0 || last == nil:
		return fmt.Errorf("%d calibrations done, trigger state present: %v", cp.Calibrations, last != nil)
	case last.Step < 0 || last.Step > cp.Step || last.Step%l.cfg.RolloutEvery != 0 ||
		last.Step > l.cfg.Schedule.Steps[cp.Calibrations-1]+h:
		return fmt.Errorf("last calibration at step %d, at step %d after %d calibrations", last.Step, cp.Step, cp.Calibrations)
	case len(last.Predicted) != len(last.Real):
		return fmt.Errorf("trigger state: %d predicted and %d real groups", len(last.Predicted), len(last.Real))
	}
	for g := range last.Predicted {
		if len(last.Predicted[g]) != len(last.Real[g]) {
			return fmt.Errorf("trigger state: group %d has %d predicted and %d real rewards", g, len(last.Predicted[g]), len(last.Real[g]))
		}
		for i := range last.Predicted[g] {
			if !stat.Finite(last.Predicted[g][i]) || !stat.Finite(last.Real[g][i]) {
				return fmt.Errorf("trigger state: group %d reward %d is not finite", g, i)
			}
		}
	}
	return nil
}

// restorePool rebuilds the state pool from the checkpoint's records, which
// must belong to the training tasks they are filed under.
func (l *Loop) restorePool(recs map[string][]records.Record) (*records.Pool, error) {
	known := map[string]bool{}
	for _, task := range l.stateTasks() {
		known[task.ID] = true
	}
	pool := &records.Pool{}
	for _, task := range l.stateTasks() {
		for _, r := range recs[task.ID] {
			if r.Task.ID != task.ID {
				return nil, fmt.Errorf("pool: a record of task %q filed under %q", records.Excerpt(r.Task.ID), records.Excerpt(task.ID))
			}
		}
		if err := pool.Add(recs[task.ID]...); err != nil {
			return nil, fmt.Errorf("pool: %w", err)
		}
	}
	for id := range recs {
		if !known[id] {
			return nil, fmt.Errorf("pool: task %q is not a training task", records.Excerpt(id))
		}
	}
	return pool, nil
}

// checkBatches checks the rest of the rollout: as many mini-batches as
// steps are left before the next rollout, items of training tasks with
// finite numbers, and samples the policy can score.
func (l *Loop) checkBatches(cp checkpoint, sc proposer.Scorer) error {
	re := l.cfg.RolloutEvery
	want := (re - cp.Step%re) % re
	if cp.InFlight != nil && phase(cp.InFlight.Phase) == phaseUpdate {
		want = re - cp.Step%re
	}
	if len(cp.Batches) != want {
		return fmt.Errorf("%d mini-batches left at step %d, want %d", len(cp.Batches), cp.Step, want)
	}
	tasks := map[string]records.Task{}
	for _, task := range l.stateTasks() {
		tasks[task.ID] = task
	}
	for b, batch := range cp.Batches {
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
