package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/lm2lm/lm2lm/records"
)

// sortedKeys returns m's keys in increasing order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// errConfig marks a configuration NewNeighbourMean refuses.
var errConfig = errors.New("judgement: neighbours")

// configError wraps err with errConfig.
func configError(err error) error { return fmt.Errorf("%w: %w", errConfig, err) }

// NeighbourConfig parameterises NewNeighbourMean.
type NeighbourConfig struct {
	// K is how many corpus tasks nearest to a queried task its mean reads;
	// default 5. Library choice: a handful of neighbours averages out one
	// task's noise and still follows the task.
	K int
	// InfeasibleSigmas is the gain an infeasible corpus record counts as;
	// default −6, as EmbeddedConfig's (METHOD.md §1 Reward 2: −c).
	InfeasibleSigmas float64
	// ClipSigmas clips each corpus record's gain to ±ClipSigmas σ_e before
	// it is averaged; default 6, the reward's clip c (METHOD.md §1
	// Reward 1). 0 = no clip.
	ClipSigmas float64
}

// DefaultNeighbourConfig returns the defaults documented on
// NeighbourConfig.
func DefaultNeighbourConfig() NeighbourConfig {
	return NeighbourConfig{K: 5, InfeasibleSigmas: -6, ClipSigmas: 6}
}

// Validate reports the first field out of range, wrapping ErrConfig.
func (c NeighbourConfig) Validate() error {
	switch {
	case c.K < 1:
		return configError(fmt.Errorf("K = %d, want ≥ 1", c.K))
	case math.IsNaN(c.InfeasibleSigmas) || math.IsInf(c.InfeasibleSigmas, 0) || c.InfeasibleSigmas > 0:
		return configError(fmt.Errorf("InfeasibleSigmas = %g, want finite and ≤ 0", c.InfeasibleSigmas))
	case !(c.ClipSigmas >= 0) || math.IsInf(c.ClipSigmas, 1):
		return configError(fmt.Errorf("ClipSigmas = %g, want finite and ≥ 0", c.ClipSigmas))
	}
	return nil
}

// NeighbourMean is a prior mean gain read from a corpus of other tasks'
// records (METHOD.md §1 Research World Model: the knowledge a pretrained
// model brings from other tasks): the mean, in σ_e units, of a proposal's
// gains on the K corpus tasks nearest to the queried task, by the
// Euclidean distance of their asinh descriptors, each standardised by its
// spread over the corpus's tasks (a descriptor a task lacks counts 0).
// Among the K tasks, those without a record of the proposal are skipped;
// a proposal none of them ran has no mean (Mean's ok is false). Ties in
// distance go to the smaller task ID. It is immutable and safe for
// concurrent use; neighbours are memoised per task ID.
type NeighbourMean struct {
	cfg    NeighbourConfig
	names  []string
	mu, sd []float64
	tasks  []nbTask // sorted by ID
	digest string

	mu2  sync.Mutex
	near map[string][]int // queried task ID → indices of its K nearest tasks
}

// nbTask is one corpus task: its standardised descriptors and its mean
// gain per proposal key.
type nbTask struct {
	id    string
	x     []float64
	gains map[string]float64
}

// NewNeighbourMean returns the neighbour mean of the corpus's real records
// (records of other sources are skipped). It fails, wrapping ErrConfig,
// for a configuration Validate refuses or a corpus with no usable record.
func NewNeighbourMean(corpus []records.Record, cfg NeighbourConfig) (*NeighbourMean, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	byTask, desc := corpusGains(corpus, cfg)
	if len(byTask) == 0 {
		return nil, configError(fmt.Errorf("the corpus has no real record of a change"))
	}
	n := &NeighbourMean{cfg: cfg, near: map[string][]int{}}
	ids := sortedKeys(byTask) // every sum below in one order: the same corpus, the same bits
	n.fitDescriptors(ids, desc)
	for _, id := range ids {
		m := byTask[id]
		t := nbTask{id: id, x: n.standardise(desc[id]), gains: make(map[string]float64, len(m))}
		for k, a := range m {
			t.gains[k] = a.sum / a.n
		}
		n.tasks = append(n.tasks, t)
	}
	n.digest = n.digestOf()
	return n, nil
}

// gainSum is the sum of a proposal's gains on one task, and their number.
type gainSum struct{ sum, n float64 }

// corpusGains sums the corpus's real records of a change with a seed noise
// by task ID and proposal key, each gain in σ_e units (an infeasible
// record's cfg.InfeasibleSigmas), clipped to ±cfg.ClipSigmas; desc holds
// each task's descriptors (its first record's).
func corpusGains(corpus []records.Record, cfg NeighbourConfig) (byTask map[string]map[string]*gainSum, desc map[string]map[string]float64) {
	byTask = map[string]map[string]*gainSum{}
	desc = map[string]map[string]float64{}
	for _, r := range corpus {
		if r.Source != records.Real || !(r.Task.SeedNoise > 0) || r.Proposal.IsNoChange() {
			continue
		}
		g := cfg.InfeasibleSigmas
		if r.Infeasible == "" {
			g = r.Gain / r.Task.SeedNoise
		}
		if c := cfg.ClipSigmas; c > 0 {
			g = max(-c, min(c, g))
		}
		m := byTask[r.Task.ID]
		if m == nil {
			m = map[string]*gainSum{}
			byTask[r.Task.ID] = m
			desc[r.Task.ID] = r.Task.Descriptors
		}
		k := r.Proposal.Key()
		if m[k] == nil {
			m[k] = &gainSum{}
		}
		m[k].sum += g
		m[k].n++
	}
	return byTask, desc
}

// fitDescriptors sets the descriptors the distance reads (names, sorted:
// those of the tasks ids whose asinh spread over them is not zero) and
// each one's mean and standard deviation over the tasks (a descriptor a
// task lacks counts 0).
func (n *NeighbourMean) fitDescriptors(ids []string, desc map[string]map[string]float64) {
	for _, id := range ids {
		for k := range desc[id] {
			if !slices.Contains(n.names, k) {
				n.names = append(n.names, k)
			}
		}
	}
	slices.Sort(n.names)
	var keep []string
	for _, k := range n.names {
		s, sq := 0.0, 0.0
		for _, id := range ids {
			v := math.Asinh(desc[id][k])
			s += v
			sq += v * v
		}
		cnt := float64(len(ids))
		mean := s / cnt
		if sd := math.Sqrt(math.Max(sq/cnt-mean*mean, 0)); sd > 1e-12 {
			keep = append(keep, k)
			n.mu, n.sd = append(n.mu, mean), append(n.sd, sd)
		}
	}
	n.names = keep
}

// digestOf names the mean by its configuration and its tasks' gains and
// standardised descriptors, bit for bit.
func (n *NeighbourMean) digestOf() string {
	h := sha256.New()
	fmt.Fprintf(h, "neighbours %d %v %v\n", n.cfg.K, n.cfg.InfeasibleSigmas, n.cfg.ClipSigmas)
	var b [8]byte
	for _, t := range n.tasks {
		fmt.Fprintf(h, "task %q\n", t.id)
		keys := sortedKeys(t.gains)
		for _, k := range keys {
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(t.gains[k]))
			fmt.Fprintf(h, "%q ", k)
			h.Write(b[:])
		}
		for _, v := range t.x {
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
			h.Write(b[:])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// standardise returns a task's descriptors in the mean's space.
func (n *NeighbourMean) standardise(d map[string]float64) []float64 {
	x := make([]float64, len(n.names))
	for i, k := range n.names {
		x[i] = (math.Asinh(d[k]) - n.mu[i]) / n.sd[i]
	}
	return x
}

// Digest names the mean: its configuration and corpus.
func (n *NeighbourMean) Digest() string { return n.digest }

// Tasks returns how many corpus tasks the mean reads.
func (n *NeighbourMean) Tasks() int { return len(n.tasks) }

// neighbours returns the indices of t's K nearest corpus tasks, nearest
// first; a corpus task with t's own ID is left out.
func (n *NeighbourMean) neighbours(t records.Task) []int {
	n.mu2.Lock()
	idx, ok := n.near[t.ID]
	n.mu2.Unlock()
	if ok {
		return idx
	}
	x := n.standardise(t.Descriptors)
	type cand struct {
		i int
		d float64
	}
	cs := make([]cand, 0, len(n.tasks))
	for i, c := range n.tasks {
		if c.id == t.ID {
			continue
		}
		d := 0.0
		for j := range x {
			e := x[j] - c.x[j]
			d += e * e
		}
		cs = append(cs, cand{i, d})
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return cmp.Compare(a.d, b.d) })
	idx = make([]int, 0, n.cfg.K)
	for _, c := range cs[:min(n.cfg.K, len(cs))] {
		idx = append(idx, c.i)
	}
	n.mu2.Lock()
	n.near[t.ID] = idx
	n.mu2.Unlock()
	return idx
}

// Mean returns the mean gain, σ_e units, of p over t's nearest corpus
// tasks that ran it; ok is false when none did.
func (n *NeighbourMean) Mean(t records.Task, p records.Proposal) (mean float64, ok bool) {
	k := p.Key()
	s, c := 0.0, 0
	for _, i := range n.neighbours(t) {
		if g, has := n.tasks[i].gains[k]; has {
			s += g
			c++
		}
	}
	if c == 0 {
		return 0, false
	}
	return s / float64(c), true
}
