package records

import (
	"errors"
	"fmt"
	"sort"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// Sentinel errors of the package. Validation errors wrap ErrInvalid so that
// callers can test for any validation failure with errors.Is.
var (
	ErrInvalid       = errors.New("records: invalid")
	ErrNotFound      = errors.New("records: not found")
	ErrClosed        = errors.New("records: store closed")
	ErrLocked        = errors.New("records: store is locked by another process")
	ErrReadOnly      = errors.New("records: store is open read-only")
	ErrCorrupt       = errors.New("records: corrupt store")
	ErrNotRegular    = errors.New("records: store path is not a regular file")
	ErrPathChanged   = errors.New("records: store file was unlinked or replaced while open")
	ErrNotEvidence   = errors.New("records: record is not real evidence")
	ErrImplausible   = errors.New("records: implausible measurement")
	ErrHistoryTooBig = errors.New("records: history longer than MaxHistory")
)

// Split says whether a task is used for training or held out for evaluation
// (METHOD.md §1 Data and evaluation).
type Split string

const (
	Train   Split = "train"
	HeldOut Split = "held-out"
)

// Valid reports whether s is one of the known splits.
func (s Split) Valid() bool { return s == Train || s == HeldOut }

// Metric names the validation loss a task is measured in (METHOD.md §1
// Vocabulary). Lower is better for every metric.
type Metric string

const (
	// BitsPerByte is validation bits per byte, used by autoregressive families.
	BitsPerByte Metric = "bits-per-byte"
	// NatsPerToken is validation NLL in nats per (masked) token, used by
	// diffusion families.
	NatsPerToken Metric = "nats-per-token"
	// LadderShortfall is 1 − the WMRL ladder score of a code solution
	// (METHOD.md §2; reward.LadderScore), used by code-solution tasks: with
	// b_e = 1 the gain b_e − ℓ is the ladder score itself.
	LadderShortfall Metric = "ladder-shortfall"
	// Loss is any other non-negative, lower-is-better number a training
	// script measures (a mean squared error, an error rate, a loss that is
	// not a log-likelihood), at most MaxGenericLoss.
	Loss Metric = "loss"
)

// Valid reports whether m is one of the known metrics.
func (m Metric) Valid() bool {
	return m == BitsPerByte || m == NatsPerToken || m == LadderShortfall || m == Loss
}

// Task is one LM development environment with its reference configuration:
// the e of METHOD.md §1 Vocabulary.
type Task struct {
	ID          string  `json:"id"`
	Family      string  `json:"family"`      // model family, e.g. "ar-prose"; the unit of held-out generalisation
	Split       Split   `json:"split"`       // Train or HeldOut
	Metric      Metric  `json:"metric"`      // BitsPerByte, NatsPerToken or LadderShortfall
	RefLoss     float64 `json:"ref_loss"`    // b_e: reference validation loss
	SeedNoise   float64 `json:"seed_noise"`  // σ_e: std of the reference loss over seeds, > 0
	Budget      int     `json:"budget"`      // training budget in the host's units (the lab: optimiser steps); 0 = unknown
	Description string  `json:"description"` // free text for humans and LLM prompts
	// Descriptors are named numeric descriptors of the task, the structured
	// twin of Description (e.g. "log10_lr", "width", "budget_log10_flops"):
	// the host defines and documents the names (the lab's are its Desc*
	// constants); names are non-empty, at most 64 bytes of lower-case
	// ASCII letters, digits and '_', and values are finite. Nil = none.
	Descriptors map[string]float64 `json:"descriptors,omitempty"`
}

// validDescriptorName reports whether name is a descriptor name:
// 1–64 bytes of 'a'–'z', '0'–'9' and '_'.
func validDescriptorName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// Validate reports the first problem with t, wrapping ErrInvalid.
func (t Task) Validate() error {
	switch {
	case t.ID == "":
		return fmt.Errorf("%w: task has an empty ID", ErrInvalid)
	case !t.Split.Valid():
		return fmt.Errorf("%w: task %s: unknown split %q", ErrInvalid, Excerpt(t.ID), Excerpt(t.Split))
	case !t.Metric.Valid():
		return fmt.Errorf("%w: task %s: unknown metric %q", ErrInvalid, Excerpt(t.ID), Excerpt(t.Metric))
	case !stat.Finite(t.RefLoss):
		return fmt.Errorf("%w: task %s: reference loss %g is not finite", ErrInvalid, Excerpt(t.ID), t.RefLoss)
	case !stat.Finite(t.SeedNoise) || t.SeedNoise <= 0:
		return fmt.Errorf("%w: task %s: seed noise %g, want finite and > 0", ErrInvalid, Excerpt(t.ID), t.SeedNoise)
	case t.Budget < 0:
		return fmt.Errorf("%w: task %s: budget %d < 0", ErrInvalid, Excerpt(t.ID), t.Budget)
	}
	names := make([]string, 0, len(t.Descriptors))
	for name := range t.Descriptors {
		names = append(names, name)
	}
	sort.Strings(names) // the first problem is the same on every call
	for _, name := range names {
		v := t.Descriptors[name]
		if !validDescriptorName(name) {
			return fmt.Errorf("%w: task %s: descriptor name %q, want 1-64 of a-z, 0-9, _", ErrInvalid, t.ID, name)
		}
		if !stat.Finite(v) {
			return fmt.Errorf("%w: task %s: descriptor %s = %g is not finite", ErrInvalid, t.ID, name, v)
		}
	}
	return nil
}
