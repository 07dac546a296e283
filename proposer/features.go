package proposer

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/lm2lm/lm2lm/records"
)

// ErrFeatures is wrapped by the errors of a featured policy
// (PolicyConfig.Features > 0) whose Features component is missing, of
// another length, or returns a feature out of range or not finite.
var ErrFeatures = errors.New("proposer: proposal features")

// Feature is one nonzero entry of a proposal's feature vector.
type Feature struct {
	Index int
	Value float64
}

// Features describes what a proposal does in a task as a sparse real
// vector φ(t, p) of length Len, the same map for every task: what a
// featured policy's shared weights read (PolicyConfig.Features). Of
// returns the nonzero entries, each Index in [0, Len) and each Value
// finite; a proposal the map cannot describe has none. A task's ID must
// name one task: the policy keeps each task's vectors under its ID. Of
// must be safe for concurrent use.
type Features interface {
	Len() int
	Of(t records.Task, p records.Proposal) []Feature
}

// maxFeatures bounds PolicyConfig.Features, so that a checkpoint cannot
// ask for an absurd allocation.
const maxFeatures = 1 << 20

// maxFeatureTasks bounds the tasks whose vectors a policy keeps; past it
// the store starts again empty (library choice: a training run's tasks
// and its evaluation's fit many times over).
const maxFeatureTasks = 4096

// taskFeatures is one task's vectors: rows[c][i] is φ of card c's i-th
// proposal, its choices read as a mixed-radix number whose first
// parameter is the most significant digit (stride[c][j] is parameter j's
// place value), so the proposals that share a card's first r choices are
// one contiguous block of rows.
type taskFeatures struct {
	rows   [][][]Feature
	stride [][]int
}

// featureStore is a featured policy's component and its tasks' vectors,
// behind a lock of its own (Propose fills it under the policy's read
// lock).
type featureStore struct {
	mu    sync.Mutex
	f     Features
	tasks map[string]*taskFeatures
}

// UseFeatures attaches the Features component of a featured policy
// (PolicyConfig.Features = f.Len()), for NewPolicy's policy and again
// after UnmarshalBinary, which keeps a component of the right length and
// drops any other. A policy with PolicyConfig.Features > 0 and no
// component fails every call that reads it with ErrFeatures.
func (p *Policy) UseFeatures(f Features) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ready(); err != nil {
		return fmt.Errorf("proposer: features: %w", err)
	}
	if f == nil || f.Len() != p.cfg.Features {
		n := 0
		if f != nil {
			n = f.Len()
		}
		return fmt.Errorf("%w: a map of length %d for a policy of %d features", ErrFeatures, n, p.cfg.Features)
	}
	p.fs = &featureStore{f: f, tasks: map[string]*taskFeatures{}}
	return nil
}

// featuresOf returns t's vectors (nil for a policy without features),
// computing them once per task ID. The caller holds p.mu.
func (p *Policy) featuresOf(t records.Task) (*taskFeatures, error) {
	if p.cfg.Features == 0 {
		return nil, nil
	}
	fs := p.fs
	if fs == nil {
		return nil, fmt.Errorf("%w: none attached (UseFeatures)", ErrFeatures)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if tf, ok := fs.tasks[t.ID]; ok {
		return tf, nil
	}
	tf := &taskFeatures{rows: make([][][]Feature, len(p.lay.cards)), stride: make([][]int, len(p.lay.cards))}
	for c, cl := range p.lay.cards {
		if cl.canon == records.NoChange {
			tf.rows[c] = [][]Feature{nil}
			continue
		}
		n := 1
		tf.stride[c] = make([]int, len(cl.params))
		for j := len(cl.params) - 1; j >= 0; j-- {
			tf.stride[c][j] = n
			n *= len(cl.params[j].choices)
		}
		tf.rows[c] = make([][]Feature, n)
		for i := range n {
			pr := records.Proposal{Mechanism: cl.mechanism}
			if len(cl.params) > 0 {
				pr.Params = make(map[string]string, len(cl.params))
			}
			for j, pl := range cl.params {
				pr.Params[pl.name] = pl.choices[i/tf.stride[c][j]%len(pl.choices)]
			}
			row := fs.f.Of(t, pr)
			for _, e := range row {
				if e.Index < 0 || e.Index >= p.cfg.Features || math.IsNaN(e.Value) || math.IsInf(e.Value, 0) {
					return nil, fmt.Errorf("%w: task %s proposal %s: feature %d = %g, want an index in [0, %d) and a finite value",
						ErrFeatures, records.Excerpt(t.ID), pr.Key(), e.Index, e.Value, p.cfg.Features)
				}
			}
			tf.rows[c][i] = row
		}
	}
	if len(fs.tasks) >= maxFeatureTasks {
		clear(fs.tasks)
	}
	fs.tasks[t.ID] = tf
	return tf, nil
}

// block returns the rows of decision t of a sequence of card c whose
// earlier choices are toks[1:t], for output k: for the card decision the
// rows of card k, for a parameter the rows of the proposals that share
// the earlier choices and take choice k.
func (tf *taskFeatures) block(c int, toks []int, t, k int) [][]Feature {
	if t == 0 {
		return tf.rows[k]
	}
	st := tf.stride[c]
	lo := k * st[t-1]
	for j := 0; j < t-1; j++ {
		lo += toks[j+1] * st[j]
	}
	return tf.rows[c][lo : lo+st[t-1]]
}

// sharedOff returns the offset in theta of the shared weights a decision
// t reads: a_card for the card decision, a_param for every parameter.
func (l *layout) sharedOff(t int) int {
	if t == 0 {
		return l.fOff
	}
	return l.fOff + l.nFeat
}

// addShared adds to raw logits u the shared term of decision t (card c,
// earlier choices toks[1:t]): for output k the mean over block(c, toks,
// t, k) of a · φ, with a the decision's shared weights.
func (p *Policy) addShared(u []float64, tf *taskFeatures, c int, toks []int, t int) {
	if tf == nil {
		return
	}
	a := p.theta[p.lay.sharedOff(t):]
	for k := range u {
		rows := tf.block(c, toks, t, k)
		var s float64
		for _, row := range rows {
			for _, e := range row {
				s += a[e.Index] * e.Value
			}
		}
		u[k] += s / float64(len(rows))
	}
}

// backShared adds d · ∂(shared term of output k)/∂a, the mean φ of its
// block, to grad.
func (ps *pass) backShared(d float64, t, k int, grad []float64) {
	rows := ps.tf.block(ps.toks[0], ps.toks, t, k)
	g := grad[ps.lay.sharedOff(t):]
	d /= float64(len(rows))
	for _, row := range rows {
		for _, e := range row {
			g[e.Index] += d * e.Value
		}
	}
}
