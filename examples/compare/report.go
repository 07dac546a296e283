package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/evalplot"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/examples/compare/internal/probe"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
)

// Comparison is the JSON file of a comparison.
type Comparison struct {
	Command string `json:"command"`
	Profile string `json:"profile"`
	Suite   string `json:"suite"`
	// Setting is the setting every method ran under, by name and content.
	Setting        setting.Setting `json:"setting"`
	Seeds          []uint64        `json:"seeds"`
	Resamples      int             `json:"resamples"`
	InfeasibleGain float64         `json:"infeasible_gain_sigma"`
	// Scale states the robust scale under -scale robust (gains are then on
	// it, not in σ_e units); absent for raw σ_e units.
	Scale *ScaleInfo `json:"scale,omitempty"`
	// Scheme is the bootstrap of every interval and paired difference
	// reported (Summary, Pairs, Parts, RegionPairs, and the tables):
	// evalstat.Hierarchical, which resamples seeds, then tasks within each
	// region, then states, so the intervals count the tasks.
	Scheme  string            `json:"interval_scheme"`
	Methods []MethodSummary   `json:"methods"`
	Pairs   []evalstat.Paired `json:"pairs"`
	// PairsStateLevel are Pairs under evalstat.StateLevel (tasks held
	// fixed), the intervals of earlier reports. Deprecated: kept for this
	// release only, to compare with earlier reports; removed in the next.
	PairsStateLevel []evalstat.Paired `json:"pairs_state_level"`
	// RegionPairs are, for the V3 splits, each of Pairs on each region
	// apart (evalstat.CompareRegions, Region set), pair by pair in Pairs
	// order, regions in lab.RegionNames order; absent for other suites.
	RegionPairs []evalstat.Paired `json:"region_pairs,omitempty"`
	// Power sizes each pair against the best baseline (powerOf): the
	// variance components of its differences and the interval half-width
	// they predict for other designs; absent below two seeds.
	Power []Power `json:"power,omitempty"`
	// Judgement is each method's judgement diagnostic by part, averaged
	// over seeds (-landscape; judgementRows).
	Judgement []JudgementRow `json:"judgement,omitempty"`
	// JudgementRefs are the diagnostic's references, read from the
	// landscape alone (probe.References), with -landscape.
	JudgementRefs []probe.Reference `json:"judgement_references,omitempty"`
	// Locality is each calibrating method's locality measurement
	// (localityRows).
	Locality []LocalityRow `json:"locality,omitempty"`
	// Teacher is each trained method's teacher probe, by step, when the
	// landscape holds training tasks.
	Teacher []TeacherRow        `json:"teacher,omitempty"`
	Runs    map[string][]string `json:"result_files"`
}

// MethodSummary is one method over its seeds.
type MethodSummary struct {
	Method  string           `json:"method"`
	Summary evalstat.Summary `json:"summary"`
	// SummaryStateLevel is Summary under evalstat.StateLevel, the
	// intervals of earlier reports. Deprecated: kept for this release
	// only; removed in the next.
	SummaryStateLevel evalstat.Summary `json:"summary_state_level"`
	// Budget is the mean over seeds of the real runs the method needs (M_0
	// and training), paid for or reused; EvalRuns the same for evaluation.
	Budget, EvalRuns float64
	// CPUSeconds and WallSeconds sum over seeds what was paid when each
	// seed ran.
	CPUSeconds, WallSeconds float64
	Unmeasured              int `json:"unmeasured_proposals"`
	// Parts summarises each part of the evaluation split on its own
	// (lab v2: in- and out-of-distribution; the V3 splits: each region,
	// lab.RegionNames order), with its own bootstrap.
	Parts []PartSummary `json:"parts,omitempty"`
	// EvalPairwise is, with -eval-predict, the trained world model's
	// within-state pairwise accuracy on the method's evaluation proposals
	// over EvalPairs pairs (evalPairwise); nil without predictions.
	EvalPairwise *float64 `json:"eval_pairwise_accuracy,omitempty"`
	EvalPairs    int      `json:"eval_pairs,omitempty"`
	// EvalParts is, with -eval-predict, the same accuracy on each part of
	// the evaluation split and the bias of the world model on the
	// proposal it rates highest in each state (evalPredictionParts); nil
	// without predictions.
	EvalParts []EvalPrediction `json:"eval_predictions_by_part,omitempty"`
}

// EvalPrediction is a trained world model's judgement of a method's
// evaluation proposals on one part of the split (-eval-predict).
type EvalPrediction struct {
	Part string `json:"part"`
	// Pairwise is the within-state pairwise accuracy over Pairs pairs
	// (evalPairwise's); nil when no pair qualifies.
	Pairwise *float64 `json:"pairwise_accuracy,omitempty"`
	Pairs    int      `json:"pairs"`
	// TopBias is the mean over TopStates states of predicted − real gain
	// of the proposal the world model rates highest among the state's
	// measured proposals (its top-rated: what a policy trained on it is
	// drawn to), both clipped to ±evalClip σ_e; > 0 is over-trust (METHOD.md
	// §1 Known weaknesses: exploitation of a static world model).
	TopBias   float64 `json:"top_rated_bias_sigma"`
	TopStates int     `json:"top_rated_states"`
}

// evalClip bounds the gains of TopBias, the reward clip's ±6 σ_e: on the
// raw scale one tiny-σ_e task's gain would decide a mean.
const evalClip = 6.0

// evalPredictionParts groups rs's states with predictions by part (the
// V3 splits' regions, lab v2's halves; partName order) and gives each
// part's EvalPrediction; nil when no state carries predictions.
func evalPredictionParts(suite string, rs []Result) []EvalPrediction {
	type acc struct {
		pred, real [][]float64
		bias       float64
		n, rank    int
	}
	parts := map[string]*acc{}
	clip := func(x float64) float64 { return max(-evalClip, min(evalClip, x)) }
	for _, r := range rs {
		for _, st := range r.States {
			if len(st.Predicted) != len(st.Gains) || len(st.Gains) == 0 {
				continue
			}
			name, rank := partName(stratumOf(suite, st.Task))
			a := parts[name]
			if a == nil {
				a = &acc{rank: rank}
				parts[name] = a
			}
			a.pred, a.real = append(a.pred, st.Predicted), append(a.real, st.Gains)
			top := 0
			for i, p := range st.Predicted {
				if p > st.Predicted[top] {
					top = i
				}
			}
			a.bias += clip(st.Predicted[top]) - clip(st.Gains[top])
			a.n++
		}
	}
	if len(parts) == 0 {
		return nil
	}
	var out []EvalPrediction
	for name, a := range parts {
		e := EvalPrediction{Part: name, TopBias: a.bias / float64(a.n), TopStates: a.n}
		if v, pairs := calibrate.PairwiseAccuracyPairs(a.pred, a.real, evalPairGap); pairs > 0 {
			e.Pairwise, e.Pairs = &v, pairs
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y EvalPrediction) int { return parts[x.Part].rank - parts[y.Part].rank })
	return out
}

// evalPairGap is the least difference of real gains, in σ_e units, for a
// pair of evaluation proposals to count in EvalPairwise: two measurements
// of one proposal differ by seed noise alone, about 1 σ_e, and carry no
// ranking (as in examples/rwmeval's landscape accuracy).
const evalPairGap = 1.0

// evalPairwise returns the world model's within-state pairwise accuracy
// on the evaluation proposals of rs (every state of every seed, each state
// one group: calibrate.PairwiseAccuracyPairs with evalPairGap) and the
// number of pairs it counts; nil and 0 when no state carries predictions
// or no pair qualifies.
func evalPairwise(rs []Result) (*float64, int) {
	var pred, real [][]float64
	for _, r := range rs {
		for _, st := range r.States {
			if len(st.Predicted) != len(st.Gains) {
				continue // no predictions (or not for every proposal)
			}
			pred, real = append(pred, st.Predicted), append(real, st.Gains)
		}
	}
	acc, pairs := calibrate.PairwiseAccuracyPairs(pred, real, evalPairGap)
	if pairs == 0 {
		return nil, 0
	}
	return &acc, pairs
}

// PartSummary is a method's statistics on one part of the evaluation split.
type PartSummary struct {
	// Part is "in" or "out" of distribution (lab v2), or the region (the
	// V3 splits: one of lab.RegionNames, also in Summary.Region).
	Part    string           `json:"part"`
	Summary evalstat.Summary `json:"summary"`
	// SummaryStateLevel is Summary under evalstat.StateLevel.
	// Deprecated: kept for this release only; removed in the next.
	SummaryStateLevel evalstat.Summary `json:"summary_state_level"`
	// VsBest pairs a trained method (not a baseline) with the baseline of
	// the highest Avg@K on this part, state by state, with its own
	// bootstrap (the paired difference on each part).
	VsBest *evalstat.Paired `json:"vs_best_baseline,omitempty"`
	// VsBestStateLevel is VsBest under evalstat.StateLevel.
	// Deprecated: kept for this release only; removed in the next.
	VsBestStateLevel *evalstat.Paired `json:"vs_best_baseline_state_level,omitempty"`
	// stratum and cells are the part's stratum and its cells.
	stratum string
	cells   []evalstat.Cell
}

// partName names a stratum for the tables: a V3 region by its name
// (lab.RegionNames), any other "in" or "out" of distribution; rank orders
// the parts (RegionNames order, in before out).
func partName(stratum string) (name string, rank int) {
	if i := slices.Index(lab.RegionNames, stratum); i >= 0 {
		return stratum, i
	}
	if strings.HasSuffix(stratum, "-out/") {
		return "out", 1
	}
	return "in", 0
}

// partLabel is a part's name in the tables' headers.
func partLabel(part string) string {
	switch part {
	case "in":
		return "in distribution"
	case "out":
		return "out of distribution"
	}
	return part
}

// isRegion reports whether a part is a V3 region.
func isRegion(part string) bool { return slices.Contains(lab.RegionNames, part) }

// partSummaries summarises a method's cells part by part (none for a
// split of one part, e.g. v1).
func partSummaries(cfg evalstat.Config, label string, cells []evalstat.Cell) ([]PartSummary, error) {
	var parts []string
	by := map[string][]evalstat.Cell{}
	for _, c := range cells {
		if _, ok := by[c.Stratum]; !ok {
			parts = append(parts, c.Stratum)
		}
		by[c.Stratum] = append(by[c.Stratum], c)
	}
	if len(parts) < 2 {
		return nil, nil
	}
	sort.SliceStable(parts, func(a, b int) bool {
		_, ra := partName(parts[a])
		_, rb := partName(parts[b])
		return ra < rb
	})
	var out []PartSummary
	for _, p := range parts {
		s, err := evalstat.Summarize(cfg, label, by[p], bootstrapRNG(cfg.Resamples, "part:"+label+p))
		if err != nil {
			return nil, err
		}
		name, _ := partName(p)
		if isRegion(name) {
			s.Region = name
		}
		out = append(out, PartSummary{Part: name, Summary: s, stratum: p, cells: by[p]})
	}
	return out, nil
}

// command is the command line that reproduces the comparison.
func command(o options) string {
	c := fmt.Sprintf("go run ./examples/compare -profile %s -suite %s -seeds %d", o.profile, o.suite, o.seeds)
	for _, f := range []struct {
		name       string
		value, def any
	}{{"first-seed", o.firstSeed, uint64(1)}, {"resamples", o.resamples, 2000}} {
		if f.value != f.def {
			c += fmt.Sprintf(" -%s %v", f.name, f.value)
		}
	}
	if !slices.Equal(o.methods, defaultMethods()) {
		c += " -methods " + strings.Join(o.methods, ",")
	}
	for _, l := range o.levers() {
		if l.on {
			c += l.arg
		}
	}
	if o.scale == "robust" {
		c += " -scale robust"
	}
	return c
}

// prefix names the comparison files by seeds, unless all methods, and
// the robust scale (so its files never replace the raw ones).
func prefix(o options) string {
	p := fmt.Sprintf("compare-seeds%d-%d", o.firstSeed, o.firstSeed+uint64(o.seeds)-1)
	if !slices.Equal(o.methods, defaultMethods()) {
		p += "-" + strings.Join(o.methods, "+")
	}
	if o.scale == "robust" {
		p += "-robust"
	}
	return p
}

// bootstrapRNG seeds a bootstrap from -resamples and a name (the method,
// a pair of methods, or a method's part), so every figure is reproducible.
func bootstrapRNG(resamples int, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(uint64(resamples), h.Sum64()))
}

// stats are a comparison's figures: under evalstat.Hierarchical (what the
// tables show) and, for one release, under evalstat.StateLevel.
type stats struct {
	sums, sumsState   []evalstat.Summary
	parts             [][]PartSummary // with their state-level fields filled
	pairs, pairsState []evalstat.Paired
	regionPairs       []evalstat.Paired // V3 splits only
	power             []Power
}

// Power sizes a paired comparison of a trained method against the best
// baseline: the variance components of the per-state differences
// (evalstat.Differences, evalstat.VarianceComponents), the half-width of
// the measured hierarchical interval, and the half-width the components
// predict for other designs (evalstat.Components.HalfWidth) on the same
// tasks.
type Power struct {
	Method     string              `json:"method"`
	Against    string              `json:"against"`
	Components evalstat.Components `json:"components"`
	// Measured is half the width of the reported interval of Method −
	// Against (Pairs); Predicted the components' figure for this design.
	Measured  float64       `json:"measured_half_width"`
	Predicted float64       `json:"predicted_half_width"`
	Designs   []PowerDesign `json:"designs"`
}

// PowerDesign is one design's predicted 95% half-width.
type PowerDesign struct {
	Seeds     int     `json:"seeds"`
	States    int     `json:"states_per_task"`
	HalfWidth float64 `json:"half_width"`
}

// powerSeeds and powerStates span the designs of the power table.
var powerSeeds, powerStates = []int{3, 4, 5, 6, 8, 10, 16}, []int{1, 2, 4, 8}

// powerOf returns the Power of each pair against a baseline other than
// Base, when the cells allow the estimate (two seeds at least, two tasks
// in some region, two states in some seed and task); none otherwise.
func powerOf(cfg evalstat.Config, o options, cells map[string][]evalstat.Cell, pairs []evalstat.Paired) []Power {
	label := map[string]string{}
	for m := range cells {
		label[methods[m].label] = m
	}
	var out []Power
	for _, p := range pairs {
		if p.Against == methods["base"].label {
			continue
		}
		d, err := evalstat.Differences(cells[label[p.Method]], cells[label[p.Against]])
		if err != nil {
			continue
		}
		c, err := evalstat.VarianceComponents(d)
		if err != nil {
			continue
		}
		prof, _ := o.prof() // validated
		pw := Power{Method: p.Method, Against: p.Against, Components: c, Measured: (p.Diff.High - p.Diff.Low) / 2,
			Predicted: c.HalfWidth(cfg.Level, o.seeds, prof.EvalStates)}
		for _, s := range powerSeeds {
			for _, n := range powerStates {
				pw.Designs = append(pw.Designs, PowerDesign{Seeds: s, States: n, HalfWidth: c.HalfWidth(cfg.Level, s, n)})
			}
		}
		out = append(out, pw)
	}
	return out
}

// powerTable renders each Power: its components, the measured and the
// predicted half-width, and a table of designs (seeds × states per task).
func powerTable(b *strings.Builder, ps []Power) {
	for _, p := range ps {
		c := p.Components
		fmt.Fprintf(b, "\nPower of %s − %s (per-state differences, %d seeds × %d tasks in %d regions, %.1f states per task): "+
			"variance components seed %.3f, task %.3f, seed × task %.3f, state %.3f; 95%% half-width measured ±%.2f, predicted ±%.2f. "+
			"Predicted half-widths on these tasks:\n\n| seeds |", p.Method, p.Against, c.Seeds, c.Tasks, c.Regions, c.States,
			c.Seed, c.Task, c.SeedTask, c.State, p.Measured, p.Predicted)
		for _, n := range powerStates {
			fmt.Fprintf(b, " %d states |", n)
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(powerStates)) + "\n")
		for i, d := range p.Designs {
			if i%len(powerStates) == 0 {
				fmt.Fprintf(b, "| %d |", d.Seeds)
			}
			fmt.Fprintf(b, " ±%.2f |", d.HalfWidth)
			if i%len(powerStates) == len(powerStates)-1 {
				b.WriteString("\n")
			}
		}
	}
}

// configs returns the bootstrap configuration of the reported intervals
// (evalstat.Hierarchical) and the state-level one kept beside them, both
// with -resamples replicates.
func configs(resamples int) (hier, state evalstat.Config) {
	state = evalstat.DefaultConfig()
	state.Resamples = resamples
	hier = state
	hier.Scheme = evalstat.Hierarchical
	return hier, state
}

// statistics summarises every method, on the whole split and on each of
// its parts, and pairs each method against Base and each trained method
// against the best other baseline (on each region too, for the V3
// splits), under both bootstraps of configs; each figure's bootstrap is
// seeded by its name (bootstrapRNG), the same under both.
func statistics(o options, names []string, byMethod map[string][]Result) (stats, error) {
	cfg, state := configs(o.resamples)
	cells := map[string][]evalstat.Cell{}
	for _, m := range names {
		cells[m] = cellsOf(o.suite, byMethod[m])
	}
	var st stats
	partsState := make([][]PartSummary, len(names))
	var baselines []string
	for i, m := range names {
		label := methods[m].label
		s, err := evalstat.Summarize(cfg, label, cells[m], bootstrapRNG(o.resamples, m))
		if err != nil {
			return st, err
		}
		ss, err := evalstat.Summarize(state, label, cells[m], bootstrapRNG(o.resamples, m))
		if err != nil {
			return st, err
		}
		ps, err := partSummaries(cfg, label, cells[m])
		if err != nil {
			return st, err
		}
		if partsState[i], err = partSummaries(state, label, cells[m]); err != nil {
			return st, err
		}
		for k := range ps {
			ps[k].SummaryStateLevel = partsState[i][k].Summary
		}
		st.sums, st.sumsState, st.parts = append(st.sums, s), append(st.sumsState, ss), append(st.parts, ps)
		if methods[m].baseline && m != "base" {
			baselines = append(baselines, s.Method)
		}
	}
	if err := pairPartsWithBest(cfg, names, st.parts); err != nil {
		return st, err
	}
	if err := pairPartsWithBest(state, names, partsState); err != nil {
		return st, err
	}
	for i := range st.parts {
		for k := range st.parts[i] {
			st.parts[i][k].VsBestStateLevel = partsState[i][k].VsBest
		}
	}
	best, hasBest := evalstat.BestOf(st.sums, baselines...)
	for _, m := range names {
		for _, a := range pairedWith(m, names, best.Method, hasBest) {
			if err := st.pair(o, cfg, state, cells, m, a); err != nil {
				return st, err
			}
		}
	}
	st.power = powerOf(cfg, o, cells, st.pairs)
	return st, nil
}

// pairedWith lists the methods m is paired with, in order: Base (for any
// other method), the best baseline, labelled best (for a trained method,
// when hasBest), and m's own pairWith, each of them in names once.
func pairedWith(m string, names []string, best string, hasBest bool) []string {
	against := []string{}
	if m != "base" && slices.Contains(names, "base") {
		against = append(against, "base")
	}
	if hasBest && !methods[m].baseline {
		for _, b := range names {
			if methods[b].label == best {
				against = append(against, b)
			}
		}
	}
	for _, a := range methods[m].pairWith {
		if a != m && slices.Contains(names, a) && !slices.Contains(against, a) {
			against = append(against, a)
		}
	}
	return against
}

// pair adds the paired difference of m against a under both schemes, and
// on the V3 splits region by region.
func (st *stats) pair(o options, cfg, state evalstat.Config, cells map[string][]evalstat.Cell, m, a string) error {
	ma, aa := methods[m].label, methods[a].label
	p, err := evalstat.Compare(cfg, ma, cells[m], aa, cells[a], bootstrapRNG(o.resamples, m+"\x00"+a))
	if err != nil {
		return err
	}
	ps, err := evalstat.Compare(state, ma, cells[m], aa, cells[a], bootstrapRNG(o.resamples, m+"\x00"+a))
	if err != nil {
		return err
	}
	st.pairs, st.pairsState = append(st.pairs, p), append(st.pairsState, ps)
	if isV3(o.suite) {
		rp, err := evalstat.CompareRegions(cfg, ma, cells[m], aa, cells[a], bootstrapRNG(o.resamples, "region:"+m+"\x00"+a))
		if err != nil {
			return err
		}
		st.regionPairs = append(st.regionPairs, byRegionOrder(rp)...)
	}
	return nil
}

// byRegionOrder sorts per-region pairs into lab.RegionNames order.
func byRegionOrder(ps []evalstat.Paired) []evalstat.Paired {
	slices.SortStableFunc(ps, func(a, b evalstat.Paired) int {
		return slices.Index(lab.RegionNames, a.Region) - slices.Index(lab.RegionNames, b.Region)
	})
	return ps
}

// pairPartsWithBest fills each trained method's PartSummary.VsBest: on
// each part, the paired difference with the baseline (other than Base)
// whose Avg@K is highest on that part (evalstat.BestOf).
func pairPartsWithBest(cfg evalstat.Config, names []string, parts [][]PartSummary) error {
	if len(parts) == 0 {
		return nil
	}
	var baselines []string
	for _, m := range names {
		if methods[m].baseline && m != "base" {
			baselines = append(baselines, methods[m].label)
		}
	}
	for p := range parts[0] {
		var sums []evalstat.Summary
		at := map[string]int{} // method label → index in names
		for i := range names {
			if len(parts[i]) > p {
				sums = append(sums, parts[i][p].Summary)
				at[parts[i][p].Summary.Method] = i
			}
		}
		best, ok := evalstat.BestOf(sums, baselines...)
		if !ok {
			return nil
		}
		b := at[best.Method]
		for i, m := range names {
			if methods[m].baseline || len(parts[i]) <= p {
				continue
			}
			part := parts[i][p]
			pr, err := evalstat.Compare(cfg, methods[m].label, part.cells, best.Method, parts[b][p].cells,
				bootstrapRNG(cfg.Resamples, "part:"+m+"\x00"+names[b]+part.stratum))
			if err != nil {
				return err
			}
			if isRegion(part.Part) {
				pr.Region = part.Part
			}
			parts[i][p].VsBest = &pr
		}
	}
	return nil
}

// report computes the comparison of results, writes its files into dir
// and prints its table on w; scale, when not nil, states the robust scale
// the results' gains are on.
func report(w io.Writer, o options, dir string, results []Result, scale *ScaleInfo) error {
	byMethod := map[string][]Result{}
	var names []string
	for _, r := range results {
		if _, ok := byMethod[r.Method]; !ok {
			names = append(names, r.Method)
		}
		byMethod[r.Method] = append(byMethod[r.Method], r)
	}
	st, err := statistics(o, names, byMethod)
	if err != nil {
		return err
	}
	sums, pairs := st.sums, st.pairs
	cmp := comparison(o, dir, names, byMethod, sums, pairs)
	cmp.Scale = scale
	cmp.PairsStateLevel, cmp.RegionPairs, cmp.Power = st.pairsState, st.regionPairs, st.power
	cmp.Judgement = judgementRows(results)
	if _, isTest, err := o.tasks(); err == nil && len(cmp.Judgement) > 0 {
		cmp.JudgementRefs = probe.References(o.land, isTest, func(task string) string { return stratumOf(o.suite, task) }, partOrder)
	}
	cmp.Locality = localityRows(results)
	cmp.Teacher = teacherRows(results)
	for i := range cmp.Methods {
		cmp.Methods[i].SummaryStateLevel = st.sumsState[i]
		cmp.Methods[i].Parts = st.parts[i]
	}
	md := markdown(cmp)
	js, err := json.MarshalIndent(cmp, "", "  ")
	if err != nil {
		return fmt.Errorf("comparison JSON of %s: %w", dir, err)
	}
	outs := []output{{prefix(o) + ".md", []byte(md)}, {prefix(o) + ".json", append(js, '\n')}}
	charts, err := drawCharts(o, names, byMethod, sums, pairs)
	if err != nil {
		return err
	}
	outs = append(outs, charts...)
	regions, err := regionChart(o, cmp.Methods)
	if err != nil {
		return err
	}
	outs = append(outs, regions...)
	if err := writeOutputs(dir, outs, o.force); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%s\n", md)
	for _, f := range outs {
		fmt.Fprintf(w, "written: %s\n", filepath.Join(dir, f.name))
	}
	return nil
}

func comparison(o options, dir string, names []string, byMethod map[string][]Result, sums []evalstat.Summary, pairs []evalstat.Paired) Comparison {
	set, _ := o.chosen() // validated
	c := Comparison{Command: command(o), Profile: o.profile, Suite: o.suite, Setting: set, Resamples: o.resamples,
		InfeasibleGain: infeasibleGain, Scheme: evalstat.Hierarchical.String(), Pairs: pairs, Runs: map[string][]string{}}
	for s := range o.seeds {
		c.Seeds = append(c.Seeds, o.firstSeed+uint64(s))
	}
	for i, m := range names {
		ms := MethodSummary{Method: m, Summary: sums[i]}
		rs := byMethod[m]
		for _, r := range rs {
			ms.Budget += float64(r.Budget()) / float64(len(rs))
			ms.EvalRuns += float64(r.Runs.Evaluation.Fresh+r.Runs.Evaluation.Reused) / float64(len(rs))
			ms.CPUSeconds += r.Runs.M0.CPUSeconds + r.Runs.Training.CPUSeconds + r.Runs.Evaluation.CPUSeconds + r.Runs.Probe.CPUSeconds + r.Runs.History.CPUSeconds
			ms.WallSeconds += r.WallSeconds
			ms.Unmeasured += r.Unmeasured
			rel, _ := filepath.Rel(dir, resultPath(dir, job{r.Method, r.Seed}))
			c.Runs[m] = append(c.Runs[m], rel)
		}
		ms.EvalPairwise, ms.EvalPairs = evalPairwise(rs)
		ms.EvalParts = evalPredictionParts(o.suite, rs)
		c.Methods = append(c.Methods, ms)
	}
	return c
}

// markdown renders the comparison for the README: the command, the
// statistics table and the budget table; on the robust scale, the scale
// with its floors and clip, and thresholds in τ_e.
func markdown(c Comparison) string {
	var b strings.Builder
	if c.Scale != nil {
		fmt.Fprintf(&b, "`%s`: seeds %v, %d bootstrap replicates, gains on the %s test tasks on the robust scale: %s; "+
			"an infeasible run counts %g; 95%% intervals in brackets%s.\n\n", c.Command, c.Seeds, c.Resamples, c.Suite, c.Scale.describe(), c.InfeasibleGain, schemeNote(c.Scheme))
	} else {
		fmt.Fprintf(&b, "`%s`: seeds %v, %d bootstrap replicates, gains in σ_e units on the %s test tasks, "+
			"an infeasible run counts %g σ_e; 95%% intervals in brackets%s.\n\n", c.Command, c.Seeds, c.Resamples, c.Suite, c.InfeasibleGain, schemeNote(c.Scheme))
	}
	sums := make([]evalstat.Summary, len(c.Methods))
	for i, m := range c.Methods {
		sums[i] = m.Summary
	}
	b.WriteString(evalstat.Table(sums, c.Pairs))
	if len(c.Methods) > 0 && len(c.Methods[0].Parts) > 0 {
		b.WriteString("\n| method |")
		for _, p := range c.Methods[0].Parts {
			fmt.Fprintf(&b, " %s: Avg@K | > 2σ_e |", partLabel(p.Part))
		}
		b.WriteString("\n|---|" + strings.Repeat("---|---|", len(c.Methods[0].Parts)) + "\n")
		for _, m := range c.Methods {
			fmt.Fprintf(&b, "| %s |", m.Summary.Method)
			for _, p := range m.Parts {
				fmt.Fprintf(&b, " %+.2f [%+.2f, %+.2f] | %.1f%% |", p.Summary.AvgK.Point, p.Summary.AvgK.Low, p.Summary.AvgK.High, 100*p.Summary.Above.Point)
			}
			b.WriteString("\n")
		}
		partPairs(&b, c.Methods)
	}
	regionPairs(&b, c.RegionPairs)
	judgementTable(&b, c.Judgement)
	judgementRefTable(&b, c.JudgementRefs)
	localityTable(&b, c.Locality)
	teacherTable(&b, c.Teacher)
	powerTable(&b, c.Power)
	b.WriteString("\n| method | real-run budget (M_0 + training, per seed) | evaluation runs per seed | CPU s paid (all seeds) | wall s (all seeds) | unmeasured proposals |\n|---|---|---|---|---|---|\n")
	for _, m := range c.Methods {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | %d |\n", m.Summary.Method, m.Budget, m.EvalRuns, m.CPUSeconds, m.WallSeconds, m.Unmeasured)
	}
	if slices.ContainsFunc(c.Methods, func(m MethodSummary) bool { return m.EvalPairwise != nil }) {
		fmt.Fprintf(&b, "\n| method | world model's within-state pairwise accuracy on the evaluation proposals (real gains ≥ %g σ_e apart) | pairs |\n|---|---|---|\n", evalPairGap)
		for _, m := range c.Methods {
			if m.EvalPairwise != nil {
				fmt.Fprintf(&b, "| %s | %.3f | %d |\n", m.Summary.Method, *m.EvalPairwise, m.EvalPairs)
			}
		}
		evalPartsTable(&b, c.Methods)
	}
	if c.Scale != nil {
		// The threshold columns count robust gains above 2: raw gains
		// above 2τ_e.
		return strings.ReplaceAll(b.String(), "σ_e |", "τ_e |")
	}
	return b.String()
}

// partPairs writes, for each trained method, its paired difference with
// the best baseline of each part (none when no method has one).
func partPairs(b *strings.Builder, ms []MethodSummary) {
	head := false
	for _, m := range ms {
		if len(m.Parts) == 0 || m.Parts[0].VsBest == nil {
			continue
		}
		if !head {
			b.WriteString("\n| method |")
			for _, p := range m.Parts {
				fmt.Fprintf(b, " %s: Δ vs best baseline there | P(better) |", partLabel(p.Part))
			}
			b.WriteString("\n|---|" + strings.Repeat("---|---|", len(m.Parts)) + "\n")
			head = true
		}
		fmt.Fprintf(b, "| %s |", m.Summary.Method)
		for _, p := range m.Parts {
			v := p.VsBest
			fmt.Fprintf(b, " %+.2f [%+.2f, %+.2f] vs %s | %.2f [%.2f, %.2f] |", v.Diff.Point, v.Diff.Low, v.Diff.High, v.Against, v.PImprove.Point, v.PImprove.Low, v.PImprove.High)
		}
		b.WriteString("\n")
	}
}

// regionPairs writes the per-region paired differences (the V3 splits'
// RegionPairs), one row per pair of methods, one column group per region;
// nothing when there are none.
func regionPairs(b *strings.Builder, ps []evalstat.Paired) {
	if len(ps) == 0 {
		return
	}
	var regions []string
	type pair struct{ method, against string }
	var rows []pair
	cell := map[pair]map[string]evalstat.Paired{}
	for _, p := range ps {
		if !slices.Contains(regions, p.Region) {
			regions = append(regions, p.Region)
		}
		k := pair{p.Method, p.Against}
		if cell[k] == nil {
			rows = append(rows, k)
			cell[k] = map[string]evalstat.Paired{}
		}
		cell[k][p.Region] = p
	}
	b.WriteString("\n| method | vs |")
	for _, r := range regions {
		fmt.Fprintf(b, " %s: Δ | P(better) |", r)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---|---|", len(regions)) + "\n")
	for _, k := range rows {
		fmt.Fprintf(b, "| %s | %s |", k.method, k.against)
		for _, r := range regions {
			p, ok := cell[k][r]
			if !ok {
				b.WriteString(" – | – |")
				continue
			}
			fmt.Fprintf(b, " %s | %.2f [%.2f, %.2f] |", p.Diff, p.PImprove.Point, p.PImprove.Low, p.PImprove.High)
		}
		b.WriteString("\n")
	}
}

// schemeNote names the bootstrap of the intervals in the header line.
func schemeNote(scheme string) string {
	if scheme != evalstat.Hierarchical.String() {
		return ""
	}
	return " from the hierarchical bootstrap (seeds, then tasks within each region, then states: the intervals count the tasks; " +
		"the JSON keeps the state-level intervals of earlier reports beside them, as *_state_level, for this release only)"
}

// output is one comparison file.
type output struct {
	name string
	data []byte
}

// writeOutputs writes every file, or none: a file that exists with other
// content is an error unless force.
func writeOutputs(dir string, outs []output, force bool) error {
	var changed []string
	for _, f := range outs {
		old, err := os.ReadFile(filepath.Join(dir, f.name))
		if err == nil && !bytes.Equal(old, f.data) {
			changed = append(changed, f.name)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if len(changed) > 0 && !force {
		return fmt.Errorf("%s: %s would change (other results, or another version of this program, than when written); pass -force to replace them or choose another -out",
			dir, strings.Join(changed, ", "))
	}
	for _, f := range outs {
		path := filepath.Join(dir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		os.Remove(path) // only when force, or a file that was never there
		if err := createNew(path, f.data); err != nil {
			return err
		}
	}
	return nil
}

// drawCharts draws the four charts; a chart with nothing to draw (no
// calibrating method, say) is left out.
func drawCharts(o options, names []string, byMethod map[string][]Result, sums []evalstat.Summary, pairs []evalstat.Paired) ([]output, error) {
	var train []evalplot.TrainingRun
	var probes, picks []evalplot.MonitorRun
	var cal []evalplot.CalibrationPoint
	for _, m := range names {
		label := methods[m].label
		for _, r := range byMethod[m] {
			if len(r.Steps) > 0 {
				train = append(train, trainingRun(label, r))
			}
			if len(r.Probes) > 0 {
				probes = append(probes, monitorRun(label, r.Seed, r.Probes))
			}
			if len(r.Calibrations) > 0 {
				picks = append(picks, monitorRun(label, r.Seed, r.Calibrations))
			}
			for _, c := range r.Calibrations {
				cal = append(cal, evalplot.CalibrationPoint{Label: label, Seed: r.Seed, Step: c.Step, Predicted: c.Predicted, Real: c.Real})
			}
		}
	}
	mon, monTitle := probes, fmt.Sprintf("reliability of each method's world model at the calibration steps (%d training tasks × 8 proposals of the current policy, run for real)", o.probe)
	if len(probes) == 0 {
		mon, monTitle = picks, "reliability monitors on the calibration runs (the top-rated or random picks)"
	}
	seeds := fmt.Sprintf("%d seeds, profile %s", o.seeds, o.profile)
	draws := []struct {
		name string
		skip bool
		draw func(io.Writer) error
	}{
		{"methods", false, func(w io.Writer) error {
			return evalplot.Methods(w, fmt.Sprintf("test tasks (suite %s), %s: 95%% intervals (hierarchical bootstrap)%s", o.suite, seeds, scaleTitle(o)), 4, sums, pairs)
		}},
		{"training", len(train) == 0, func(w io.Writer) error {
			return evalplot.Training(w, "training curves, mean over "+seeds+" (band: lowest to highest seed)", train)
		}},
		{"reliability", len(mon) == 0, func(w io.Writer) error {
			return evalplot.Reliability(w, monTitle+", "+seeds, mon)
		}},
		{"calibration", len(cal) == 0, func(w io.Writer) error {
			return evalplot.Calibration(w, "predicted vs real reward of the calibration runs, "+seeds,
				"gain / τₑ, clipped at ±6", cal)
		}},
	}
	var outs []output
	for _, d := range draws {
		if d.skip {
			continue
		}
		var buf bytes.Buffer
		if err := d.draw(&buf); err != nil {
			return nil, fmt.Errorf("chart %s: %w", d.name, err)
		}
		outs = append(outs, output{prefix(o) + "-" + d.name + ".png", buf.Bytes()})
	}
	return outs, nil
}

// regionChart draws, for the V3 splits, each region's Avg@K beside each
// trained method's paired difference with the best baseline there
// (PartSummary.VsBest), as the regions chart; none for other suites.
func regionChart(o options, ms []MethodSummary) ([]output, error) {
	var sums []evalstat.Summary
	var pairs []evalstat.Paired
	for _, m := range ms {
		for _, p := range m.Parts {
			if !isRegion(p.Part) {
				continue
			}
			sums = append(sums, p.Summary)
			if p.VsBest != nil {
				pairs = append(pairs, *p.VsBest)
			}
		}
	}
	if len(sums) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	title := fmt.Sprintf("test tasks by region (suite %s), %d seeds, profile %s: 95%% intervals (hierarchical bootstrap)%s", o.suite, o.seeds, o.profile, scaleTitle(o))
	if err := evalplot.Regions(&buf, title, 4, sums, pairs); err != nil {
		return nil, fmt.Errorf("chart regions: %w", err)
	}
	return []output{{prefix(o) + "-regions.png", buf.Bytes()}}, nil
}

func monitorRun(label string, seed uint64, cs []CalibrationResult) evalplot.MonitorRun {
	mr := evalplot.MonitorRun{Label: label, Seed: seed}
	for _, c := range cs {
		mr.Points = append(mr.Points, evalplot.Monitor{Step: c.Step, Delta: val(c.Delta), Cosine: val(c.Cosine), Accuracy: val(c.Accuracy), Gap: val(c.Gap)})
	}
	return mr
}

func trainingRun(label string, r Result) evalplot.TrainingRun {
	tr := evalplot.TrainingRun{Method: label, Seed: r.Seed}
	for _, s := range r.Steps {
		tr.Steps = append(tr.Steps, evalplot.TrainingStep{Step: s.Step, MeanGain: val(s.MeanGain), Reward: val(s.Reward),
			Entropy: s.Entropy, TopShare: val(s.TopShare)})
	}
	return tr
}

// evalPartsTable writes, per method with predictions, each part's
// pairwise accuracy and the bias on the top-rated proposal (EvalParts).
func evalPartsTable(b *strings.Builder, ms []MethodSummary) {
	var parts []string
	for _, m := range ms {
		for _, e := range m.EvalParts {
			if !slices.Contains(parts, e.Part) {
				parts = append(parts, e.Part)
			}
		}
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(b, "\n| method |")
	for _, p := range parts {
		fmt.Fprintf(b, " %s: pairwise accuracy | bias on the top-rated (predicted − real, σ_e, clipped ±%g) |", partLabel(p), evalClip)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|---|", len(parts)) + "\n")
	for _, m := range ms {
		if len(m.EvalParts) == 0 {
			continue
		}
		fmt.Fprintf(b, "| %s |", m.Summary.Method)
		for _, p := range parts {
			i := slices.IndexFunc(m.EvalParts, func(e EvalPrediction) bool { return e.Part == p })
			switch {
			case i < 0:
				b.WriteString(" – | – |")
			case m.EvalParts[i].Pairwise == nil:
				fmt.Fprintf(b, " – | %+.2f |", m.EvalParts[i].TopBias)
			default:
				fmt.Fprintf(b, " %.3f | %+.2f |", *m.EvalParts[i].Pairwise, m.EvalParts[i].TopBias)
			}
		}
		b.WriteString("\n")
	}
}
