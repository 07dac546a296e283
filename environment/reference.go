package environment

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lm2lm/lm2lm/records"
)

// ErrReference: a task's reference run was infeasible, so it has no b_e or
// σ_e and is left out.
var ErrReference = errors.New("environment: reference run infeasible")

// RefTask is one task's reference result (the reference verb's report).
type RefTask struct {
	Task    records.Task `json:"task"` // with b_e (ref_loss) and σ_e (seed_noise)
	Losses  []float64    `json:"losses"`
	Seeds   []uint64     `json:"seeds"`
	LeftOut string       `json:"left_out,omitempty"` // why the task has no b_e (an infeasible or failed reference run)
	Failed  int          `json:"failed,omitempty"`   // reference runs that gave no outcome (the stage is short of them)
	PaidNow int          `json:"paid_now"`
	Reused  int          `json:"reused"`
	DeviceS float64      `json:"device_seconds"`
}

// Ready returns the tasks of refs that have b_e and σ_e and those left
// out.
func Ready(refs []RefTask) ([]records.Task, []LeftOut) {
	var tasks []records.Task
	var left []LeftOut
	for _, r := range refs {
		if r.LeftOut != "" {
			left = append(left, LeftOut{ID: r.Task.ID, Err: fmt.Errorf("%w: %s", ErrReference, r.LeftOut)})
			continue
		}
		tasks = append(tasks, r.Task)
	}
	return tasks, left
}

// WriteOut writes b to <out>/name (name may hold folders), making the
// folders and replacing the file atomically, and returns its path.
func WriteOut(out, name string, b []byte) (string, error) {
	p := filepath.Join(out, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return "", err
	}
	return p, os.Rename(tmp, p)
}
