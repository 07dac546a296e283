package lab

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/records"
)

// ErrLandscape: the sweep given to Landscape is malformed.
var ErrLandscape = errors.New("lab: invalid landscape sweep")

// Cell is one card's runs on one task: the gain of each seed in the
// metric's units (b_e − ℓ against the reference run of the same seed), with
// Infeasible counting the seeds whose run was infeasible (diverged). A
// skipped cell (the card has no choice that changes the task's reference)
// has neither.
type Cell struct {
	Gains      []float64
	Infeasible int
}

func (c Cell) skipped() bool { return len(c.Gains) == 0 && c.Infeasible == 0 }

// Sweep is a card × task sweep: Cells[t][k] holds card Cards[k] on task
// Tasks[t].
type Sweep struct {
	Tasks []records.Task
	Cards []string
	Cells [][]Cell
}

// LandscapeConfig parameterises Landscape.
type LandscapeConfig struct {
	// Clip is the reward clip c (METHOD.md §1 Reward: r = clip(ĝ/τ, −c, c));
	// default 6. An infeasible seed scores −Clip, as an invalid proposal's
	// reward does.
	Clip float64
	// SignSigma is the threshold of a sign change: a card changes sign when
	// it is above +SignSigma on some task and below −SignSigma on another
	// (in σ units), so that cards near zero do not flip on noise; default 2.
	SignSigma float64
	// SetSize is K of Avg@K, the proposals per task; default 4.
	SetSize int
}

// DefaultLandscapeConfig returns the documented defaults.
func DefaultLandscapeConfig() LandscapeConfig {
	return LandscapeConfig{Clip: 6, SignSigma: 2, SetSize: 4}
}

// LandscapeStats are the landscape figures under one normalisation.
type LandscapeStats struct {
	// MedianSpearman is the median over task pairs of the Spearman rank
	// correlation of the cards' scores (cards present on both tasks, at
	// least 3): low means the best change depends on the task.
	MedianSpearman float64
	// SignChange is the fraction of cards above +SignSigma on some task and
	// below −SignSigma on another.
	SignChange float64
	// Oracle is the mean over tasks of Avg@K of each task's own top K
	// cards; Fixed that of the single set of K cards with the highest mean
	// score over all tasks (the best a context-free policy can do);
	// OracleMinusFixed their difference.
	Oracle, Fixed, OracleMinusFixed float64
	// FixedSet are the cards of the best fixed set, best first.
	FixedSet []string
	// Cards holds each card's mean score over the tasks (a skipped cell
	// counts 0, as in Avg@K; the best fixed set is the K highest) and the
	// tasks where it is above +SignSigma and below −SignSigma, in Cards
	// order of the sweep.
	Cards []CardStats
	// HeldOutOracle, HeldOutFixed and HeldOutOracleMinusFixed are Oracle,
	// Fixed and their difference with the choice and its score on disjoint
	// seeds: each task's top K and the fixed set are chosen on one half of
	// every cell's seeds (outcomes 0, 2, 4, … or 1, 3, 5, …, the gains in
	// seed order, then the infeasible ones) and scored on the other, the
	// mean of both directions. Choosing and scoring on the same seeds lets
	// the best of many noisy cells look better than it is, more so the more
	// cards a sweep has; these figures do not. NaN when a non-skipped cell
	// has fewer than 2 seeds.
	HeldOutOracle, HeldOutFixed, HeldOutOracleMinusFixed float64
	// Scores[t][k] is the card's score on the task (NaN when skipped).
	Scores [][]float64
}

// CardStats is one card's standing over a landscape's tasks.
type CardStats struct {
	Mean         float64
	Above, Below int
}

// LandscapeReport holds the robust figures (σ floored at the family's
// median σ_e, each seed clipped to ±Clip) beside the raw ones (σ_e, no
// clip), as the landscape report prints them.
type LandscapeReport struct {
	Robust, Raw LandscapeStats
	// Floor is the σ floor of each family: the median σ_e of its tasks.
	Floor map[string]float64
}

// Landscape measures how much the best change depends on the task. Each seed's gain is normalised, g/τ with τ = max(σ_e, the family's
// median σ_e) and clipped to [−Clip, Clip] (robust), or g/σ_e (raw); an
// infeasible seed scores −Clip in both; a cell's score is the mean over
// its seeds. For Avg@K a skipped cell scores 0 (proposing a no-op changes
// nothing); for the rank correlations skipped cells are left out. Pure.
func Landscape(s Sweep, cfg LandscapeConfig) (LandscapeReport, error) {
	if err := s.validate(cfg); err != nil {
		return LandscapeReport{}, err
	}
	floor := familyFloors(s.Tasks)
	robust := func(t int, g float64) float64 {
		tau := max(s.Tasks[t].SeedNoise, floor[s.Tasks[t].Family])
		return min(max(g/tau, -cfg.Clip), cfg.Clip)
	}
	raw := func(t int, g float64) float64 { return g / s.Tasks[t].SeedNoise }
	rep := LandscapeReport{
		Robust: landscapeStats(s, cfg, scores(s, cfg, robust)),
		Raw:    landscapeStats(s, cfg, scores(s, cfg, raw)),
		Floor:  floor,
	}
	rep.Robust.heldOut(s, cfg, robust)
	rep.Raw.heldOut(s, cfg, raw)
	return rep, nil
}

// heldOut fills the HeldOut figures: choose on one fold of the seeds,
// score on the other, both ways.
func (st *LandscapeStats) heldOut(s Sweep, cfg LandscapeConfig, norm func(t int, g float64) float64) {
	z0, ok0 := foldScores(s, cfg, norm, 0)
	z1, ok1 := foldScores(s, cfg, norm, 1)
	if !ok0 || !ok1 {
		st.HeldOutOracle, st.HeldOutFixed, st.HeldOutOracleMinusFixed = math.NaN(), math.NaN(), math.NaN()
		return
	}
	st.HeldOutOracle, st.HeldOutFixed = 0, 0
	for _, f := range [][2][][]float64{{z0, z1}, {z1, z0}} {
		choose, score := f[0], f[1]
		means := make([]float64, len(s.Cards))
		for t := range choose {
			for _, k := range topK(choose[t], cfg.SetSize) {
				st.HeldOutOracle += zeroNaN(score[t][k]) / float64(cfg.SetSize*len(choose)*2)
			}
			for k, v := range choose[t] {
				means[k] += zeroNaN(v)
			}
		}
		for _, k := range topK(means, cfg.SetSize) {
			for t := range score {
				st.HeldOutFixed += zeroNaN(score[t][k]) / float64(cfg.SetSize*len(score)*2)
			}
		}
	}
	st.HeldOutOracleMinusFixed = st.HeldOutOracle - st.HeldOutFixed
}

// foldScores returns the cells' scores over fold f of their outcomes
// (fold f holds the outcomes i with i mod 2 = f); ok is false when a
// non-skipped cell has fewer than 2 outcomes.
func foldScores(s Sweep, cfg LandscapeConfig, norm func(t int, g float64) float64, f int) ([][]float64, bool) {
	return outcomeScores(s, cfg, norm, f, 2)
}

// outcomeScores returns each cell's mean score over its outcomes from,
// from+step, … (the outcomes are the gains in seed order under norm, then
// −Clip per infeasible seed; NaN for a skipped cell); ok is false when a
// non-skipped cell has fewer than step outcomes.
func outcomeScores(s Sweep, cfg LandscapeConfig, norm func(t int, g float64) float64, from, step int) ([][]float64, bool) {
	out := make([][]float64, len(s.Cells))
	for t, row := range s.Cells {
		out[t] = make([]float64, len(row))
		for k, c := range row {
			if c.skipped() {
				out[t][k] = math.NaN()
				continue
			}
			n := len(c.Gains) + c.Infeasible
			if n < step {
				return nil, false
			}
			m, infeasible := 0, 0
			for i := from; i < n; i += step {
				m++
				if i >= len(c.Gains) {
					infeasible++
				}
			}
			sum := -cfg.Clip * float64(infeasible)
			for i := from; i < len(c.Gains); i += step {
				sum += norm(t, c.Gains[i])
			}
			out[t][k] = sum / float64(m)
		}
	}
	return out, true
}

// topK returns the indices of the K highest values (NaN counts 0, ties to
// the lower index).
func topK(vs []float64, K int) []int {
	idx := make([]int, len(vs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return zeroNaN(vs[idx[a]]) > zeroNaN(vs[idx[b]]) })
	return idx[:K]
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func (s Sweep) validate(cfg LandscapeConfig) error {
	switch {
	case !(cfg.Clip > 0) || math.IsInf(cfg.Clip, 0):
		return fmt.Errorf("%w: Clip = %g, want finite > 0", ErrLandscape, cfg.Clip)
	case !(cfg.SignSigma > 0):
		return fmt.Errorf("%w: SignSigma = %g, want > 0", ErrLandscape, cfg.SignSigma)
	case cfg.SetSize < 1 || cfg.SetSize > len(s.Cards):
		return fmt.Errorf("%w: SetSize = %d, want 1..%d cards", ErrLandscape, cfg.SetSize, len(s.Cards))
	case len(s.Tasks) < 2:
		return fmt.Errorf("%w: %d tasks, want ≥ 2", ErrLandscape, len(s.Tasks))
	case len(s.Cells) != len(s.Tasks):
		return fmt.Errorf("%w: %d rows of cells for %d tasks", ErrLandscape, len(s.Cells), len(s.Tasks))
	}
	for t, row := range s.Cells {
		if len(row) != len(s.Cards) {
			return fmt.Errorf("%w: task %s has %d cells for %d cards", ErrLandscape, s.Tasks[t].ID, len(row), len(s.Cards))
		}
		if err := s.Tasks[t].Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrLandscape, err)
		}
		for k, c := range row {
			for _, g := range c.Gains {
				if math.IsNaN(g) || math.IsInf(g, 0) {
					return fmt.Errorf("%w: %s on %s: gain %g", ErrLandscape, s.Cards[k], s.Tasks[t].ID, g)
				}
			}
		}
	}
	return nil
}

// familyFloors returns each family's median σ_e.
func familyFloors(tasks []records.Task) map[string]float64 {
	by := map[string][]float64{}
	for _, t := range tasks {
		by[t.Family] = append(by[t.Family], t.SeedNoise)
	}
	out := map[string]float64{}
	for f, xs := range by {
		out[f] = stat.Median(xs)
	}
	return out
}

// scores returns the cells' scores under norm (NaN for skipped cells):
// the mean over all of each cell's outcomes.
func scores(s Sweep, cfg LandscapeConfig, norm func(t int, g float64) float64) [][]float64 {
	z, _ := outcomeScores(s, cfg, norm, 0, 1)
	return z
}

func landscapeStats(s Sweep, cfg LandscapeConfig, z [][]float64) LandscapeStats {
	st := LandscapeStats{Scores: z}
	var rhos []float64
	for a := range z {
		for b := a + 1; b < len(z); b++ {
			if r, ok := spearman(z[a], z[b]); ok {
				rhos = append(rhos, r)
			}
		}
	}
	st.MedianSpearman = stat.Median(rhos)
	var present, flips int
	st.Cards = make([]CardStats, len(s.Cards))
	for k := range s.Cards {
		c := &st.Cards[k]
		var any bool
		for t := range z {
			v := z[t][k]
			if math.IsNaN(v) {
				continue
			}
			any = true
			c.Mean += v / float64(len(z))
			if v > cfg.SignSigma {
				c.Above++
			} else if v < -cfg.SignSigma {
				c.Below++
			}
		}
		if any {
			present++
		}
		if c.Above > 0 && c.Below > 0 {
			flips++
		}
	}
	if present > 0 {
		st.SignChange = float64(flips) / float64(present)
	}
	st.Oracle, st.Fixed, st.FixedSet = oracleAndFixed(s.Cards, st.Cards, z, cfg.SetSize)
	st.OracleMinusFixed = st.Oracle - st.Fixed
	return st
}

// oracleAndFixed returns the mean over tasks of Avg@K of each task's top K
// and of the best fixed set of K cards (the K highest means; skipped cells
// score 0), and that set.
func oracleAndFixed(cards []string, stats []CardStats, z [][]float64, K int) (oracle, fixed float64, set []string) {
	for _, row := range z {
		vs := make([]float64, len(row))
		for k, v := range row {
			if !math.IsNaN(v) {
				vs[k] = v
			}
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(vs)))
		oracle += stat.Mean(vs[:K]) / float64(len(z))
	}
	idx := make([]int, len(cards))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return stats[idx[a]].Mean > stats[idx[b]].Mean })
	for _, k := range idx[:K] {
		fixed += stats[k].Mean / float64(K)
		set = append(set, cards[k])
	}
	return oracle, fixed, set
}

// spearman returns the Spearman correlation of x and y over the indices
// where both are present (not NaN), with average ranks for ties; ok is
// false with fewer than 3 such indices or a constant side.
func spearman(x, y []float64) (float64, bool) {
	var a, b []float64
	for i := range x {
		if !math.IsNaN(x[i]) && !math.IsNaN(y[i]) {
			a, b = append(a, x[i]), append(b, y[i])
		}
	}
	if len(a) < 3 {
		return 0, false
	}
	return stat.Spearman(a, b)
}
