package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// Policy is the scripted proposer of solutions: a softmax over a fixed
// list of solutions (one token each), trained by a plain policy-gradient
// step on the advantages it is given. Each Propose call stamps its samples
// with a draw number (Params["draw"]), so that a group's samples can be
// told apart from another group's in the batches it receives. It keeps
// every batch for inspection. Safe for concurrent Propose calls.
type Policy struct {
	sols []Solution
	lr   float64

	mu      sync.Mutex
	logits  []float64
	draws   int
	Batches [][]proposer.Item
}

var _ proposer.Trainable = (*Policy)(nil)

// NewPolicy returns a uniform policy over sols with learning rate lr.
func NewPolicy(sols []Solution, lr float64) *Policy {
	return &Policy{sols: sols, lr: lr, logits: make([]float64, len(sols))}
}

// Probs returns the current distribution over the solutions.
func (p *Policy) Probs() []float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return softmax(p.logits)
}

func softmax(l []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range l {
		m = math.Max(m, v)
	}
	out := make([]float64, len(l))
	var z float64
	for i, v := range l {
		out[i] = math.Exp(v - m)
		z += out[i]
	}
	for i := range out {
		out[i] /= z
	}
	return out
}

// Propose samples n solutions.
func (p *Policy) Propose(ctx context.Context, _ records.State, n int, rng *rand.Rand) ([]proposer.Sample, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wmrl-verdict: propose: %w", err)
	}
	p.mu.Lock()
	pr := softmax(p.logits)
	p.draws++
	draw := strconv.Itoa(p.draws)
	p.mu.Unlock()
	out := make([]proposer.Sample, n)
	for i := range out {
		k, u := 0, rng.Float64()
		for k < len(pr)-1 && u >= pr[k] {
			u -= pr[k]
			k++
		}
		s := p.sols[k]
		out[i] = proposer.Sample{
			Proposal:    records.Proposal{Mechanism: s.Name, Params: map[string]string{"draw": draw}, Text: s.Code},
			Tokens:      []string{s.Name},
			LogProbs:    []float64{math.Log(pr[k])},
			Temperature: 1,
		}
	}
	return out, nil
}

// Update takes one policy-gradient step: θ_k += lr·mean_i A_i·(1[k = a_i] − π_k).
func (p *Policy) Update(ctx context.Context, batch []proposer.Item) (proposer.Stats, error) {
	if err := ctx.Err(); err != nil {
		return proposer.Stats{}, fmt.Errorf("wmrl-verdict: update: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Batches = append(p.Batches, batch)
	if len(batch) == 0 {
		return proposer.Stats{}, nil
	}
	old := softmax(p.logits)
	index := map[string]int{}
	for k, s := range p.sols {
		index[s.Name] = k
	}
	grad := make([]float64, len(p.logits))
	var st proposer.Stats
	for _, it := range batch {
		a, ok := index[it.Sample.Proposal.Mechanism]
		if !ok {
			return proposer.Stats{}, fmt.Errorf("wmrl-verdict: update: unknown solution %q", it.Sample.Proposal.Mechanism)
		}
		for k := range grad {
			ind := 0.0
			if k == a {
				ind = 1
			}
			grad[k] += it.Advantage * (ind - old[k]) / float64(len(batch))
		}
		st.Loss -= it.Advantage / float64(len(batch))
	}
	for k := range p.logits {
		p.logits[k] += p.lr * grad[k]
		if old[k] > 0 {
			st.Entropy -= old[k] * math.Log(old[k])
		}
	}
	now := softmax(p.logits)
	for _, it := range batch {
		a := index[it.Sample.Proposal.Mechanism]
		st.KL += (math.Log(old[a]) - math.Log(now[a])) / float64(len(batch))
	}
	st.Tokens = len(batch)
	return st, nil
}
