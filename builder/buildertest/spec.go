package buildertest

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/records"
)

// Behaviours a Spec can ask of a test run. Scripted executes them in
// process; examples/trainscript executes them as a real training script.
const (
	OK         = "ok"         // train (sleep SleepMS), write the loss, exit 0
	Crash      = "crash"      // exit with code 1 and no result: ErrFailed
	Hang       = "hang"       // never finish (until killed): timeout or cancel
	Garbage    = "garbage"    // write a result file that is not JSON, exit 0: ErrFailed, ErrBadResult
	NaN        = "nan"        // write {"loss": NaN}, exit 0: ErrFailed, ErrBadResult
	Infeasible = "infeasible" // write {"infeasible": Reason}, exit 3: ErrInfeasible
	Transient  = "transient"  // exit 75: ErrTransient
)

// Spec is the Job.Spec of a test job: what the test run should do. It is
// data inside the job file, never a command-line argument.
type Spec struct {
	Behaviour string `json:"behaviour,omitempty"` // one of the behaviours above; "" = OK
	SleepMS   int    `json:"sleep_ms,omitempty"`  // training time of an OK run
	Reason    string `json:"reason,omitempty"`    // the reason of an Infeasible run
	// Times makes Scripted fail with Behaviour only on the first Times
	// calls for a (task, key, seed), then behave as OK; 0 = always.
	Times int `json:"times,omitempty"`
	// ChildPIDFile asks a hanging trainscript to start a child process in
	// its process group and write the child's PID here (tests check that
	// the whole group is killed).
	ChildPIDFile string `json:"child_pid_file,omitempty"`
	// IgnoreTerm makes a hanging trainscript ignore SIGTERM, so that only
	// SIGKILL stops it.
	IgnoreTerm bool `json:"ignore_term,omitempty"`
}

// JSON returns s encoded for Job.Spec.
func (s Spec) JSON() json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		panic("buildertest: " + err.Error())
	}
	return b
}

// ParseSpec decodes a Job.Spec; empty means the zero Spec.
func ParseSpec(raw json.RawMessage) (Spec, error) {
	var s Spec
	if len(raw) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("buildertest: spec: %w", err)
	}
	switch s.Behaviour {
	case "", OK, Crash, Hang, Garbage, NaN, Infeasible, Transient:
	default:
		return s, fmt.Errorf("buildertest: spec: unknown behaviour %q", s.Behaviour)
	}
	return s, nil
}

// Quadratic is the deterministic "training" of test runs: the loss of
// proposal p on task t with seed seed is
//
//	ℓ = b_e − 0.05·[p changes something] + 0.1·Σ_k (x_k − 1)² + σ_e·z(seed)
//
// where x_k are p's numeric parameter values (non-numeric ones are
// ignored), b_e = t.RefLoss, σ_e = t.SeedNoise and z(seed) ∈ [−1, 1) is a
// fixed hash of the seed. So the gain b_e − ℓ is 0.05 for a proposal whose
// parameters all equal 1, less the seed noise (METHOD.md §1 Vocabulary:
// g = b_e − ℓ).
func Quadratic(t records.Task, p records.Proposal, seed uint64) float64 {
	names := make([]string, 0, len(p.Params))
	for k := range p.Params {
		names = append(names, k)
	}
	sort.Strings(names)
	q := 0.0
	for _, k := range names {
		if x, err := strconv.ParseFloat(strings.TrimSpace(p.Params[k]), 64); err == nil && !math.IsInf(x, 0) && !math.IsNaN(x) {
			q += (x - 1) * (x - 1)
		}
	}
	l := t.RefLoss + 0.1*q + t.SeedNoise*noise(seed)
	if !p.IsNoChange() {
		l -= 0.05
	}
	return l
}

// noise maps a seed to [−1, 1) with splitmix64.
func noise(seed uint64) float64 {
	return float64(splitmix(seed)>>11)/(1<<52) - 1
}

// splitmix is the splitmix64 finaliser of x + the golden-ratio increment.
func splitmix(x uint64) uint64 {
	z := x + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// TextLine is the log line by which a test run shows the exact proposal
// text it read from its job file: hex, so that no byte is escaped or
// interpreted on the way.
func TextLine(text string) string { return "proposal-text-hex: " + hex.EncodeToString([]byte(text)) }
