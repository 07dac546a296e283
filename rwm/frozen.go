package rwm

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/records"
)

// Frozen is a Tuned model whose hyperparameters stay those it picks on a
// base evidence (M_0): records added later, such as calibration records
// (METHOD.md §1 On-policy calibration), condition its predictions through
// the kernel but never re-tune it. A Tuned model re-tunes on every new
// evidence, so a calibration can move every prediction (a new signal
// scale or noise level) instead of those near its records; a Frozen one
// moves a prediction as far as the kernel relates it to the new records.
//
// A query's configuration is the one Tune picks on the base records that
// the query's evidence holds: M_0 itself for the trainer's evidence, M_0
// without a task under lm2lm.Config.HeldOutTask (Pin). Frozen is a Pinner
// and safe for concurrent use; its tunings are Tuned's, memoised there.
type Frozen struct {
	t    *Tuned
	base records.Evidence
	keys map[string]bool
	id   string
}

var (
	_ WorldModel = (*Frozen)(nil)
	_ Pinner     = (*Frozen)(nil)
	_ Identifier = (*Frozen)(nil)
)

// NewFrozen returns t with its hyperparameters frozen on base.
func NewFrozen(t *Tuned, base records.Evidence) (*Frozen, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: frozen: nil Tuned model", ErrConfig)
	}
	f := &Frozen{t: t, base: base, keys: make(map[string]bool, base.Len())}
	for _, r := range base.Records() {
		f.keys[recordID(r)] = true
	}
	f.id = "rwm.Frozen/" + base.Fingerprint() + "/" + t.ID()
	return f, nil
}

// ID names the model: its base's fingerprint and the Tuned model's ID.
func (f *Frozen) ID() string { return f.id }

// Base returns the evidence the hyperparameters are frozen on.
func (f *Frozen) Base() records.Evidence { return f.base }

// Pin returns the model tuned on the base records ev holds, predicting
// with ev and whatever a query's evidence adds to it.
func (f *Frozen) Pin(ctx context.Context, ev records.Evidence) (WorldModel, error) {
	var in []records.Record
	for _, r := range ev.Records() {
		if f.keys[recordID(r)] {
			in = append(in, r)
		}
	}
	sub, err := records.NewEvidence(in...)
	if err != nil {
		return nil, fmt.Errorf("rwm: frozen: %w", err)
	}
	return f.t.Pin(ctx, sub)
}

// Predict predicts q with the configuration tuned on the base records of
// q's evidence.
func (f *Frozen) Predict(ctx context.Context, q Query) (Prediction, error) {
	if err := q.Validate(); err != nil {
		return Prediction{}, err
	}
	w, err := f.Pin(ctx, q.Evidence)
	if err != nil {
		return Prediction{}, err
	}
	return w.Predict(ctx, q)
}

// recordID identifies a real record by its task, proposal, seeds, loss
// and outcome.
func recordID(r records.Record) string {
	var b strings.Builder
	b.WriteString(r.Task.ID)
	b.WriteByte(0)
	b.WriteString(r.Proposal.Key())
	for _, s := range r.Seeds {
		b.WriteByte(0)
		b.WriteString(strconv.FormatUint(s, 10))
	}
	b.WriteByte(0)
	b.WriteString(strconv.FormatUint(math.Float64bits(r.Loss), 16))
	b.WriteByte(0)
	b.WriteString(r.Infeasible)
	return b.String()
}
