package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/records"
)

// format names the checkpoint layout. Checkpoints of the earlier layouts
// (formats lm2lm/Trainer/v3 and v2, and version 1, a bare body with
// "version": 1) are still read: the method's state is where it was, and a
// Trainer's mini-batches and policy are handed to the driver as its part.
const format = "lm2lm/Loop/v1"

// oldFormats are the earlier layouts Restore reads.
var oldFormats = map[string]bool{"lm2lm/Trainer/v3": true, "lm2lm/Trainer/v2": true}

// envelope is the outer JSON of a checkpoint: the format, the SHA-256 of
// the body's bytes (hex) and the body.
type envelope struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	Body   json.RawMessage `json:"body"`
}

// body is the JSON form of a loop's state.
type body struct {
	Version  int                         `json:"version,omitempty"` // 1 in version 1 checkpoints, absent since
	Seed     uint64                      `json:"seed"`
	Step     int                         `json:"step"`
	RNG      []byte                      `json:"rng"`
	Evidence []records.Record            `json:"evidence"`
	Pool     map[string][]records.Record `json:"pool"`
	Cost     records.Cost                `json:"cost"`
	Runs     int                         `json:"runs"`
	Reused   int                         `json:"reused,omitempty"`
	// Calibrations is the number of schedule points executed.
	Calibrations int `json:"calibrations,omitempty"`
	// WMRL is the correction's state when WMRL is on.
	WMRL json.RawMessage `json:"wmrl,omitempty"`
	// Trigger is the last calibration when Config.Trigger is set and a
	// calibration has run.
	Trigger *lastCalibration `json:"trigger,omitempty"`
	// InFlight is the calibration in flight; Since the candidates.
	InFlight *inFlight   `json:"in_flight,omitempty"`
	Since    []groupJSON `json:"since,omitempty"`
	// Driver is the driver's own part (Checkpoint's argument).
	Driver json.RawMessage `json:"driver,omitempty"`
	// Batches and Policy are a Trainer's part in the earlier layouts.
	Batches json.RawMessage `json:"batches,omitempty"`
	Policy  json.RawMessage `json:"policy,omitempty"`
}

// Checkpoint returns the loop's state with the driver's own part (opaque
// to the loop; nil for none) in a JSON envelope holding a format name and
// the SHA-256 of its body: the driver's step as last observed, the random
// source, the evidence M, the pool of the training and unmeasured tasks,
// the cost so far, the calibration state (points done, the one in flight,
// the trigger's last monitors), WMRL's debiaser and weighter, and the
// candidates. A loop restored from it (Restore) goes on exactly as this
// one would, bit for bit. A batch's synthetic records not yet added
// (Expand) are not in it, and it refuses while anchor runs are pending:
// checkpoint once they are absorbed. It is Snapshot, encoded.
func (l *Loop) Checkpoint(driver json.RawMessage) ([]byte, error) {
	sn, err := l.Snapshot(driver)
	if err != nil {
		return nil, err
	}
	return sn.Encode()
}

// Snapshot is a loop's state as Checkpoint writes it, not yet encoded. It
// holds copies of what the loop changes in place and shares only what the
// loop never changes once made (M's records, the pool's records, the
// values of the candidates' states and samples), so a driver that serialises the loop's calls takes
// it under its lock and encodes it off the lock, which is most of a
// checkpoint's cost.
type Snapshot struct{ b body }

// Snapshot returns the loop's state at this moment (see Checkpoint); it
// refuses while anchor runs are pending.
func (l *Loop) Snapshot(driver json.RawMessage) (*Snapshot, error) {
	if l.plan != nil {
		return nil, fmt.Errorf("%w: anchor runs are pending", ErrCheckpoint)
	}
	rng, err := l.src.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: rng: %w", ErrCheckpoint, err)
	}
	corr, err := l.core.corr.state()
	if err != nil {
		return nil, fmt.Errorf("%w: WMRL: %w", ErrCheckpoint, err)
	}
	b := body{Seed: l.cfg.Seed, Step: l.step, RNG: rng, Evidence: l.m.Records(), Pool: map[string][]records.Record{},
		Calibrations: l.calDone, WMRL: corr, Cost: l.cost, Runs: l.runs, Reused: l.reused, Driver: driver}
	if l.cfg.Trigger != nil && l.last.Step >= 0 {
		last := l.last // replaced whole by each calibration, never changed in place
		b.Trigger = &last
	}
	for _, task := range l.stateTasks() {
		b.Pool[task.ID] = l.pool.Shared(task.ID) // never changed in place
	}
	b.InFlight = l.inFlight()
	if len(l.since.groups) > 0 {
		b.Since = groupsJSON(&l.since)
	}
	return &Snapshot{b: b}, nil
}

// Encode returns the snapshot as Checkpoint does. It is safe to call while
// the loop goes on.
func (s *Snapshot) Encode() ([]byte, error) {
	raw, err := json.Marshal(s.b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	sum := sha256.Sum256(raw)
	out, err := json.Marshal(envelope{Format: format, SHA256: hex.EncodeToString(sum[:]), Body: raw})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return out, nil
}

// Restore replaces the loop's state by a checkpoint's, written by
// Checkpoint for a loop with the same Config and Setup (the seed and WMRL
// being on or off are checked). The whole checkpoint is validated first:
// the format and checksum; the calibrations done against the schedule and
// the trigger's state; the random source; real-only, valid evidence; pool
// records of the training and unmeasured tasks only; a finite,
// non-negative cost; WMRL's state (calibrate.ErrState); the candidates and
// the calibration in flight. Then accept, when not nil, is called with the
// driver's part and the state the loop would take; its error refuses the
// checkpoint. For a checkpoint of an earlier layout the driver's part is
// {"step", "batches", "policy"}, a Trainer's. On error, which wraps
// ErrCheckpoint, the loop is unchanged. The loop's pool is replaced by a
// new one holding the checkpoint's records (Status().Pool).
func (l *Loop) Restore(data []byte, accept func(driver json.RawMessage, st Status) error) error {
	b, err := open(data)
	if err != nil {
		return err
	}
	next, err := l.restored(b)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if accept != nil {
		if err := accept(b.Driver, next.Status()); err != nil {
			return fmt.Errorf("%w: %w", ErrCheckpoint, err)
		}
	}
	*l = *next
	return nil
}

// open checks the envelope's format and checksum and decodes the body; an
// earlier layout's Trainer part becomes the driver's.
func open(data []byte) (body, error) {
	var b body
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return b, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	raw := []byte(env.Body)
	switch {
	case env.Format == "":
		if err := json.Unmarshal(data, &b); err != nil {
			return b, fmt.Errorf("%w: %w", ErrCheckpoint, err)
		}
		if b.Version != 1 || len(b.WMRL) > 0 || len(b.Driver) > 0 {
			return b, fmt.Errorf("%w: neither format %q nor version 1", ErrCheckpoint, format)
		}
		return b, oldDriver(&b)
	case env.Format != format && !oldFormats[env.Format]:
		return b, fmt.Errorf("%w: format %q, want %q", ErrCheckpoint, records.Excerpt(env.Format), format)
	}
	sum := sha256.Sum256(raw)
	if hex.EncodeToString(sum[:]) != env.SHA256 {
		return b, fmt.Errorf("%w: checksum mismatch: the checkpoint is corrupt", ErrCheckpoint)
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return b, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if b.Version != 0 {
		return b, fmt.Errorf("%w: body version %d in format %q", ErrCheckpoint, b.Version, records.Excerpt(env.Format))
	}
	if env.Format == format {
		if len(b.Batches) > 0 || len(b.Policy) > 0 {
			return b, fmt.Errorf("%w: a trainer's mini-batches or policy outside its driver part", ErrCheckpoint)
		}
		return b, nil
	}
	if len(b.Driver) > 0 {
		return b, fmt.Errorf("%w: a driver part in format %q", ErrCheckpoint, records.Excerpt(env.Format))
	}
	return b, oldDriver(&b)
}

// oldDriver makes an earlier layout's Trainer part the driver's.
func oldDriver(b *body) error {
	d, err := json.Marshal(struct {
		Step    int             `json:"step"`
		Batches json.RawMessage `json:"batches,omitempty"`
		Policy  json.RawMessage `json:"policy,omitempty"`
	}{b.Step, b.Batches, b.Policy})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	b.Driver, b.Batches, b.Policy = d, nil, nil
	return nil
}

// restored returns a new loop of l's configuration and tasks holding b's
// state, validated.
func (l *Loop) restored(b body) (*Loop, error) {
	if err := l.checkProgress(b); err != nil {
		return nil, err
	}
	next := &Loop{cfg: l.cfg, tasks: l.tasks, unmeasured: l.unmeasured, core: l.core, step: b.Step,
		calDone: b.Calibrations, last: lastCalibration{Step: -1}, cost: b.Cost, runs: b.Runs, reused: b.Reused}
	var err error
	if next.m, err = records.NewEvidence(b.Evidence...); err != nil {
		return nil, fmt.Errorf("evidence: %w", err)
	}
	if next.pool, err = l.restorePool(b.Pool); err != nil {
		return nil, err
	}
	next.src = &rand.PCG{}
	if err := next.src.UnmarshalBinary(b.RNG); err != nil {
		return nil, fmt.Errorf("rng: %w", err)
	}
	next.rng = rand.New(next.src)
	if !realrun.FiniteCost(b.Cost) || b.Runs < 0 || b.Reused < 0 {
		return nil, fmt.Errorf("cost %+v of %d runs is not finite and non-negative", b.Cost, b.Runs)
	}
	if next.core.corr, err = l.core.corr.restored(b.WMRL); err != nil {
		return nil, fmt.Errorf("WMRL: %w", err)
	}
	if b.Trigger != nil {
		next.last = *b.Trigger
	}
	if b.Since != nil {
		since, err := l.groupsFromJSON(b.Since)
		if err != nil {
			return nil, fmt.Errorf("candidates: %w", err)
		}
		next.since = *since
	}
	if b.InFlight != nil {
		if next.cal, err = l.restoreFlight(b); err != nil {
			return nil, fmt.Errorf("calibration in flight: %w", err)
		}
	}
	return next, nil
}

// checkProgress checks the seed, the step and the calibrations done.
func (l *Loop) checkProgress(b body) error {
	switch {
	case b.Seed != l.cfg.Seed:
		return fmt.Errorf("written with seed %d, the loop has seed %d", b.Seed, l.cfg.Seed)
	case b.Step < 0:
		return fmt.Errorf("step %d", b.Step)
	case l.cfg.Calibration == Static && b.Calibrations != 0:
		return fmt.Errorf("%d calibrations done, calibration is static", b.Calibrations)
	case b.Calibrations < 0 || b.Calibrations > len(l.cfg.Schedule.Steps):
		return fmt.Errorf("%d calibrations done, schedule has %d", b.Calibrations, len(l.cfg.Schedule.Steps))
	}
	if l.cfg.Trigger != nil {
		return l.checkTrigger(b)
	}
	if b.Trigger != nil {
		return fmt.Errorf("trigger state, the loop has no calibration trigger")
	}
	return nil
}

// checkTrigger checks the last calibration under a calibration trigger:
// present once a point ran, at a step no later than the checkpoint's and
// its point's deadline, with finite rewards in matching groups.
func (l *Loop) checkTrigger(b body) error {
	h := l.cfg.Trigger.Horizon
	last := b.Trigger
	switch {
	case b.Calibrations == 0 && last == nil:
		return nil
	case b.Calibrations == 0 || last == nil:
		return fmt.Errorf("%d calibrations done, trigger state present: %v", b.Calibrations, last != nil)
	case last.Step < 0 || last.Step > b.Step || last.Step > l.cfg.Schedule.Steps[b.Calibrations-1]+h:
		return fmt.Errorf("last calibration at step %d, at step %d after %d calibrations", last.Step, b.Step, b.Calibrations)
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
// must belong to the tasks they are filed under.
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
