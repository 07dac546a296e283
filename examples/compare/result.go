package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// resultVersion is the format of result files; a file of another version
// is an error, never silently re-run or overwritten.
const resultVersion = 2

// Result is one (method, seed): what it cost, how it trained, and the real
// gains of its proposals on every test state. Undefined numbers are null.
type Result struct {
	Version int    `json:"version"`
	Method  string `json:"method"`
	Seed    uint64 `json:"seed"`
	Profile string `json:"profile"`
	Suite   string `json:"suite"`
	// Tasks is the digest of the suite's task specs and of the lab's
	// catalogue (tasksDigest): a result of another generator's tasks, or of
	// another action space (e.g. the size cards before they became
	// relative), is never read back as this one's.
	Tasks string `json:"tasks_digest"`
	M0    int    `json:"m0_records"`
	// Runs counts real runs per phase: fresh (paid for now) and reused
	// (served from the store: run earlier, by this or another method).
	Runs struct {
		M0         Runs `json:"m0"`
		Training   Runs `json:"training"`
		Evaluation Runs `json:"evaluation"`
		// Probe: the reliability probes' runs (not part of the budget).
		Probe Runs `json:"probe"`
		// History: the test states' history records (shared by every
		// method and seed: paid for by the first job, reused after).
		History Runs `json:"history"`
	} `json:"runs"`
	// LeftOut lists the suite's tasks left out (a reference run failed).
	LeftOut      []string            `json:"tasks_left_out,omitempty"`
	States       []StateResult       `json:"states"`
	Unmeasured   int                 `json:"unmeasured_proposals"`
	Steps        []StepResult        `json:"steps,omitempty"`
	Calibrations []CalibrationResult `json:"calibrations,omitempty"`
	// Probes are the reliability probes at the calibration steps (prober).
	Probes      []CalibrationResult `json:"probes,omitempty"`
	WallSeconds float64             `json:"wall_seconds"`
}

// Runs counts real runs; CPUSeconds is the fresh ones' device time.
type Runs struct {
	Fresh      int     `json:"fresh"`
	Reused     int     `json:"reused"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// Budget is the real runs the method needs (M_0 and training), whether they
// were paid for now or reused.
func (r Result) Budget() int {
	return r.Runs.M0.Fresh + r.Runs.M0.Reused + r.Runs.Training.Fresh + r.Runs.Training.Reused
}

// StateResult is one test state: its proposals' real gains in σ_e units.
type StateResult struct {
	ID         string    `json:"id"`
	Task       string    `json:"task"`
	Gains      []float64 `json:"gains_sigma"`
	Infeasible int       `json:"infeasible"`
	// Predicted holds, with -eval-predict, the trained world model's
	// predicted gain of each measured proposal (σ_e units, in Gains'
	// order; −c when it judged the proposal invalid).
	Predicted []float64 `json:"predicted_sigma,omitempty"`
}

// StepResult is one training step.
type StepResult struct {
	Step         int      `json:"step"`
	Loss         float64  `json:"loss"`
	Entropy      float64  `json:"entropy"`
	Reward       *float64 `json:"mean_reward,omitempty"`
	MeanGain     *float64 `json:"mean_predicted_gain_sigma,omitempty"`
	TopMechanism string   `json:"top_mechanism,omitempty"`
	TopShare     *float64 `json:"top_share,omitempty"`
}

// CalibrationResult is one calibration point: its reliability monitors
// and the predicted and real normalised rewards of the runs it executed.
type CalibrationResult struct {
	Step       int       `json:"step"`
	Executed   int       `json:"executed"`
	Infeasible int       `json:"infeasible"`
	Delta      *float64  `json:"delta"`
	Cosine     *float64  `json:"advantage_cosine"`
	Accuracy   *float64  `json:"pairwise_accuracy"`
	Gap        *float64  `json:"gap"`
	Predicted  []float64 `json:"predicted_reward"`
	Real       []float64 `json:"real_reward"`
	// Trigger says why the calibration ran under -trigger (the monitor
	// that fired, or "deadline step N"); empty under the fixed schedule.
	Trigger string `json:"trigger,omitempty"`
}

// num returns nil for a NaN or infinite x, so that JSON can hold it.
func num(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// val is num's inverse: NaN for nil.
func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// resultPath names a job's result file by method and seed.
func resultPath(dir string, j job) string {
	return filepath.Join(dir, "runs", fmt.Sprintf("%s-seed%d.json", j.method, j.seed))
}

// readResult reads a job's result file; ok is false when there is none.
func readResult(dir string, j job, o options) (r Result, ok bool, err error) {
	path := resultPath(dir, j)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, false, fmt.Errorf("%s: %w (move it away to run %s again)", path, err, j)
	}
	if r.Version != resultVersion || r.Method != j.method || r.Seed != j.seed || r.Profile != o.profile || r.Suite != o.suite {
		return r, false, fmt.Errorf("%s holds version %d, %s seed %d, profile %s, suite %s; want version %d, %s (move it away to run %s again)",
			path, r.Version, r.Method, r.Seed, r.Profile, r.Suite, resultVersion, j, j)
	}
	if want := tasksDigest(o.suite); r.Tasks != want {
		return r, false, fmt.Errorf("%s was measured on other tasks of suite %s or another catalogue (digest %q, want %q: the task generator or the cards changed; move it away to run %s again)",
			path, r.Suite, r.Tasks, want, j)
	}
	return r, true, nil
}

// tasksDigest is the digest of the suite's task specs and the lab's
// catalogue (labDigest).
func tasksDigest(suite string) string {
	specs, _ := suiteTasks(suite)
	return labDigest(specs, lab.Catalogue())
}

// labDigest is the hex SHA-256 (first 12 bytes) of the JSON of the task
// specs and the catalogue's cards: what a result was measured on.
func labDigest(specs []lab.TaskSpec, cat []records.Card) string {
	b, err := json.Marshal(struct {
		Tasks     []lab.TaskSpec `json:"tasks"`
		Catalogue []records.Card `json:"catalogue"`
	}{specs, cat})
	if err != nil {
		panic(fmt.Sprintf("compare: task specs or cards do not marshal: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// writeResult writes a job's result file; an existing file is never
// replaced (the file appears whole or not at all).
func writeResult(dir string, j job, r Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return createNew(resultPath(dir, j), append(b, '\n'))
}

// createNew writes b to path through a temporary file and a hard link, so
// the file appears complete, and fails with fs.ErrExist if path exists.
func createNew(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}
