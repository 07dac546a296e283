package proposertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Scripted is a fake proposer.Trainable for tests of code that drives a
// proposer (trainers, evaluation harnesses). Each sample Propose returns is
// a copy of Script[rng.IntN(len(Script))], so a seeded rng reproduces the
// draws. Scripted records the states it was asked about and the batches it
// was given; Update and Supervise change nothing else and return Stats with
// only Tokens set (the batch's total token count). When Err is set, every
// method returns it (wrapped). Scripted is safe for concurrent use; set its
// fields before first use.
type Scripted struct {
	Script []proposer.Sample
	Err    error

	mu         sync.Mutex
	states     []records.State
	updates    [][]proposer.Item
	supervised [][]proposer.Item
}

var (
	_ proposer.Trainable  = (*Scripted)(nil)
	_ proposer.Supervisor = (*Scripted)(nil)
)

// NewScripted returns a Scripted proposer drawing from script.
func NewScripted(script ...proposer.Sample) *Scripted {
	return &Scripted{Script: script}
}

// FromProposals returns a Scripted proposer whose script holds one sample
// per proposal: a single token (the proposal's canonical key) with the
// log-prob of a uniform draw, log(1/len(ps)), at temperature 1. That is the
// true sampling probability when the proposals' keys are distinct.
func FromProposals(ps ...records.Proposal) *Scripted {
	lp := -math.Log(float64(len(ps)))
	script := make([]proposer.Sample, len(ps))
	for i, p := range ps {
		script[i] = proposer.Sample{Proposal: p, Tokens: []string{p.Key()}, LogProbs: []float64{lp}, Temperature: 1}
	}
	return NewScripted(script...)
}

// Propose returns n copies of scripted samples drawn with rng.
func (f *Scripted) Propose(ctx context.Context, s records.State, n int, rng *rand.Rand) ([]proposer.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("proposertest: propose: %w", err)
	}
	if f.Err != nil {
		return nil, fmt.Errorf("proposertest: propose: %w", f.Err)
	}
	if n < 0 {
		return nil, fmt.Errorf("proposertest: propose: n = %d < 0", n)
	}
	if n > 0 && len(f.Script) == 0 {
		return nil, errors.New("proposertest: propose: empty script")
	}
	out := make([]proposer.Sample, n)
	for i := range out {
		out[i] = cloneSample(f.Script[rng.IntN(len(f.Script))])
	}
	f.mu.Lock()
	f.states = append(f.states, cloneState(s))
	f.mu.Unlock()
	return out, nil
}

// Update records a copy of batch.
func (f *Scripted) Update(ctx context.Context, batch []proposer.Item) (proposer.Stats, error) {
	return f.record(ctx, "update", &f.updates, batch)
}

// Supervise records a copy of examples.
func (f *Scripted) Supervise(ctx context.Context, examples []proposer.Item) (proposer.Stats, error) {
	return f.record(ctx, "supervise", &f.supervised, examples)
}

func (f *Scripted) record(ctx context.Context, op string, dst *[][]proposer.Item, items []proposer.Item) (proposer.Stats, error) {
	if err := ctx.Err(); err != nil {
		return proposer.Stats{}, fmt.Errorf("proposertest: %s: %w", op, err)
	}
	if f.Err != nil {
		return proposer.Stats{}, fmt.Errorf("proposertest: %s: %w", op, f.Err)
	}
	cp := make([]proposer.Item, len(items))
	tokens := 0
	for i, it := range items {
		cp[i] = proposer.Item{State: cloneState(it.State), Sample: cloneSample(it.Sample), Advantage: it.Advantage}
		tokens += len(it.Sample.Tokens)
	}
	f.mu.Lock()
	*dst = append(*dst, cp)
	f.mu.Unlock()
	return proposer.Stats{Tokens: tokens}, nil
}

// States returns the states passed to Propose, in call order.
func (f *Scripted) States() []records.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]records.State(nil), f.states...)
}

// Updates returns the batches passed to Update, in call order.
func (f *Scripted) Updates() [][]proposer.Item {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]proposer.Item(nil), f.updates...)
}

// Supervised returns the batches passed to Supervise, in call order.
func (f *Scripted) Supervised() [][]proposer.Item {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]proposer.Item(nil), f.supervised...)
}
