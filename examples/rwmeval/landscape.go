package main

// Ranking on a landscape: how well a world model orders the proposals of
// one task (METHOD.md §1 Research World Model) when its context is a random
// part of a landscape store, every catalogue proposal measured on every
// task on two seeds. The metrics are the within-task pairwise ranking
// accuracy and the mean real gain of the model's top 4, the Avg@4 of
// METHOD.md §1 Data and evaluation. Everything here is pure: the store is
// read and the models built by the caller (landscapecmd.go).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// errNoLandscape is wrapped by newLandscape when the records hold no cell
// measured on two seeds.
var errNoLandscape = errors.New("no landscape cells")

// landClip is the clip c of gains in σ_e units, and −c the gain of an
// infeasible run, as in the reward (METHOD.md §1 Reward).
const landClip = 6

// pairThreshold is the least difference of real gains, in σ_e units, for a
// pair to count in the pairwise accuracy: closer pairs are within the seed
// noise and no model can order them (library choice).
const pairThreshold = 1.0

// landGain is a record's gain in σ_e units as the landscape scores it:
// clipped to ±landClip, −landClip when infeasible.
func landGain(r records.Record) float64 {
	if r.Infeasible != "" {
		return -landClip
	}
	return max(-landClip, min(landClip, r.Gain/r.Task.SeedNoise))
}

// landCell is one (task, proposal) of a landscape: the real records of its
// two lowest seeds.
type landCell struct {
	task     records.Task
	proposal records.Proposal
	seeds    [2]records.Record
}

// landscape is the cells of a landscape store, grouped by task.
type landscape struct {
	cells []landCell // by task ID, then proposal key
	tasks [][]int    // indices into cells, one slice per task, by task ID
	ids   []string   // the task IDs
}

// newLandscape groups the real, non-reference records of rs accepted by
// keep (nil = all) into cells. A cell measured on more than two seeds
// keeps the two lowest distinct ones (records.Record.Seeds; of several
// records of one seed, the first in rs); a cell measured on one is
// dropped. It fails, wrapping errNoLandscape, when no cell remains.
func newLandscape(rs []records.Record, keep func(taskID string) bool) (*landscape, error) {
	byKey := map[string][]records.Record{}
	runs, kept := 0, 0
	for _, r := range rs {
		if r.Source != records.Real || r.Proposal.IsNoChange() {
			continue
		}
		runs++
		if keep != nil && !keep(r.Task.ID) {
			continue
		}
		kept++
		k := r.Task.ID + "\x00" + r.Proposal.Key()
		byKey[k] = append(byKey[k], r)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	l := &landscape{}
	for _, k := range keys {
		recs := byKey[k]
		slices.SortStableFunc(recs, func(a, b records.Record) int { return slices.Compare(a.Seeds, b.Seeds) })
		// A store may hold one seed's run more than once (a store merged
		// from two, a run repeated): the first counts, the rest are not
		// a second seed.
		recs = slices.CompactFunc(recs, func(a, b records.Record) bool { return slices.Equal(a.Seeds, b.Seeds) })
		if len(recs) < 2 {
			continue
		}
		c := landCell{task: recs[0].Task, proposal: recs[0].Proposal, seeds: [2]records.Record{recs[0], recs[1]}}
		if n := len(l.ids); n == 0 || l.ids[n-1] != c.task.ID {
			l.ids = append(l.ids, c.task.ID)
			l.tasks = append(l.tasks, nil)
		}
		l.tasks[len(l.tasks)-1] = append(l.tasks[len(l.tasks)-1], len(l.cells))
		l.cells = append(l.cells, c)
	}
	if len(l.cells) == 0 {
		return nil, fmt.Errorf("%w: %d records, %d real runs of a proposal, %d of them on the chosen tasks, %d (task, proposal) cells and none measured on two seeds",
			errNoLandscape, len(rs), runs, kept, len(keys))
	}
	return l, nil
}

// landDraw is one repetition's context draw: per cell, which of its two
// seeds the context may hold (the other is the truth it is scored on), and
// the order in which cells enter the context, so that the context of n
// cells is order[:n] and contexts of one draw are nested.
type landDraw struct {
	seed  []int
	order []int
}

// draw draws a context order and context seeds from rng.
func (l *landscape) draw(rng *rand.Rand) landDraw {
	d := landDraw{seed: make([]int, len(l.cells))}
	for i := range d.seed {
		d.seed[i] = rng.IntN(2)
	}
	d.order = rng.Perm(len(l.cells))
	return d
}

// context returns which cells are in the context of the first n cells of
// d, and the evidence: each context cell's record of its context seed.
func (l *landscape) context(d landDraw, n int) ([]bool, records.Evidence, error) {
	if n < 0 || n >= len(l.cells) {
		return nil, records.Evidence{}, fmt.Errorf("context of %d cells out of %d: want 0 ≤ n < %d", n, len(l.cells), len(l.cells))
	}
	in := make([]bool, len(l.cells))
	for _, i := range d.order[:n] {
		in[i] = true
	}
	var rs []records.Record
	for i, c := range l.cells {
		if in[i] {
			rs = append(rs, c.seeds[d.seed[i]])
		}
	}
	ev, err := records.NewEvidence(rs...)
	if err != nil {
		return nil, records.Evidence{}, fmt.Errorf("context of %d cells: %w", n, err)
	}
	return in, ev, nil
}

// pairAccuracy is the within-task pairwise ranking accuracy (METHOD.md §1
// Data and evaluation, Reliability) over the pairs whose real gains differ
// by at least pairThreshold σ_e: calibrate.PairwiseAccuracyGap on one group.
func pairAccuracy(pred, truth []float64) float64 {
	return calibrate.PairwiseAccuracyGap([][]float64{pred}, [][]float64{truth}, pairThreshold)
}

// topMean is the mean real gain of the k cells predicted best (Avg@k of
// METHOD.md §1 Data and evaluation); ties go to the earlier cell, and k is
// capped at len(pred). NaN when pred is empty.
func topMean(pred, truth []float64, k int) float64 {
	if len(pred) != len(truth) {
		panic("rwmeval: topMean: length mismatch")
	}
	if len(pred) == 0 {
		return math.NaN()
	}
	idx := make([]int, len(pred))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(pred[b], pred[a]) })
	k = min(k, len(idx))
	s := 0.0
	for _, i := range idx[:k] {
		s += truth[i]
	}
	return s / float64(k)
}

// topBias is the predicted minus the real gain of the cell predicted best
// (ties to the earlier cell), the prediction clipped to ±landClip as the
// truth is (landGain): how far a predictor over-trusts the proposal a
// policy maximising it would pick (the exploitation of METHOD.md §1 On-policy
// calibration). NaN when pred is empty.
func topBias(pred, truth []float64) float64 {
	if len(pred) != len(truth) {
		panic("rwmeval: topBias: length mismatch")
	}
	if len(pred) == 0 {
		return math.NaN()
	}
	best := 0
	for i, p := range pred {
		if p > pred[best] {
			best = i
		}
	}
	return max(-landClip, min(landClip, pred[best])) - truth[best]
}

// interval is a mean over tasks and its percentile-bootstrap interval.
type interval struct {
	mean, lo, hi float64
	tasks        int // tasks with a defined value
}

// bootstrap returns the mean of the defined (non-NaN) per-task values and
// the 95% percentile interval of the means of `resamples` resamples of
// those tasks with replacement, drawn from rng. All NaN when none is
// defined.
func bootstrap(perTask []float64, resamples int, rng *rand.Rand) interval {
	var xs []float64
	for _, x := range perTask {
		if !math.IsNaN(x) {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return interval{mean: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	}
	means := make([]float64, resamples)
	for b := range means {
		s := 0.0
		for range xs {
			s += xs[rng.IntN(len(xs))]
		}
		means[b] = s / float64(len(xs))
	}
	slices.Sort(means)
	return interval{mean: meanOf(xs), lo: quantile(means, 0.025), hi: quantile(means, 0.975), tasks: len(xs)}
}

// quantile is the q-quantile of sorted xs, interpolating linearly between
// order statistics.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	h := q * float64(len(xs)-1)
	i := int(h)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (h-float64(i))*(xs[i+1]-xs[i])
}

// meanOf is the mean of the non-NaN values of xs; NaN when there is none.
func meanOf(xs []float64) float64 {
	s, n := 0.0, 0
	for _, x := range xs {
		if !math.IsNaN(x) {
			s += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

// rankModel is a world model under the name its report rows carry.
type rankModel struct {
	name  string
	model rwm.WorldModel
}

// rankConfig parameterises rankLandscape.
type rankConfig struct {
	sizes     []int  // context sizes, in cells; default 50, 100, 200
	reps      int    // R, context draws; default 6
	k         int    // the top k scored; default 4 (Avg@4, METHOD.md §1 Data and evaluation)
	seed      uint64 // of the draws (PCG(seed, repetition)) and of the bootstrap; default 1
	resamples int    // bootstrap resamples over tasks; default 2000 (library choice)
}

func defaultRankConfig() rankConfig {
	return rankConfig{sizes: []int{50, 100, 200}, reps: 6, k: 4, seed: 1, resamples: 2000}
}

// The baseline rows of the report. The mean gain is a blind pick's: its
// predictions are all equal, so its pairwise accuracy is ½. The oracle
// predicts each cell by its measurement on the context seed (the truth is
// the other seed): its pairwise accuracy is the ceiling seed noise allows
// and its top 4 the best a ranking of the cells can do.
const (
	rowMean   = "mean gain"
	rowOracle = "oracle: the context seed's gains"
)

// rankRow is one row of the report: a predictor at one context size.
type rankRow struct {
	name            string
	n               int
	pair, top, bias interval
}

// rankLandscape scores the models and the baselines on cfg.reps context
// draws of l at each context size. In each draw and size, every task's
// cells outside the context are predicted and scored against the other
// seed's gains: pairAccuracy and topMean. A row's figure is the mean over
// tasks of each task's mean over the draws (the mean over draws × tasks
// when every value is defined), with a 95% percentile-bootstrap interval
// over tasks (bootstrap; every row resamples the same tasks).
func rankLandscape(ctx context.Context, l *landscape, models []rankModel, cfg rankConfig) ([]rankRow, error) {
	for _, n := range cfg.sizes {
		if n < 0 || n >= len(l.cells) {
			return nil, fmt.Errorf("context of %d cells out of %d: want 0 ≤ n < %d", n, len(l.cells), len(l.cells))
		}
	}
	return rankRows(cfg, rowNames(nil, models), len(l.tasks), func(rep int) func(n int, add scoreFunc) error {
		d := l.draw(rand.New(rand.NewPCG(cfg.seed, uint64(rep))))
		return func(n int, add scoreFunc) error { return l.scoreContext(ctx, d, n, cfg.k, models, add) }
	})
}

// check reports a configuration that ranks nothing.
func (cfg rankConfig) check() error {
	if cfg.reps < 1 || cfg.k < 1 || cfg.resamples < 1 || len(cfg.sizes) == 0 {
		return fmt.Errorf("rank config: %d repetitions, top %d, %d resamples, %d sizes; want each ≥ 1", cfg.reps, cfg.k, cfg.resamples, len(cfg.sizes))
	}
	return nil
}

// scoreFunc takes one predictor's (kind: its row group) pairwise accuracy,
// top-k gain and bias on its top-rated cell (topBias; NaN for the blind
// pick, which rates no cell above another) on one task.
type scoreFunc = func(kind, task int, pair, top, bias float64)

// rowNames names the row groups: the blind pick, the oracle, a noisy
// oracle per noise level, then the models.
func rowNames(noise []float64, models []rankModel) []string {
	names := []string{rowMean, rowOracle}
	for _, sd := range noise {
		names = append(names, fmt.Sprintf("oracle + noise %g σ_e", sd))
	}
	for _, m := range models {
		names = append(names, m.name)
	}
	return names
}

// rankRows runs cfg.reps repetitions: draw(rep) makes the repetition's
// draw and returns its scorer, which scores a context size n by calling
// add. It returns one row per name and size (names major): the mean over
// tasks of each task's mean over repetitions, with a 95% percentile
// bootstrap over tasks (bootstrap; every row resamples the same tasks).
func rankRows(cfg rankConfig, names []string, tasks int, draw func(rep int) func(n int, add scoreFunc) error) ([]rankRow, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	nrows := len(names) * len(cfg.sizes)
	pair, top, bias := perTask(nrows, tasks), perTask(nrows, tasks), perTask(nrows, tasks)
	for rep := range cfg.reps {
		score := draw(rep)
		for si, n := range cfg.sizes {
			err := score(n, func(kind, task int, p, t, b float64) {
				row := kind*len(cfg.sizes) + si
				pair[row][task] = append(pair[row][task], p)
				top[row][task] = append(top[row][task], t)
				bias[row][task] = append(bias[row][task], b)
			})
			if err != nil {
				return nil, fmt.Errorf("repetition %d, context %d: %w", rep, n, err)
			}
		}
	}
	rows := make([]rankRow, nrows)
	for r := range rows {
		rows[r] = rankRow{name: names[r/len(cfg.sizes)], n: cfg.sizes[r%len(cfg.sizes)],
			pair: bootstrap(taskMeans(pair[r]), cfg.resamples, rand.New(rand.NewPCG(cfg.seed, 0xb007))),
			top:  bootstrap(taskMeans(top[r]), cfg.resamples, rand.New(rand.NewPCG(cfg.seed, 0xb007))),
			bias: bootstrap(taskMeans(bias[r]), cfg.resamples, rand.New(rand.NewPCG(cfg.seed, 0xb007)))}
	}
	return rows, nil
}

// perTask returns rows × tasks empty value lists.
func perTask(rows, tasks int) [][][]float64 {
	out := make([][][]float64, rows)
	for r := range out {
		out[r] = make([][]float64, tasks)
	}
	return out
}

// taskMeans returns each task's mean over its values (NaN without one).
func taskMeans(vs [][]float64) []float64 {
	out := make([]float64, len(vs))
	for i, v := range vs {
		out[i] = meanOf(v)
	}
	return out
}

// scoreContext scores one context: the first n cells of d. For each task
// with cells outside the context it calls add with kind 0 (mean gain),
// 1 (oracle) and 2+i (models[i]) and that predictor's pairwise accuracy
// and top-k gain on the task.
func (l *landscape) scoreContext(ctx context.Context, d landDraw, n, k int, models []rankModel, add scoreFunc) error {
	in, ev, err := l.context(d, n)
	if err != nil {
		return err
	}
	for ti, idx := range l.tasks {
		held, seen, truth := l.heldOut(idx, in, d.seed)
		if len(held) == 0 {
			continue
		}
		if err := l.scoreTask(ctx, ti, held, seen, truth, ev, k, nil, nil, models, add); err != nil {
			return err
		}
	}
	return nil
}

// scoreTask scores task ti's held-out cells held (their gains on the
// context seed, seen, and on the other, truth): it calls add with kind 0
// for the blind pick (mean gain), 1 for the oracle (seen), 2+j for the
// noisy oracle of noise[j] (seen + noise[j]·z[cell]) and 2+len(noise)+i
// for models[i] predicting with ev, each with its pairwise accuracy and
// top-k gain on the task.
func (l *landscape) scoreTask(ctx context.Context, ti int, held []int, seen, truth []float64, ev records.Evidence, k int, noise, z []float64, models []rankModel, add scoreFunc) error {
	blind := make([]float64, len(held))
	add(0, ti, pairAccuracy(blind, truth), meanOf(truth), math.NaN())
	add(1, ti, pairAccuracy(seen, truth), topMean(seen, truth, k), topBias(seen, truth))
	for j, sd := range noise {
		noisy := make([]float64, len(held))
		for h, i := range held {
			noisy[h] = seen[h] + sd*z[i]
		}
		add(2+j, ti, pairAccuracy(noisy, truth), topMean(noisy, truth, k), topBias(noisy, truth))
	}
	for mi, m := range models {
		pred, err := l.predict(ctx, m, ev, held)
		if err != nil {
			return err
		}
		add(2+len(noise)+mi, ti, pairAccuracy(pred, truth), topMean(pred, truth, k), topBias(pred, truth))
	}
	return nil
}

// heldOut returns the cells of idx not in the context (in[i] false), and
// each one's gain on its context seed (seen; seed[i] picks it) and on the
// other (truth), as landGain scores them.
func (l *landscape) heldOut(idx []int, in []bool, seed []int) (held []int, seen, truth []float64) {
	for _, i := range idx {
		if in[i] {
			continue
		}
		held = append(held, i)
		seen = append(seen, landGain(l.cells[i].seeds[seed[i]]))
		truth = append(truth, landGain(l.cells[i].seeds[1-seed[i]]))
	}
	return held, seen, truth
}

// predict returns m's predicted gains of the cells held, in σ_e units;
// −landClip for a prediction judged invalid (METHOD.md §1 Reward 2).
func (l *landscape) predict(ctx context.Context, m rankModel, ev records.Evidence, held []int) ([]float64, error) {
	pred := make([]float64, len(held))
	for j, i := range held {
		c := l.cells[i]
		p, err := m.model.Predict(ctx, rwm.Query{Task: c.task, Proposal: c.proposal, Evidence: ev})
		if err != nil {
			return nil, fmt.Errorf("%s: predict %s on %s: %w", m.name, c.proposal.Key(), c.task.ID, err)
		}
		pred[j] = p.Gain / c.task.SeedNoise
		if !p.Valid {
			pred[j] = -landClip
		}
	}
	return pred, nil
}

// landscapeTable formats rows as a Markdown table.
func landscapeTable(rows []rankRow, k int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| predictor | context | pairwise accuracy | 95%% interval | top-%d gain (σ_e) | 95%% interval | bias on the top-rated (σ_e) | 95%% interval |\n", k)
	b.WriteString("|---|---:|---:|---|---:|---|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |\n", r.name, r.n,
			num("%.3f", r.pair.mean), span("%.3f", r.pair), num("%+.2f", r.top.mean), span("%+.2f", r.top),
			num("%+.2f", r.bias.mean), span("%+.2f", r.bias))
	}
	return b.String()
}

func num(format string, x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf(format, x)
}

func span(format string, iv interval) string {
	if math.IsNaN(iv.lo) {
		return "—"
	}
	return "[" + fmt.Sprintf(format, iv.lo) + ", " + fmt.Sprintf(format, iv.hi) + "]"
}
