package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/yamlenv"
	"github.com/lm2lm/lm2lm/evalplot"
	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/records"
)

// The stages a real run is counted under in the report.
const (
	stageReference   = "reference"
	stageM0          = "M_0"
	stageCalibration = "calibration"
	stageEvaluation  = "evaluation"
)

// Report is the report verb's summary (<out>/report.json): what every
// stage paid, per task what was measured, and every evaluation kept under
// <out>/evaluations.
type Report struct {
	Store              string                `json:"store"`
	PricePerDeviceHour float64               `json:"price_per_device_hour"`
	Stages             []StageCost           `json:"stages"`
	Total              StageCost             `json:"total"`
	Tasks              []TaskRow             `json:"tasks"`
	Evaluations        []EvalSummary         `json:"evaluations,omitempty"`
	Files              map[string]string     `json:"files"`
	References         []environment.RefTask `json:"-"`
}

// StageCost is what one stage's real runs cost. Money is device-hours ×
// price_per_device_hour.
type StageCost struct {
	Stage       string  `json:"stage"`
	Runs        int     `json:"runs"`
	Infeasible  int     `json:"infeasible"`
	Failed      int     `json:"failed"` // of Runs, runs that gave no outcome (paid all the same)
	DeviceHours float64 `json:"device_hours"`
	WallHours   float64 `json:"wall_hours"`
	Money       float64 `json:"money"`
}

func (s *StageCost) add(r records.Record, price float64) {
	s.Runs++
	switch {
	case r.Source == records.Failed:
		s.Failed++
	case r.Infeasible != "":
		s.Infeasible++
	}
	s.DeviceHours += r.Cost.DeviceSeconds / 3600
	s.WallHours += r.Cost.WallSeconds / 3600
	s.Money = s.DeviceHours * price
}

// TaskRow is one task's line: its reference and its real records (gains in
// σ_e units).
type TaskRow struct {
	ID          string  `json:"id"`
	Split       string  `json:"split"`
	RefLoss     float64 `json:"ref_loss,omitempty"`
	SeedNoise   float64 `json:"seed_noise,omitempty"`
	LeftOut     string  `json:"left_out,omitempty"`
	Real        int     `json:"real_records"`
	Infeasible  int     `json:"infeasible"`
	Failed      int     `json:"failed"`
	MeanGain    float64 `json:"mean_gain_sigma"` // NaN (null in JSON): no feasible run
	BestGain    float64 `json:"best_gain_sigma"`
	Best        string  `json:"best_proposal,omitempty"`
	DeviceHours float64 `json:"device_hours"`
}

// MarshalJSON writes the row with an unknown gain (NaN: no feasible run)
// as null, which JSON can hold.
func (row TaskRow) MarshalJSON() ([]byte, error) {
	type plain TaskRow
	orNull := func(x float64) *float64 {
		if math.IsNaN(x) {
			return nil
		}
		return &x
	}
	return json.Marshal(struct {
		plain
		MeanGain *float64 `json:"mean_gain_sigma"`
		BestGain *float64 `json:"best_gain_sigma"`
	}{plain(row), orNull(row.MeanGain), orNull(row.BestGain)})
}

// reportVerb summarises the store and the reports under <out>: it reads
// and runs nothing else.
func reportVerb(ctx context.Context, cfg envconfig.Config, stdout io.Writer) error {
	store, err := records.OpenFile(cfg.Store, records.FileConfig{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("lm2lm: report reads %s: %w", cfg.Store, err)
	}
	defer store.Close()
	rep, err := buildReport(ctx, cfg, store)
	if err != nil {
		return err
	}
	if rep.Evaluations, err = readEvaluations(cfg.Out); err != nil {
		return err
	}
	var md bytes.Buffer
	writeTables(&md, rep, true)
	writeTables(stdout, rep, false)
	rep.Files = map[string]string{}
	var png bytes.Buffer
	costs := make([]evalplot.Cost, len(rep.Stages))
	for i, s := range rep.Stages {
		costs[i] = evalplot.Cost{Stage: s.Stage, Runs: s.Runs, DeviceHours: s.DeviceHours, Money: s.Money}
	}
	if err := evalplot.Costs(&png, "real runs paid, by stage", "money", costs); err != nil {
		return err
	}
	if rep.Files["costs"], err = environment.WriteOut(cfg.Out, "report-costs.png", png.Bytes()); err != nil {
		return err
	}
	if len(rep.Evaluations) > 0 {
		png.Reset()
		sums := make([]evalstat.Summary, len(rep.Evaluations))
		for i, e := range rep.Evaluations {
			sums[i] = evalstat.Summary{Method: fmt.Sprintf("%s (seed %d)", e.Model, e.Seed), Seeds: 1, States: e.States,
				AvgK: e.AvgK, BestK: e.BestK, NegativeRate: e.NegativeRate, Above: e.Above2Sigma, Threshold: 2}
		}
		if err := evalplot.Methods(&png, "held-out evaluations", rep.Evaluations[0].K, sums, nil); err != nil {
			return err
		}
		if rep.Files["evaluations"], err = environment.WriteOut(cfg.Out, "report-evaluations.png", png.Bytes()); err != nil {
			return err
		}
	}
	if rep.Files["markdown"], err = environment.WriteOut(cfg.Out, "report.md", md.Bytes()); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	p, err := environment.WriteOut(cfg.Out, "report.json", append(b, '\n'))
	if err != nil {
		return err
	}
	names := make([]string, 0, len(rep.Files))
	for _, f := range rep.Files {
		names = append(names, f)
	}
	sort.Strings(names)
	fmt.Fprintf(stdout, "\nreport %s; %s\n", p, strings.Join(names, ", "))
	return nil
}

// buildReport counts every record of store under its stage: reference
// runs; M_0 (the real records of M_0's draw, environment.DrawM0 over the
// training tasks that have a reference); evaluation (real records on
// held-out tasks); calibration (every other real record on a training
// task: the service's calibration runs).
func buildReport(ctx context.Context, cfg envconfig.Config, store records.Store) (Report, error) {
	rep := Report{Store: cfg.Store, PricePerDeviceHour: cfg.PricePerDeviceHour}
	refs, err := yamlenv.StoredReferences(ctx, cfg, store)
	if err != nil {
		return rep, err
	}
	m0, err := m0Keys(cfg, refs)
	if err != nil {
		return rep, err
	}
	all, err := store.Scan(ctx, records.Filter{})
	if err != nil {
		return rep, err
	}
	stages := map[string]*StageCost{}
	order := []string{stageReference, stageM0, stageCalibration, stageEvaluation}
	for _, s := range order {
		stages[s] = &StageCost{Stage: s}
	}
	rows, ids := taskRows(refs)
	sums := map[string]float64{}
	for _, r := range all {
		stage, ok := stageOf(r, m0)
		if !ok {
			continue
		}
		stages[stage].add(r, cfg.PricePerDeviceHour)
		// Every version's runs were paid for; the gains are the current
		// version's.
		if row := rows[r.Task.ID]; row != nil && r.Version == cfg.Training.Version { // nil: a task no longer in the file
			sums[r.Task.ID] += row.count(r)
		}
	}
	for _, id := range ids {
		row := rows[id]
		if n := row.Real - row.Infeasible; n > 0 && row.SeedNoise > 0 {
			row.MeanGain = sums[id] / float64(n)
		} else {
			row.MeanGain, row.BestGain = math.NaN(), math.NaN()
		}
		rep.Tasks = append(rep.Tasks, *row)
	}
	rep.Total.Stage = "total"
	for _, s := range order {
		st := *stages[s]
		rep.Stages = append(rep.Stages, st)
		rep.Total.Runs += st.Runs
		rep.Total.Infeasible += st.Infeasible
		rep.Total.Failed += st.Failed
		rep.Total.DeviceHours += st.DeviceHours
		rep.Total.WallHours += st.WallHours
	}
	rep.Total.Money = rep.Total.DeviceHours * cfg.PricePerDeviceHour
	return rep, nil
}

// m0Keys returns the (task, change) keys of M_0's draw over the training
// tasks with a reference (environment.DrawM0).
func m0Keys(cfg envconfig.Config, refs []environment.RefTask) (map[string]bool, error) {
	tasks, _ := environment.Ready(refs)
	train, _ := environment.Split(tasks)
	cards, err := cfg.Cards()
	if err != nil {
		return nil, err
	}
	m0 := map[string]bool{}
	if len(train) > 0 {
		for _, d := range environment.DrawM0(cfg.M0.Seed, train, cards, cfg.M0.Size) {
			m0[records.TaskChange{Task: d.Task, Proposal: d.Proposal}.Key()] = true
		}
	}
	return m0, nil
}

// taskRows returns a row per task of refs, by ID, and the IDs in order.
func taskRows(refs []environment.RefTask) (map[string]*TaskRow, []string) {
	rows := map[string]*TaskRow{}
	var ids []string
	for _, r := range refs {
		row := &TaskRow{ID: r.Task.ID, Split: string(r.Task.Split), LeftOut: r.LeftOut, BestGain: math.NaN()}
		if r.LeftOut == "" {
			row.RefLoss, row.SeedNoise = r.Task.RefLoss, r.Task.SeedNoise
		}
		rows[r.Task.ID] = row
		ids = append(ids, r.Task.ID)
	}
	return rows, ids
}

// stageOf returns the stage that paid for r: reference runs (a failed run
// of the no-change proposal is one), M_0 (its draw's keys m0),
// calibration, or evaluation (held-out tasks); ok is false for a record no
// stage paid for (synthetic).
func stageOf(r records.Record, m0 map[string]bool) (string, bool) {
	switch {
	case r.Source == records.Reference || r.Source == records.Failed && r.Proposal.IsNoChange():
		return stageReference, true
	case r.Source != records.Real && r.Source != records.Failed:
		return "", false
	case r.Task.Split != records.Train:
		return stageEvaluation, true
	case m0[records.TaskChange{Task: r.Task, Proposal: r.Proposal}.Key()]:
		return stageM0, true
	}
	return stageCalibration, true
}

// count adds r to the row and returns its gain in σ_e units (0 when it
// is not a feasible real run of a task with a reference).
func (row *TaskRow) count(r records.Record) float64 {
	row.DeviceHours += r.Cost.DeviceSeconds / 3600
	if r.Source == records.Failed {
		row.Failed++
	}
	if r.Source != records.Real {
		return 0
	}
	row.Real++
	if r.Infeasible != "" {
		row.Infeasible++
		return 0
	}
	if !(row.SeedNoise > 0) {
		return 0
	}
	g := (row.RefLoss - r.Loss) / row.SeedNoise
	if math.IsNaN(row.BestGain) || g > row.BestGain {
		row.BestGain, row.Best = g, r.Proposal.Key()
	}
	return g
}

// gainsNote says what the report's two gain figures are.
const gainsNote = `A task's gains are b_e − ℓ of each feasible run, divided by σ_e: the mean over the task's runs and
the best one. An evaluation's Avg@K and Best@K divide by σ_e the gain each run reported: the script's own "gain"
when it writes one (the PyTorch example's is against the reference run of the same seed, so it differs from b_e − ℓ
by that seed's distance from b_e), else b_e − ℓ. They are averaged per state over its K proposals (an infeasible run
counting −6) or the best of them, then averaged over the states: so they read the proposer's choices, where a task's
mean reads every run the store holds of it (M_0's random draws, calibrations). The rates (gain ≤ 0, gain > 2σ_e)
are shares in per cent, with their 95% intervals.
`

// rate formats a share with its interval as unsigned per cents.
func rate(i evalstat.Interval) string {
	return fmt.Sprintf("%.0f%% [%.0f, %.0f]", 100*i.Point, 100*i.Low, 100*i.High)
}

// readEvaluations reads every evaluation kept under <out>/evaluations,
// ordered by file name.
func readEvaluations(out string) ([]EvalSummary, error) {
	paths, err := filepath.Glob(filepath.Join(out, "evaluations", "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	var evs []EvalSummary
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var e EvalSummary
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("lm2lm: report: %s: %w", p, err)
		}
		evs = append(evs, e)
	}
	return evs, nil
}

// writeTables writes the report's tables, as Markdown or aligned text.
func writeTables(w io.Writer, rep Report, markdown bool) {
	table := func(title string, head []string, rows [][]string) {
		if markdown {
			fmt.Fprintf(w, "## %s\n\n| %s |\n|%s\n", title, strings.Join(head, " | "), strings.Repeat(" --- |", len(head)))
			for _, r := range rows {
				fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
			}
			fmt.Fprintln(w)
			return
		}
		fmt.Fprintf(w, "%s\n", title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\n", strings.Join(head, "\t"))
		for _, r := range rows {
			fmt.Fprintf(tw, "  %s\n", strings.Join(r, "\t"))
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	if markdown {
		fmt.Fprintf(w, "# lm2lm report\n\nStore `%s`; money = device-hours × %g (price_per_device_hour).\n\n", rep.Store, rep.PricePerDeviceHour)
	}
	var rows [][]string
	for _, s := range append(append([]StageCost(nil), rep.Stages...), rep.Total) {
		rows = append(rows, []string{s.Stage, fmt.Sprint(s.Runs), fmt.Sprint(s.Infeasible), fmt.Sprint(s.Failed),
			fmt.Sprintf("%.3f", s.DeviceHours), fmt.Sprintf("%.3f", s.WallHours), fmt.Sprintf("%.2f", s.Money)})
	}
	table("Real runs paid, by stage", []string{"stage", "runs", "infeasible", "failed", "device-hours", "wall-hours", "money"}, rows)
	rows = nil
	num := func(x float64, f string) string {
		if math.IsNaN(x) {
			return "–"
		}
		return fmt.Sprintf(f, x)
	}
	for _, t := range rep.Tasks {
		ref := "left out: " + t.LeftOut
		if t.LeftOut == "" {
			ref = fmt.Sprintf("%.6g ± %.3g", t.RefLoss, t.SeedNoise)
		}
		best := num(t.BestGain, "%+.2f")
		if t.Best != "" {
			best += " " + t.Best
		}
		rows = append(rows, []string{t.ID, t.Split, ref, fmt.Sprint(t.Real), fmt.Sprint(t.Infeasible), fmt.Sprint(t.Failed),
			num(t.MeanGain, "%+.2f"), best, fmt.Sprintf("%.3f", t.DeviceHours)})
	}
	table("Tasks (gains in σ_e units against b_e)", []string{"task", "split", "b_e ± σ_e", "real records", "infeasible", "failed",
		"mean gain", "best gain", "device-hours"}, rows)
	if len(rep.Evaluations) > 0 {
		rows = nil
		for _, e := range rep.Evaluations {
			rows = append(rows, []string{e.Model, fmt.Sprint(e.Seed), fmt.Sprint(e.States), e.AvgK.String(), e.BestK.String(),
				rate(e.NegativeRate), rate(e.Above2Sigma), fmt.Sprintf("%.1f%%", 100*e.Infeasible), fmt.Sprint(e.Invalid), fmt.Sprint(e.Runs)})
		}
		table("Held-out evaluations (σ_e units, 95% bootstrap over states)", []string{"proposer", "seed", "states",
			"Avg@K", "Best@K", "gain ≤ 0", "gain > 2σ_e", "infeasible", "invalid", "runs paid"}, rows)
	}
	if markdown {
		fmt.Fprint(w, gainsNote)
		fmt.Fprintf(w, "\n## Charts\n\n![real runs paid, by stage](report-costs.png)\n")
		if len(rep.Evaluations) > 0 {
			fmt.Fprintf(w, "\n![held-out evaluations](report-evaluations.png)\n")
		}
	}
}
