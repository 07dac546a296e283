package records

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync/atomic"
)

// Evidence is a set of real, executed records: the M that a world model reads
// in its context (METHOD.md §1 Research World Model). It can only be built by
// NewEvidence or Evidence.Add, which reject anything but Source Real, so
// predicted or synthetic records can never be mistaken for evidence
// (METHOD.md §1 Synthetic state expansion). The zero value is empty
// evidence. Evidence is immutable: Add returns a new value, holding its
// own copies of the records it was given (their Seeds, Proposal.Params and
// Task.Descriptors), so a caller may reuse its records afterwards. At and
// Records return records that share those maps and slices with the
// evidence: they are read-only. Copies of one Evidence value share the
// memo of its Fingerprint.
type Evidence struct {
	rs []Record
	fp *fingerprint // nil for the zero value
}

// fingerprint memoises Evidence.Fingerprint. Two goroutines that read it
// first at once may both compute it; both store the same value.
type fingerprint struct {
	v atomic.Pointer[string]
}

// NewEvidence returns evidence holding rs, or an error wrapping
// ErrNotEvidence for the first record that is not real, ErrInvalid for the
// first invalid one, or ErrImplausible for the first that fails Plausible.
func NewEvidence(rs ...Record) (Evidence, error) {
	return Evidence{}.Add(rs...)
}

// RealOnly returns the real records of rs as evidence, dropping the rest.
// It is the filter for mixed slices such as a state pool; invalid real
// records are reported as errors.
func RealOnly(rs []Record) (Evidence, error) {
	return Evidence{}.AddReal(rs...)
}

// AddReal returns evidence holding e's records followed by the real
// records of rs, dropping the others (a state's history mixes real records
// with synthetic ones, which never reach a world model: METHOD.md §1
// Synthetic state expansion). Without a real record it returns e itself;
// an invalid real record is an error, as for Add.
func (e Evidence) AddReal(rs ...Record) (Evidence, error) {
	var keep []Record
	for _, r := range rs {
		if r.Source == Real {
			keep = append(keep, r)
		}
	}
	if len(keep) == 0 {
		return e, nil
	}
	return e.Add(keep...)
}

// Add returns evidence holding e's records followed by rs.
func (e Evidence) Add(rs ...Record) (Evidence, error) {
	for i, r := range rs {
		if r.Source != Real {
			return e, fmt.Errorf("%w: record %d (%s/%s) has source %q", ErrNotEvidence, i, Excerpt(r.Task.ID), Excerpt(r.Proposal.Key()), Excerpt(r.Source))
		}
		if err := r.Validate(); err != nil {
			return e, fmt.Errorf("evidence record %d: %w", i, err)
		}
		if err := Plausible(r); err != nil {
			return e, fmt.Errorf("evidence record %d: %w", i, err)
		}
	}
	out := make([]Record, 0, len(e.rs)+len(rs))
	out = append(out, e.rs...)
	for _, r := range rs {
		out = append(out, ownCopy(r))
	}
	return Evidence{rs: out, fp: &fingerprint{}}, nil
}

// ownCopy returns r with its own copies of the maps and slices it holds.
func ownCopy(r Record) Record {
	r.Seeds = slices.Clone(r.Seeds)
	r.Proposal.Params = maps.Clone(r.Proposal.Params)
	r.Task.Descriptors = maps.Clone(r.Task.Descriptors)
	return r
}

// WithoutTask returns e without the records of task id, the others in
// e's order; without such a record it returns e itself. The judgement of
// a state as for an unseen task reads M this way (lm2lm.Config.HeldOutTask).
func (e Evidence) WithoutTask(id string) Evidence {
	keep := make([]Record, 0, len(e.rs))
	for _, r := range e.rs {
		if r.Task.ID != id {
			keep = append(keep, r)
		}
	}
	if len(keep) == len(e.rs) {
		return e
	}
	return Evidence{rs: keep, fp: &fingerprint{}}
}

// Len returns the number of records.
func (e Evidence) Len() int { return len(e.rs) }

// At returns the i-th record.
func (e Evidence) At(i int) Record { return e.rs[i] }

// Records returns a copy of the records in the order they were added.
func (e Evidence) Records() []Record { return append([]Record(nil), e.rs...) }

// Fingerprint returns a hex digest of the evidence that is independent of
// the records' order and changes when any record's task, proposal key, gain,
// loss, seeds or infeasibility changes. Wrappers use it as a cache key.
// It is computed once per evidence (Add's result), then read back: world
// models fingerprint their context on every prediction.
func (e Evidence) Fingerprint() string {
	if e.fp == nil {
		return e.fingerprint()
	}
	if v := e.fp.v.Load(); v != nil {
		return *v
	}
	v := e.fingerprint()
	e.fp.v.Store(&v)
	return v
}

// fingerprint computes Fingerprint.
func (e Evidence) fingerprint() string {
	lines := make([]string, len(e.rs))
	var buf [8]byte
	for i, r := range e.rs {
		h := sha256.New()
		h.Write([]byte(r.Task.ID))
		h.Write([]byte{0})
		h.Write([]byte(r.Proposal.Key()))
		h.Write([]byte{0})
		for _, v := range []float64{r.Gain, r.Loss, r.Task.RefLoss, r.Task.SeedNoise} {
			binary.LittleEndian.PutUint64(buf[:], math.Float64bits(v))
			h.Write(buf[:])
		}
		for _, s := range r.Seeds {
			binary.LittleEndian.PutUint64(buf[:], s)
			h.Write(buf[:])
		}
		h.Write([]byte{0})
		h.Write([]byte(r.Infeasible))
		lines[i] = string(h.Sum(nil))
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
