package records

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// Source says where a record's gain came from. Only Real records are
// evidence for a world model (METHOD.md §1 Research World Model); Predicted
// and Synthetic records may build histories (METHOD.md §1 Synthetic state
// expansion) but never calibrate anything.
type Source string

const (
	Real      Source = "real"      // executed for real and measured
	Predicted Source = "predicted" // a world model's prediction
	Synthetic Source = "synthetic" // a (state, proposal) pair added to the pool with its predicted gain
	// Reference is a run of a task's unchanged reference configuration,
	// one of those that define b_e and σ_e (METHOD.md §1 Vocabulary). It is
	// measured for real but kept apart from Real: its proposal is the
	// no-change one, so under Source Real a lookup of the no-change
	// proposal's outcome (same key, same seed) would return the reference
	// run, whose gain against the seed mean is seed noise, instead of the
	// gain 0 of a paired no-change run. Reference records are not evidence.
	Reference Source = "reference"
	// Failed is a run that was paid for but gave no outcome (a crash, a
	// missing result, a job the cluster rejected): neither feasible nor
	// infeasible, so never evidence, but kept with its cost, why it failed
	// (Record.Failure) and its log, so that nobody pays for a deterministic
	// failure twice without asking, and the cost report counts it.
	Failed Source = "failed"
)

// Valid reports whether s is a known source.
func (s Source) Valid() bool {
	return s == Real || s == Predicted || s == Synthetic || s == Reference || s == Failed
}

// Cost is what producing a record cost.
type Cost struct {
	DeviceSeconds float64 `json:"device_seconds,omitempty"` // e.g. GPU- or CPU-seconds summed over devices
	WallSeconds   float64 `json:"wall_seconds,omitempty"`
	FLOPs         float64 `json:"flops,omitempty"`
	Money         float64 `json:"money,omitempty"` // in the caller's currency, when priced
}

// Add returns the field-by-field sum c + d. Summing in a fixed order (not
// completion order) keeps totals identical bit for bit.
func (c Cost) Add(d Cost) Cost {
	return Cost{
		DeviceSeconds: c.DeviceSeconds + d.DeviceSeconds,
		WallSeconds:   c.WallSeconds + d.WallSeconds,
		FLOPs:         c.FLOPs + d.FLOPs,
		Money:         c.Money + d.Money,
	}
}

// Record is one experiment (e, a, g) of METHOD.md §1 Vocabulary.
//
// Gain is b_e − ℓ in the task's metric units (positive = better than the
// reference). Loss is the measured loss ℓ (for Predicted and Synthetic
// records, the loss implied by the predicted gain). A run that could not be
// built or executed is recorded with Infeasible set to the reason; its Gain
// and Loss are then zero and carry no meaning.
type Record struct {
	Task       Task      `json:"task"`
	Proposal   Proposal  `json:"proposal"`
	Gain       float64   `json:"gain"`
	Loss       float64   `json:"loss"`
	Source     Source    `json:"source"`
	Seeds      []uint64  `json:"seeds,omitempty"`
	Cost       Cost      `json:"cost"`
	Time       time.Time `json:"time"`
	Infeasible string    `json:"infeasible,omitempty"`
	// Code, when set, names the code that produced a real record whose
	// change was implemented as code (builder/overlay): nil for records of
	// catalogue changes that a recipe expresses. Absent from the JSON when
	// nil, so older files read unchanged.
	Code *Code `json:"code,omitempty"`
	// Failure is why a Failed record's run gave no outcome (the
	// executor's error); empty for every other source.
	Failure string `json:"failure,omitempty"`
	// Log is the tail of the run's combined output (at most MaxLog bytes,
	// the last ones) for a run that failed or was infeasible; empty
	// otherwise. LogFile is where the run's whole output was kept, when
	// the executor kept it.
	Log     string `json:"log,omitempty"`
	LogFile string `json:"log_file,omitempty"`
	// Version is the version of the training code that produced the run,
	// as its owner names it (cmd/lm2lm: training.version): runs of another
	// version are not reused. Empty: unversioned.
	Version string `json:"version,omitempty"`
}

// MaxLog bounds Record.Log in bytes, MaxLogFile Record.LogFile and
// Record.Failure, and MaxVersion Record.Version (library choice: 4 KiB
// holds a Python traceback's last frames and the error; a path or an error
// message of 4 KiB is already unreadable).
const (
	MaxLog     = 4 << 10
	MaxLogFile = 4 << 10
	MaxVersion = 256
)

// LogTail returns the last MaxLog bytes of log, cut on a rune boundary and
// prefixed by "…" when anything was dropped: what Record.Log keeps.
func LogTail(log string) string {
	if len(log) <= MaxLog {
		return log
	}
	cut := len(log) - MaxLog + len("…")
	for cut < len(log) && log[cut]&0xC0 == 0x80 {
		cut++
	}
	return "…" + log[cut:]
}

// MaxCodeDiff bounds Code.Diff in bytes (library choice: 400 changed lines
// of ordinary code with context fit in well under 256 KiB).
const MaxCodeDiff = 256 << 10

// Code traces a record to the code that produced it: the training code's
// digest before the change, the digest of the overlay applied to it, the
// overlay as a unified diff, and who wrote it.
type Code struct {
	Digest  string `json:"digest"`            // digest of the training code the overlay was written against
	Overlay string `json:"overlay"`           // digest of the overlay
	Diff    string `json:"diff,omitempty"`    // the overlay as a unified diff against that code
	Builder string `json:"builder,omitempty"` // the builder that wrote it (e.g. model and prompt version)
}

// Validate reports the first problem with c, wrapping ErrInvalid.
func (c Code) Validate() error {
	switch {
	case strings.TrimSpace(c.Digest) == "" || strings.TrimSpace(c.Overlay) == "":
		return fmt.Errorf("%w: code reference without a code or overlay digest", ErrInvalid)
	case len(c.Digest) > 128 || len(c.Overlay) > 128 || len(c.Builder) > 512:
		return fmt.Errorf("%w: code reference field too long", ErrInvalid)
	case len(c.Diff) > MaxCodeDiff:
		return fmt.Errorf("%w: code diff of %d bytes, max %d", ErrInvalid, len(c.Diff), MaxCodeDiff)
	}
	return nil
}

// Validate reports the first problem with r, wrapping ErrInvalid.
func (r Record) Validate() error {
	if err := r.Task.Validate(); err != nil {
		return err
	}
	if err := r.Proposal.Validate(); err != nil {
		return fmt.Errorf("task %s: %w", Excerpt(r.Task.ID), err)
	}
	if !r.Source.Valid() {
		return fmt.Errorf("%w: record %s/%s: unknown source %q", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), Excerpt(r.Source))
	}
	for _, x := range []struct {
		name string
		v    float64
	}{{"gain", r.Gain}, {"loss", r.Loss}, {"device seconds", r.Cost.DeviceSeconds},
		{"wall seconds", r.Cost.WallSeconds}, {"FLOPs", r.Cost.FLOPs}, {"money", r.Cost.Money}} {
		if !stat.Finite(x.v) {
			return fmt.Errorf("%w: record %s/%s: %s %g is not finite", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), x.name, x.v)
		}
	}
	if r.Cost.DeviceSeconds < 0 || r.Cost.WallSeconds < 0 || r.Cost.FLOPs < 0 || r.Cost.Money < 0 {
		return fmt.Errorf("%w: record %s/%s: negative cost", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()))
	}
	if r.Code != nil {
		if err := r.Code.Validate(); err != nil {
			return fmt.Errorf("record %s/%s: %w", Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), err)
		}
	}
	switch {
	case (r.Source == Failed) != (r.Failure != ""):
		return fmt.Errorf("%w: record %s/%s: a failed record needs a failure, and only a failed one has one", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()))
	case len(r.Log) > MaxLog || len(r.LogFile) > MaxLogFile || len(r.Failure) > MaxLogFile || len(r.Version) > MaxVersion:
		return fmt.Errorf("%w: record %s/%s: log, log file, failure or version too long", ErrInvalid, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()))
	}
	return nil
}

// HasSeed reports whether seed is one of r's seeds.
func (r Record) HasSeed(seed uint64) bool {
	for _, s := range r.Seeds {
		if s == seed {
			return true
		}
	}
	return false
}

// MaxHistory is the longest history a research state may carry (METHOD.md §1
// Vocabulary: 0–8 earlier proposals and outcomes).
const MaxHistory = 8

// State is a research state s = (e, h): a task and a history of at most
// MaxHistory earlier records of that task, oldest first. History records may
// be of any source; they describe what the researcher has seen, not
// evidence for a world model.
type State struct {
	Task    Task     `json:"task"`
	History []Record `json:"history,omitempty"`
}

// Validate reports the first problem with s, wrapping ErrInvalid.
func (s State) Validate() error {
	if err := s.Task.Validate(); err != nil {
		return err
	}
	if len(s.History) > MaxHistory {
		return fmt.Errorf("%w: state of task %s: %w: %d records, max %d", ErrInvalid, Excerpt(s.Task.ID), ErrHistoryTooBig, len(s.History), MaxHistory)
	}
	for i, r := range s.History {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("state of task %s: history[%d]: %w", Excerpt(s.Task.ID), i, err)
		}
		if r.Task.ID != s.Task.ID {
			return fmt.Errorf("%w: state of task %s: history[%d] is of task %s", ErrInvalid, Excerpt(s.Task.ID), i, Excerpt(r.Task.ID))
		}
	}
	return nil
}

// Filter selects records in Store.Scan. Zero fields match everything.
type Filter struct {
	TaskID string // only records of this task
	Key    string // only records whose Proposal.Key() equals this
	Source Source // only records of this source
}

// Match reports whether r passes f.
func (f Filter) Match(r Record) bool {
	return (f.TaskID == "" || r.Task.ID == f.TaskID) &&
		(f.Source == "" || r.Source == f.Source) &&
		(f.Key == "" || r.Proposal.Key() == f.Key)
}

// Store keeps records. A real record is the most expensive datum the library
// holds, so a Store never loses one whose Append returned nil.
//
// Implementations are safe for concurrent use. Append validates every record
// (Validate, an error wrapping ErrInvalid, and Plausible, ErrImplausible:
// what Evidence refuses never enters a store) and stores all or none of them; it returns only once they are durable (for
// a durable store). Scan returns the matching records in append order; the
// caller owns the returned slice. Both return a wrapped ctx.Err() when ctx is
// done before they start. A store that also implements io.Closer must be
// closed by its owner; methods of a closed store return ErrClosed.
type Store interface {
	Append(ctx context.Context, rs ...Record) error
	Scan(ctx context.Context, f Filter) ([]Record, error)
}
