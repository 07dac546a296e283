package evalstat

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat"
)

// Errors; every error of the package wraps one of them.
var (
	// ErrConfig reports a bad Config.
	ErrConfig = errors.New("evalstat: bad config")
	// ErrData reports a malformed cell: no gains, a gain that is NaN or
	// infinite, or two cells of one method with the same seed and state.
	ErrData = errors.New("evalstat: bad data")
	// ErrEmpty reports nothing to summarise: no cells, or no paired states.
	ErrEmpty = errors.New("evalstat: no data")
)

// Config parameterises Summarize and Compare.
type Config struct {
	// Resamples is the number of bootstrap replicates; default 2000
	// (library choice: the 2.5% and 97.5% percentiles then rest on 50
	// replicates each).
	Resamples int
	// Level is the coverage of the intervals; default 0.95.
	Level float64
	// Threshold is the gain, in σ_e units, above which a proposal counts as
	// a clear improvement; default 2 (METHOD.md §1 Headline results: the
	// share of proposals that beat 2σ_e).
	Threshold float64
	// Scheme is the bootstrap's resampling scheme; default StateLevel
	// (this release's; report Hierarchical, which needs Cell.Task).
	Scheme Scheme
}

// DefaultConfig returns 2000 replicates, 95% intervals and the 2σ_e
// threshold.
func DefaultConfig() Config { return Config{Resamples: 2000, Level: 0.95, Threshold: 2} }

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Resamples < 1:
		return fmt.Errorf("%w: Resamples = %d, want ≥ 1", ErrConfig, c.Resamples)
	case !(c.Level > 0 && c.Level < 1):
		return fmt.Errorf("%w: Level = %g, want in (0, 1)", ErrConfig, c.Level)
	case math.IsNaN(c.Threshold) || math.IsInf(c.Threshold, 0):
		return fmt.Errorf("%w: Threshold = %g, want finite", ErrConfig, c.Threshold)
	case c.Scheme != StateLevel && c.Scheme != Hierarchical:
		return fmt.Errorf("%w: %v, want StateLevel or Hierarchical", ErrConfig, c.Scheme)
	}
	return nil
}

// Cell is one research state of one seed: the real gains of the proposals
// sampled for it, in σ_e units (an infeasible proposal carries whatever
// value the caller's evaluation gives it, e.g. −c).
type Cell struct {
	// Seed is the seed of the run that produced the cell (the trained
	// policy's); seeds are the outer level of the bootstrap.
	Seed uint64
	// State names the state within its seed. Compare pairs two methods'
	// cells with equal (Seed, State).
	State string
	// Stratum groups states that are resampled together, so every
	// replicate keeps the mix of strata; "" is one stratum. Under
	// Hierarchical it is the task's region (e.g. lab.RegionOf of the task
	// ID), within which tasks are resampled.
	Stratum string
	// Task names the task the state belongs to; Hierarchical resamples
	// tasks and needs it, StateLevel ignores it. Every cell of a task must
	// have the same Stratum.
	Task string
	// Gains holds one value per measured proposal; at least one.
	Gains []float64
}

// Interval is a point estimate with its bootstrap confidence interval.
type Interval struct {
	Point, Low, High float64
}

// Contains reports whether Low ≤ x ≤ High.
func (i Interval) Contains(x float64) bool { return i.Low <= x && x <= i.High }

// String formats the interval as "+1.23 [-0.50, +2.10]".
func (i Interval) String() string {
	return fmt.Sprintf("%+.2f [%+.2f, %+.2f]", i.Point, i.Low, i.High)
}

// Summary is one method's evaluation over all its seeds and states.
type Summary struct {
	Method string
	// Region is the region summarised (SummarizeRegions); "" for all.
	Region string `json:",omitempty"`
	// Seeds, States and Proposals count the distinct seeds, the cells and
	// the gains summarised.
	Seeds, States, Proposals int
	// AvgK and BestK are the means over states of the mean and the maximum
	// gain of a state's proposals (Avg@K, Best@K), in σ_e units.
	AvgK, BestK Interval
	// NegativeRate is the mean over states of the share of proposals with
	// gain ≤ 0; Above is the mean share with gain > Config.Threshold.
	NegativeRate, Above Interval
	// IQM is the interquartile mean of the states' Avg@K (robust to a few
	// extreme states).
	IQM Interval
	// Threshold is Config.Threshold, the bar of Above.
	Threshold float64
}

// cellStats are the per-state values every statistic averages.
type cellStats struct{ avg, best, neg, above float64 }

func statsOf(g []float64, threshold float64) cellStats {
	s := cellStats{best: math.Inf(-1)}
	for _, x := range g {
		s.avg += x
		s.best = max(s.best, x)
		if x <= 0 {
			s.neg++
		}
		if x > threshold {
			s.above++
		}
	}
	n := float64(len(g))
	s.avg, s.neg, s.above = s.avg/n, s.neg/n, s.above/n
	return s
}

// check validates cells and returns an error naming the first bad one.
func check(method string, cells []Cell) error {
	if len(cells) == 0 {
		return fmt.Errorf("%w: method %q has no cells", ErrEmpty, method)
	}
	seen := make(map[cellKey]bool, len(cells))
	for _, c := range cells {
		k := cellKey{c.Seed, c.State}
		if seen[k] {
			return fmt.Errorf("%w: method %q: seed %d state %q appears twice", ErrData, method, c.Seed, c.State)
		}
		seen[k] = true
		if len(c.Gains) == 0 {
			return fmt.Errorf("%w: method %q: seed %d state %q has no gains", ErrData, method, c.Seed, c.State)
		}
		for _, g := range c.Gains {
			if math.IsNaN(g) || math.IsInf(g, 0) {
				return fmt.Errorf("%w: method %q: seed %d state %q has gain %g", ErrData, method, c.Seed, c.State, g)
			}
		}
	}
	return nil
}

type cellKey struct {
	seed  uint64
	state string
}

// Summarize computes the method's statistics over cells with bootstrap
// intervals drawn from rng. It returns an error wrapping ErrConfig,
// ErrEmpty or ErrData for bad input.
func Summarize(cfg Config, method string, cells []Cell, rng *rand.Rand) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	if err := check(method, cells); err != nil {
		return Summary{}, err
	}
	n := len(cells)
	avg, best, neg, above := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	s := Summary{Method: method, States: n, Threshold: cfg.Threshold}
	seeds := map[uint64]bool{}
	for i, c := range cells {
		cs := statsOf(c.Gains, cfg.Threshold)
		avg[i], best[i], neg[i], above[i] = cs.avg, cs.best, cs.neg, cs.above
		s.Proposals += len(c.Gains)
		seeds[c.Seed] = true
	}
	s.Seeds = len(seeds)
	d, err := resamplerFor(cfg, method, cells)
	if err != nil {
		return Summary{}, err
	}
	iv := bootstrap(cfg, d, rng, []statistic{
		meanOf(avg), meanOf(best), meanOf(neg), meanOf(above), iqmOf(avg),
	})
	s.AvgK, s.BestK, s.NegativeRate, s.Above, s.IQM = iv[0], iv[1], iv[2], iv[3], iv[4]
	return s, nil
}

// Paired is the per-state comparison of Method against Against on the
// states both were evaluated on (equal seed and state).
type Paired struct {
	Method, Against string
	// Region is the region compared (CompareRegions); "" for all.
	Region string `json:",omitempty"`
	// Pairs counts the paired states; UnpairedMethod and UnpairedAgainst
	// count each side's states without a partner (left out).
	Pairs, UnpairedMethod, UnpairedAgainst int
	// Diff is the mean over paired states of Avg@K(Method) − Avg@K(Against),
	// in σ_e units; above zero means Method is better.
	Diff Interval
	// PImprove is the probability of improvement: the share of paired
	// states where Method's Avg@K beats Against's, a tie counting ½.
	PImprove Interval
}

// Compare pairs the cells of method a and method b by (Seed, State) and
// returns the paired difference of their Avg@K and the probability of
// improvement, with bootstrap intervals over the pairs (resampled like
// Summarize's cells, by a's seeds, strata and, under Hierarchical, tasks;
// a pair whose two cells name different tasks or strata is an error
// wrapping ErrData).
func Compare(cfg Config, method string, a []Cell, against string, b []Cell, rng *rand.Rand) (Paired, error) {
	if err := cfg.Validate(); err != nil {
		return Paired{}, err
	}
	if err := check(method, a); err != nil {
		return Paired{}, err
	}
	if err := check(against, b); err != nil {
		return Paired{}, err
	}
	byKey := make(map[cellKey]Cell, len(b))
	for _, c := range b {
		byKey[cellKey{c.Seed, c.State}] = c
	}
	p := Paired{Method: method, Against: against}
	var pairs []Cell
	var diff, win []float64
	for _, c := range a {
		o, ok := byKey[cellKey{c.Seed, c.State}]
		if !ok {
			p.UnpairedMethod++
			continue
		}
		if cfg.Scheme == Hierarchical && (o.Task != c.Task || o.Stratum != c.Stratum) {
			return p, fmt.Errorf("%w: seed %d state %q is task %q (%q) for %q but task %q (%q) for %q",
				ErrData, c.Seed, c.State, c.Task, c.Stratum, method, o.Task, o.Stratum, against)
		}
		x, y := statsOf(c.Gains, cfg.Threshold).avg, statsOf(o.Gains, cfg.Threshold).avg
		pairs = append(pairs, c)
		diff = append(diff, x-y)
		win = append(win, improvement(x, y))
	}
	p.Pairs = len(pairs)
	p.UnpairedAgainst = len(b) - p.Pairs
	if p.Pairs == 0 {
		return p, fmt.Errorf("%w: %q and %q share no (seed, state)", ErrEmpty, method, against)
	}
	d, err := resamplerFor(cfg, method, pairs)
	if err != nil {
		return p, err
	}
	iv := bootstrap(cfg, d, rng, []statistic{meanOf(diff), meanOf(win)})
	p.Diff, p.PImprove = iv[0], iv[1]
	return p, nil
}

func improvement(x, y float64) float64 {
	switch {
	case x > y:
		return 1
	case x == y:
		return 0.5
	}
	return 0
}

// IQM returns the interquartile mean of x: the mean after removing
// ⌊n/4⌋ of the smallest and as many of the largest values (SciPy's
// trim_mean(x, 0.25)). It returns NaN for an empty x and does not modify x.
func IQM(x []float64) float64 {
	if len(x) == 0 {
		return math.NaN()
	}
	s := slices.Clone(x)
	slices.Sort(s)
	k := len(s) / 4
	return stat.Mean(s[k:len(s)-k], nil)
}

// BestOf returns the summary with the highest Avg@K point estimate among
// those whose Method is in names (ties: the first in sums), and false when
// none is.
func BestOf(sums []Summary, names ...string) (Summary, bool) {
	var best Summary
	found := false
	for _, s := range sums {
		if slices.Contains(names, s.Method) && (!found || s.AvgK.Point > best.AvgK.Point) {
			best, found = s, true
		}
	}
	return best, found
}

// Table renders summaries and paired comparisons as a Markdown table, one
// row per summary, gains in σ_e units with their intervals; pairs are
// matched to rows by Method and Region and shown as extra columns per
// Against. When a summary has a Region (SummarizeRegions) a region column
// follows the method.
func Table(sums []Summary, pairs []Paired) string {
	var against []string
	for _, p := range pairs {
		if !slices.Contains(against, p.Against) {
			against = append(against, p.Against)
		}
	}
	var b strings.Builder
	threshold := 2.0
	if len(sums) > 0 {
		threshold = sums[0].Threshold
	}
	regions := slices.ContainsFunc(sums, func(s Summary) bool { return s.Region != "" })
	b.WriteString("| method |")
	if regions {
		b.WriteString(" region |")
	}
	fmt.Fprintf(&b, " seeds | states | Avg@K | Best@K | neg. rate | > %gσ_e | IQM |", threshold)
	for _, a := range against {
		fmt.Fprintf(&b, " Δ vs %s | P(better than %s) |", a, a)
	}
	b.WriteString("\n|---|---|---|---|---|---|---|---|")
	if regions {
		b.WriteString("---|")
	}
	b.WriteString(strings.Repeat("---|---|", len(against)))
	b.WriteString("\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %s |", s.Method)
		if regions {
			fmt.Fprintf(&b, " %s |", s.Region)
		}
		fmt.Fprintf(&b, " %d | %d | %s | %s | %s | %s | %s |", s.Seeds, s.States, s.AvgK, s.BestK,
			percent(s.NegativeRate), percent(s.Above), s.IQM)
		for _, a := range against {
			cell := " – | – |"
			for _, p := range pairs {
				if p.Method == s.Method && p.Against == a && p.Region == s.Region {
					cell = fmt.Sprintf(" %s | %.2f [%.2f, %.2f] |", p.Diff, p.PImprove.Point, p.PImprove.Low, p.PImprove.High)
				}
			}
			b.WriteString(cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func percent(i Interval) string {
	return fmt.Sprintf("%.1f%% [%.1f, %.1f]", 100*i.Point, 100*i.Low, 100*i.High)
}
