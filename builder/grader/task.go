package grader

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// Metric names how a submission is scored against the hidden answers.
type Metric string

const (
	// Accuracy is the fraction of test rows whose predicted label equals
	// the answer (labels compare as numbers when both parse as numbers, so
	// "1" and "1.0" agree; otherwise as trimmed strings). Higher is better.
	Accuracy Metric = "accuracy"
	// RMSE is the root mean squared error of numeric predictions. Lower is
	// better.
	RMSE Metric = "rmse"
)

// HigherIsBetter reports the metric's direction.
func (m Metric) HigherIsBetter() bool { return m == Accuracy }

// Valid reports whether m is a known metric.
func (m Metric) Valid() bool { return m == Accuracy || m == RMSE }

// Entry is one leaderboard row: a reference solution and its score.
type Entry struct {
	Name  string  `json:"name"`
	Score float64 `json:"score"`
}

// Task is a code-solution task, as data: a description for the solver,
// input files the solution reads, a file of hidden answers, the metric and
// a leaderboard of reference scores. The files live in Dir.
//
// The solution's contract (also stated in Description): it runs in a
// private directory holding copies of Inputs (train.csv: an id column,
// feature columns and a target column; test.csv: the same without the
// target) and writes submission.csv with a header and the columns id and
// target, one row per test id.
type Task struct {
	ID          string   `json:"id"`
	Description string   `json:"description"`
	Dir         string   `json:"-"`       // where Inputs and Answers are; set by LoadTask
	Inputs      []string `json:"inputs"`  // file names in Dir copied next to the solution
	Answers     string   `json:"answers"` // file name in Dir with the columns id and target; never shown
	Metric      Metric   `json:"metric"`
	Leaderboard []Entry  `json:"leaderboard"` // reference solutions, any order
	// Hide lists absolute paths a run must not see (masked in its mount
	// namespace, docs/sandbox.md), such as the public source of the task's
	// data: Prepare names the datasets scikit-learn ships, from which a
	// solution could otherwise look its test rows' labels up. The task's
	// own Dir is always masked.
	Hide []string `json:"hide,omitempty"`
}

// TaskFile is the name of a task's JSON file in its directory.
const TaskFile = "task.json"

// Submission is the file a solution must write.
const Submission = "submission.csv"

// Validate reports the first problem with t, wrapping ErrTask.
func (t Task) Validate() error {
	switch {
	case t.ID == "":
		return fmt.Errorf("%w: empty ID", ErrTask)
	case !t.Metric.Valid():
		return fmt.Errorf("%w: %s: unknown metric %q", ErrTask, t.ID, t.Metric)
	case t.Answers == "" || !plainName(t.Answers):
		return fmt.Errorf("%w: %s: answers file %q is not a plain file name", ErrTask, t.ID, t.Answers)
	}
	for _, in := range t.Inputs {
		if !plainName(in) || in == t.Answers || in == Submission {
			return fmt.Errorf("%w: %s: input %q is not a plain file name other than the answers and the submission", ErrTask, t.ID, in)
		}
	}
	for _, h := range t.Hide {
		if !filepath.IsAbs(h) || filepath.Clean(h) != h || h == "/" {
			return fmt.Errorf("%w: %s: hidden path %q is not a clean absolute path below /", ErrTask, t.ID, h)
		}
	}
	for _, e := range t.Leaderboard {
		if math.IsNaN(e.Score) || math.IsInf(e.Score, 0) {
			return fmt.Errorf("%w: %s: leaderboard entry %q has score %g", ErrTask, t.ID, e.Name, e.Score)
		}
	}
	return nil
}

func plainName(s string) bool {
	return s != "" && s != "." && s != ".." && filepath.Base(s) == s && !strings.ContainsAny(s, `/\`)
}

// Board returns the leaderboard's scores.
func (t Task) Board() []float64 {
	out := make([]float64, len(t.Leaderboard))
	for i, e := range t.Leaderboard {
		out[i] = e.Score
	}
	return out
}

// Percentile is the standing of a metric value on t's leaderboard
// (reward.Percentile in the metric's direction).
func (t Task) Percentile(score float64) float64 {
	return reward.Percentile(score, t.Board(), t.Metric.HigherIsBetter())
}

// SeedNoise is σ_e of every code-solution task's records.Task. Library
// choice: the ladder spans [0, 1], so with σ_e = 1/6 and c = 6 the
// normalised reward clip(score/τ_e, −c, c) never saturates for a score in
// [0, 1] (METHOD.md §1 Reward 1, §2).
const SeedNoise = 1.0 / 6

// Record returns the records.Task of t: metric records.LadderShortfall
// with b_e = 1, so that a solution's gain b_e − ℓ is its ladder score
// (METHOD.md §2), family "code/<metric>", split records.Train.
func (t Task) Record() records.Task {
	return records.Task{ID: t.ID, Family: "code/" + string(t.Metric), Split: records.Train,
		Metric: records.LadderShortfall, RefLoss: 1, SeedNoise: SeedNoise, Description: t.Description}
}

// LoadTask reads dir/task.json and sets Dir.
func LoadTask(dir string) (Task, error) {
	b, err := os.ReadFile(filepath.Join(dir, TaskFile))
	if err != nil {
		return Task{}, fmt.Errorf("grader: load task: %w", err)
	}
	var t Task
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Task{}, fmt.Errorf("%w: %s: %w", ErrTask, dir, err)
	}
	t.Dir = dir
	return t, t.Validate()
}

// Save writes t as t.Dir/task.json.
func (t Task) Save() error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("grader: save task: %w", err)
	}
	return os.WriteFile(filepath.Join(t.Dir, TaskFile), append(b, '\n'), 0o644)
}

// Errors of the package.
var (
	// ErrTask: a task definition that cannot be used.
	ErrTask = errors.New("grader: bad task")
	// ErrSubmission: a submission that cannot be scored (the solution ran
	// without a usable submission: reward.RanNoSubmission).
	ErrSubmission = errors.New("grader: unusable submission")
)

// MaxSubmissionBytes bounds the submission file read.
const MaxSubmissionBytes = 16 << 20

// ReadTable reads a CSV table with a header that has the columns id and
// target (others are ignored) into a map from id to target. Duplicate or
// empty ids, a missing column and ragged rows wrap ErrSubmission.
func ReadTable(r io.Reader) (map[string]string, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = false
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrSubmission, err)
	}
	id, target := -1, -1
	for i, h := range head {
		switch strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) {
		case "id":
			id = i
		case "target":
			target = i
		}
	}
	if id < 0 || target < 0 {
		return nil, fmt.Errorf("%w: header %q lacks id or target", ErrSubmission, records.Excerpt(strings.Join(head, ",")))
	}
	out := map[string]string{}
	for line := 2; ; line++ {
		row, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSubmission, err)
		}
		k := canonID(row[id])
		if k == "" {
			return nil, fmt.Errorf("%w: line %d: empty id", ErrSubmission, line)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%w: line %d: id %q repeated", ErrSubmission, line, records.Excerpt(k))
		}
		out[k] = strings.TrimSpace(row[target])
	}
}

// canonID writes integral ids ("7", "7.0") one way.
func canonID(s string) string {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return s
}

// Score scores a submission against the answers under m. Every answer id
// must be predicted (extra ids are an error too); predictions for RMSE
// must be finite numbers, and so must the metric (finite predictions as
// large as 1e308 overflow the squares). Problems wrap ErrSubmission.
func Score(m Metric, answers, sub map[string]string) (float64, error) {
	if len(answers) == 0 {
		return 0, fmt.Errorf("%w: no answers", ErrTask)
	}
	if len(sub) != len(answers) {
		return 0, fmt.Errorf("%w: %d rows, want %d", ErrSubmission, len(sub), len(answers))
	}
	var right, sq float64
	for id, want := range answers {
		got, ok := sub[id]
		if !ok {
			return 0, fmt.Errorf("%w: id %q missing", ErrSubmission, records.Excerpt(id))
		}
		switch m {
		case Accuracy:
			if sameLabel(got, want) {
				right++
			}
		case RMSE:
			g, err1 := strconv.ParseFloat(got, 64)
			w, err2 := strconv.ParseFloat(want, 64)
			if err2 != nil {
				return 0, fmt.Errorf("%w: answer %q for id %q is not a number", ErrTask, records.Excerpt(want), records.Excerpt(id))
			}
			if err1 != nil || math.IsNaN(g) || math.IsInf(g, 0) {
				return 0, fmt.Errorf("%w: id %q: prediction %q is not a finite number", ErrSubmission, records.Excerpt(id), records.Excerpt(got))
			}
			sq += (g - w) * (g - w)
		default:
			return 0, fmt.Errorf("%w: unknown metric %q", ErrTask, m)
		}
	}
	n := float64(len(answers))
	if m == Accuracy {
		return right / n, nil
	}
	v := math.Sqrt(sq / n)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: %s is %g", ErrSubmission, m, v)
	}
	return v, nil
}

func sameLabel(a, b string) bool {
	fa, errA := strconv.ParseFloat(a, 64)
	fb, errB := strconv.ParseFloat(b, 64)
	if errA == nil && errB == nil {
		return fa == fb
	}
	return strings.TrimSpace(a) == strings.TrimSpace(b)
}

// Proposal returns the proposal of a solution: Mechanism names its
// approach (what WMRL's diversity and share statistics count), Text is the
// code, and Params["code"] holds the first 12 bytes of the code's SHA-256
// in hex. records.Proposal.Key leaves Text out, so the hash is what makes
// two different codes two different proposals for duplicate detection
// (METHOD.md §1 Reward 3), stores and rwm.Cache.
func Proposal(approach, code string) records.Proposal {
	h := sha256.Sum256([]byte(code))
	return records.Proposal{Mechanism: approach, Params: map[string]string{"code": hex.EncodeToString(h[:12])}, Text: code}
}
