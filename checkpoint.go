package lm2lm

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// ErrCheckpoint marks a checkpoint that cannot be written or restored.
var ErrCheckpoint = errors.New("lm2lm: checkpoint")

const checkpointVersion = 1

// checkpoint is the JSON form of a trainer's state between steps.
type checkpoint struct {
	Version  int                         `json:"version"`
	Seed     uint64                      `json:"seed"`
	Step     int                         `json:"step"`
	RNG      []byte                      `json:"rng"`
	Evidence []records.Record            `json:"evidence"`
	Pool     map[string][]records.Record `json:"pool"`
	Batches  [][]proposer.Item           `json:"batches"`
	Cost     records.Cost                `json:"cost"`
	Runs     int                         `json:"runs"`
	Policy   []byte                      `json:"policy"`
	// Calibrations is the number of schedule points already executed (absent
	// in older checkpoints: 0, which is right for any checkpoint written
	// between completed steps).
	Calibrations int `json:"calibrations,omitempty"`
}

// MarshalBinary returns a checkpoint of the trainer between steps: the
// step, the random source, the evidence M, the pool of the training tasks,
// the rest of the current rollout, the cost so far and the policy. The
// policy must implement encoding.BinaryMarshaler (the embedded policy
// does). Restore it into a trainer built with the same Config and
// Components by UnmarshalBinary; training then continues exactly as if it
// had not stopped.
//
// Checkpoints of a trainer with WMRL on are not supported yet: the
// debiaser's fit history cannot be restored exactly, so MarshalBinary
// returns an error wrapping ErrCheckpoint rather than a checkpoint that
// would resume differently.
func (t *Trainer) MarshalBinary() ([]byte, error) {
	if _, on := t.core.corr.(*wmrl); on {
		return nil, fmt.Errorf("%w: trainers with WMRL on cannot be checkpointed", ErrCheckpoint)
	}
	pm, ok := t.c.Policy.(encoding.BinaryMarshaler)
	if !ok {
		return nil, fmt.Errorf("%w: policy %T cannot be marshalled", ErrCheckpoint, t.c.Policy)
	}
	pol, err := pm.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: policy: %w", ErrCheckpoint, err)
	}
	rng, err := t.src.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: rng: %w", ErrCheckpoint, err)
	}
	cp := checkpoint{Version: checkpointVersion, Seed: t.cfg.Seed, Step: t.step, RNG: rng,
		Evidence: t.m.Records(), Pool: map[string][]records.Record{}, Batches: t.batches, Policy: pol,
		Calibrations: t.calDone}
	cp.Cost, cp.Runs = t.Cost()
	for _, task := range t.c.Tasks {
		cp.Pool[task.ID] = t.pool.Records(task.ID)
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	return b, nil
}

// UnmarshalBinary restores a checkpoint written by MarshalBinary. The
// trainer must have been built with the same Config (the seed is checked)
// and a policy that implements encoding.BinaryUnmarshaler. The trainer's
// pool is replaced by a new one holding the checkpoint's records of the
// training tasks, so a Components.Pool the host keeps is not updated
// afterwards (read Trainer.Pool instead). On error the trainer is unchanged.
func (t *Trainer) UnmarshalBinary(data []byte) error {
	var cp checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if cp.Version != checkpointVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrCheckpoint, cp.Version, checkpointVersion)
	}
	if cp.Seed != t.cfg.Seed {
		return fmt.Errorf("%w: written with seed %d, trainer has seed %d", ErrCheckpoint, cp.Seed, t.cfg.Seed)
	}
	if cp.Step < 0 || cp.Step > t.cfg.Steps {
		return fmt.Errorf("%w: step %d outside 0..%d", ErrCheckpoint, cp.Step, t.cfg.Steps)
	}
	if cp.Calibrations < 0 || cp.Calibrations > len(t.cfg.Schedule.Steps) {
		return fmt.Errorf("%w: %d calibrations done, schedule has %d", ErrCheckpoint, cp.Calibrations, len(t.cfg.Schedule.Steps))
	}
	pu, ok := t.c.Policy.(encoding.BinaryUnmarshaler)
	if !ok {
		return fmt.Errorf("%w: policy %T cannot be unmarshalled", ErrCheckpoint, t.c.Policy)
	}
	m, err := records.NewEvidence(cp.Evidence...)
	if err != nil {
		return fmt.Errorf("%w: evidence: %w", ErrCheckpoint, err)
	}
	pool := &records.Pool{}
	for _, task := range t.c.Tasks {
		if err := pool.Add(cp.Pool[task.ID]...); err != nil {
			return fmt.Errorf("%w: pool: %w", ErrCheckpoint, err)
		}
	}
	src := &rand.PCG{}
	if err := src.UnmarshalBinary(cp.RNG); err != nil {
		return fmt.Errorf("%w: rng: %w", ErrCheckpoint, err)
	}
	if err := pu.UnmarshalBinary(cp.Policy); err != nil {
		return fmt.Errorf("%w: policy: %w", ErrCheckpoint, err)
	}
	t.step, t.m, t.pool, t.batches, t.calDone = cp.Step, m, pool, cp.Batches, cp.Calibrations
	t.src, t.rng = src, rand.New(src)
	t.mu.Lock()
	t.cost, t.runs = cp.Cost, cp.Runs
	t.mu.Unlock()
	return nil
}
