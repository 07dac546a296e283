// Package prior holds the lab's pretrained world-model prior, the file
// examples/priorcorpus fits on the lab's pretraining corpus (tasks of the
// in-distribution space from generator streams no split uses, each with
// its full landscape over two seeds; docs/world-models.md): outside
// knowledge, which no method's real-run budget counts (METHOD.md §1
// Research World Model: the paper's world model is a frozen LLM that
// brings knowledge from pretraining).
package prior

import (
	_ "embed"
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// ErrUnknown is wrapped by Lookup's error for a name that names no prior.
var ErrUnknown = errors.New("lab/prior: unknown prior")

// V2Name names the prior fitted on lab v2's pretraining corpus.
const V2Name = "v2"

//go:embed v2.prior
var v2 []byte

// V2 returns the prior in v2.prior, read and checked (rwm.ReadPrior); its
// Config fits a world model over any lab of the catalogue it was fitted
// with and the lab's effects (lab.Lab.Effects).
func V2() (*rwm.Prior, error) {
	p, err := rwm.ReadPrior(v2)
	if err != nil {
		return nil, fmt.Errorf("lab/prior %s: %w", V2Name, err)
	}
	return p, nil
}

// Lookup returns the prior of the given name (V2Name); another name is an
// error naming the valid one.
func Lookup(name string) (*rwm.Prior, error) {
	if name != V2Name {
		return nil, fmt.Errorf("%w %q; valid: %s", ErrUnknown, records.Excerpt(name), V2Name)
	}
	return V2()
}
