package builder

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/lm2lm/lm2lm/internal/jsonkeys"
	"github.com/lm2lm/lm2lm/records"
)

// The subprocess protocol (see doc.go). A training script is started as
//
//	<Command...> <job file> <result file>
//
// reads the JobFile JSON from the first path, writes the Result JSON to the
// second, and exits with one of these codes.
const (
	// ProtocolVersion is the JobFile's Protocol field.
	ProtocolVersion = 1
	// ExitOK: the run finished; the result file holds its loss.
	ExitOK = 0
	// ExitInfeasible: the proposal cannot be built or run, or the run
	// diverged (the proposal's fault). The result file, when present, may
	// give the reason in "infeasible".
	ExitInfeasible = 3
	// ExitTransient: infrastructure trouble (no device, a lost file
	// system); retrying may succeed. BSD sysexits' EX_TEMPFAIL.
	ExitTransient = 75
)

// JobFile is the JSON document a training script reads: everything about
// the run, as data. Proposal text travels only here, never on a command
// line or in a script.
type JobFile struct {
	Protocol int              `json:"protocol"` // ProtocolVersion
	Task     records.Task     `json:"task"`
	Proposal records.Proposal `json:"proposal"`
	Key      string           `json:"key"`    // Proposal.Key(), for logs and caches
	Seed     uint64           `json:"seed"`   // the run's seed
	Budget   int              `json:"budget"` // Task.Budget, repeated for convenience
	Slots    int64            `json:"slots"`  // device slots granted (≥ 1)
	Spec     json.RawMessage  `json:"spec,omitempty"`
	Result   string           `json:"result"` // where to write the Result (also argv[2])
}

// NewJobFile returns the job file for j whose result goes to resultPath.
func NewJobFile(j Job, resultPath string) JobFile {
	return JobFile{
		Protocol: ProtocolVersion, Task: j.Task, Proposal: j.Proposal, Key: j.Proposal.Key(),
		Seed: j.Seed, Budget: j.Task.Budget, Slots: j.slots(), Spec: j.Spec, Result: resultPath,
	}
}

// WriteJobFile writes j's job file to path with mode 0600.
func WriteJobFile(path string, j Job, resultPath string) error {
	b, err := json.MarshalIndent(NewJobFile(j, resultPath), "", "  ")
	if err != nil {
		return fmt.Errorf("builder: encode job: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("builder: write job file: %w", err)
	}
	return nil
}

func (j Job) slots() int64 {
	if j.Slots <= 0 {
		return 1
	}
	return j.Slots
}

// Result is the JSON document a training script writes. Loss is required
// unless Infeasible is set; Gain defaults to Task.RefLoss − Loss (METHOD.md
// §1 Vocabulary: g = b_e − ℓ); Seeds default to the job's seed; Cost fields
// left zero are filled from the executor's own measurement.
type Result struct {
	Loss       *float64     `json:"loss"`
	Gain       *float64     `json:"gain,omitempty"`
	Seeds      []uint64     `json:"seeds,omitempty"`
	Cost       records.Cost `json:"cost"`
	Infeasible string       `json:"infeasible,omitempty"`
}

// MaxResultBytes bounds the result file that ParseResult accepts.
const MaxResultBytes = 1 << 20

// ReadResultFile reads a result file for ParseResult. It never blocks and
// never reads without bound: the file is opened without blocking (a FIFO
// in its place cannot hang the executor), must be a regular file (a FIFO,
// device or directory, also behind a symlink, is an error wrapping
// ErrBadResult), and at most MaxResultBytes+1 bytes of it are read, so that
// a script that writes a huge (or sparse) file cannot make the executor
// allocate it: ParseResult then rejects the oversized bytes.
func ReadResultFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: result file is not a regular file (mode %v)", ErrBadResult, fi.Mode().Type())
	}
	return io.ReadAll(io.LimitReader(f, MaxResultBytes+1))
}

// ParseResult parses a result file strictly: one JSON object, no unknown
// fields, no key given twice in an object (encoding/json would keep the
// last; keys that differ only in case count as one, as encoding/json
// matches them), no trailing data, finite numbers, non-negative costs, and
// a loss unless the run reports itself infeasible. Errors wrap
// ErrBadResult.
func ParseResult(b []byte) (Result, error) {
	var r Result
	if len(b) > MaxResultBytes {
		return r, fmt.Errorf("%w: %d bytes, max %d", ErrBadResult, len(b), MaxResultBytes)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return r, fmt.Errorf("%w: empty result file", ErrBadResult)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrBadResult, err)
	}
	// dec.More is not enough here: it reports false for a stray '}' or ']'.
	if rest := bytes.TrimSpace(b[dec.InputOffset():]); len(rest) > 0 {
		return Result{}, fmt.Errorf("%w: trailing data after the result object", ErrBadResult)
	}
	if err := noRepeatedKeys(b); err != nil {
		return Result{}, err
	}
	if r.Infeasible != "" {
		r.Infeasible = strings.TrimSpace(r.Infeasible)
		if r.Infeasible == "" {
			r.Infeasible = "infeasible"
		}
	} else if r.Loss == nil {
		return Result{}, fmt.Errorf("%w: missing loss", ErrBadResult)
	}
	check := func(name string, v float64, nonNeg bool) error {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %s %g is not finite", ErrBadResult, name, v)
		}
		if nonNeg && v < 0 {
			return fmt.Errorf("%w: %s %g is negative", ErrBadResult, name, v)
		}
		return nil
	}
	if r.Loss != nil {
		if err := check("loss", *r.Loss, false); err != nil {
			return Result{}, err
		}
	}
	if r.Gain != nil {
		if err := check("gain", *r.Gain, false); err != nil {
			return Result{}, err
		}
	}
	for _, c := range []struct {
		n string
		v float64
	}{{"device_seconds", r.Cost.DeviceSeconds}, {"wall_seconds", r.Cost.WallSeconds},
		{"flops", r.Cost.FLOPs}, {"money", r.Cost.Money}} {
		if err := check("cost."+c.n, c.v, true); err != nil {
			return Result{}, err
		}
	}
	return r, nil
}

// Outcome turns r into the Outcome of job j. measured is the executor's
// own measurement of the run's cost; it fills the cost fields r left zero
// (device seconds default to wall seconds × slots). When r is infeasible
// the returned error wraps ErrInfeasible. A result that cannot be a real
// measurement of j's task (records.Plausible: a loss outside its metric's
// range, or a gain that disagrees with b_e − loss) is ErrFailed, wrapping
// ErrBadResult and records.ErrImplausible, never an outcome.
func (r Result) Outcome(j Job, measured records.Cost, log string) (Outcome, error) {
	o := Outcome{Cost: r.Cost, Log: log, Seeds: append([]uint64(nil), r.Seeds...)}
	if len(o.Seeds) == 0 {
		o.Seeds = []uint64{j.Seed}
	}
	if o.Cost.WallSeconds == 0 {
		o.Cost.WallSeconds = measured.WallSeconds
	}
	if o.Cost.DeviceSeconds == 0 {
		o.Cost.DeviceSeconds = measured.DeviceSeconds
		if o.Cost.DeviceSeconds == 0 {
			o.Cost.DeviceSeconds = o.Cost.WallSeconds * float64(j.slots())
		}
	}
	if o.Cost.FLOPs == 0 {
		o.Cost.FLOPs = measured.FLOPs
	}
	if r.Infeasible != "" {
		o.Infeasible = r.Infeasible
		return o, &RunError{Class: ErrInfeasible, Reason: r.Infeasible, Log: log}
	}
	o.Loss = *r.Loss
	if r.Gain != nil {
		o.Gain = *r.Gain
	} else {
		o.Gain = j.Task.RefLoss - o.Loss
	}
	if err := records.Plausible(o.Record(j)); err != nil {
		return Outcome{Cost: o.Cost, Log: log}, implausible(err, log)
	}
	return o, nil
}

// implausible is the error of a result that records.Plausible rejects.
func implausible(err error, log string) *RunError {
	return &RunError{Class: ErrFailed, Reason: "implausible result", Log: log, Err: fmt.Errorf("%w: %w", ErrBadResult, err)}
}

// ExitError classifies a training script's non-zero exit code under the
// protocol: ExitInfeasible is ErrInfeasible (with the result file's reason
// when it gave one), ExitTransient is ErrTransient, anything else is
// ErrFailed.
func ExitError(code int, reason, log string) *RunError {
	switch code {
	case ExitInfeasible:
		if reason == "" {
			reason = fmt.Sprintf("exit code %d", code)
		}
		return &RunError{Class: ErrInfeasible, Reason: reason, Log: log}
	case ExitTransient:
		return &RunError{Class: ErrTransient, Reason: fmt.Sprintf("exit code %d", code), Log: log}
	default:
		return &RunError{Class: ErrFailed, Reason: fmt.Sprintf("exit code %d", code), Log: log}
	}
}

// InfeasibleReason reads the reason of an infeasible exit from a result
// file's bytes, leniently: a script that exits with ExitInfeasible may have
// written nothing or something partial. It returns "" when there is none.
func InfeasibleReason(b []byte) string {
	var r struct {
		Infeasible string `json:"infeasible"`
	}
	if json.Unmarshal(b, &r) != nil {
		return ""
	}
	return strings.TrimSpace(r.Infeasible)
}

// Tail is an io.Writer that keeps the last N bytes written to it. It is
// safe for concurrent use (a process's stdout and stderr may share one).
type Tail struct {
	mu  sync.Mutex
	n   int
	buf []byte
	cut bool
}

// NewTail returns a Tail keeping the last n bytes (n ≥ 1).
func NewTail(n int) *Tail {
	if n < 1 {
		n = 1
	}
	return &Tail{n: n}
}

// Write implements io.Writer; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.n {
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		t.cut = true
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// String returns the kept bytes, prefixed by "…" when earlier ones were
// dropped.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.buf)
	}
	return string(t.buf)
}

// noRepeatedKeys reports, wrapping ErrBadResult, the first key that an
// object of the valid JSON text b repeats at any depth, keys compared as
// encoding/json matches them to fields (jsonkeys.Repeated with folding:
// "Loss", "LOSS" and "loss" are one key, and "ſeeds" is "seeds").
func noRepeatedKeys(b []byte) error {
	k, rep, err := jsonkeys.Repeated(json.NewDecoder(bytes.NewReader(b)), true)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrBadResult, err)
	case rep:
		return fmt.Errorf("%w: key %q given twice", ErrBadResult, records.Excerpt(k))
	}
	return nil
}

// CreateLog creates (or truncates) the file that keeps j's whole log under
// dir (LogPath), making its folders.
func CreateLog(dir string, j Job) (*os.File, error) {
	p := LogPath(dir, j)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	return os.Create(p)
}

// teeWriter writes to a Tail and to a log file; a failed write to the file
// (a full disk) never fails the run's output, whose tail is still kept.
type teeWriter struct {
	tail *Tail
	file io.Writer
}

func (t teeWriter) Write(p []byte) (int, error) {
	_, _ = t.file.Write(p)
	return t.tail.Write(p)
}
