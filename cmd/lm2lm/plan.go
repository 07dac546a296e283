package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"text/tabwriter"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/environment/yamlenv"
	"github.com/lm2lm/lm2lm/records"
)

// Plan is the plan verb's answer (printed as JSON with -json): what each
// stage would run and pay now, and what that would cost.
type Plan struct {
	Store              string              `json:"store"`
	Version            string              `json:"version"`
	PricePerDeviceHour float64             `json:"price_per_device_hour"`
	Stages             []yamlenv.StagePlan `json:"stages"`
	// ToPay is every stage's runs to pay (AtMost: some of them a bound),
	// Estimate their sum.
	ToPay    int              `json:"to_pay"`
	AtMost   bool             `json:"at_most"`
	Estimate yamlenv.Estimate `json:"estimate"`
}

// planVerb prints what every stage would run and pay, and an estimate of
// its device-hours and money, from the config and the store alone: it
// runs nothing, writes nothing and asks no server.
func planVerb(ctx context.Context, cfg envconfig.Config, args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("lm2lm plan", flag.ContinueOnError)
	fl.SetOutput(stderr)
	asJSON := fl.Bool("json", false, "print the plan as JSON, every run listed")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return usageErr(stderr, "plan: unexpected arguments %q", fl.Args())
	}
	var store records.Store
	fstore, err := records.OpenFile(cfg.Store, records.FileConfig{ReadOnly: true})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		store = records.NewMemStore() // nothing run yet
	case err != nil:
		return fmt.Errorf("lm2lm: plan reads %s: %w", cfg.Store, err)
	default:
		defer fstore.Close()
		store = fstore
	}
	pl, err := makePlan(ctx, cfg, store)
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := json.MarshalIndent(pl, "", "  ")
		if err != nil {
			return err
		}
		_, err = stdout.Write(append(b, '\n'))
		return err
	}
	return printPlan(stdout, cfg, pl)
}

// makePlan plans every stage: the reference runs, M_0, the service's
// calibrations and the evaluation.
func makePlan(ctx context.Context, cfg envconfig.Config, store records.Store) (Plan, error) {
	pl := Plan{Store: cfg.Store, Version: cfg.Training.Version, PricePerDeviceHour: cfg.PricePerDeviceHour}
	p, err := yamlenv.NewPlanner(ctx, cfg, store)
	if err != nil {
		return pl, err
	}
	ref, ready, err := p.References(ctx)
	if err != nil {
		return pl, err
	}
	m0, err := p.M0(ctx, ready)
	if err != nil {
		return pl, err
	}
	train, held := environment.Split(ready)
	ev, err := planEvaluation(ctx, cfg, p, held)
	if err != nil {
		return pl, err
	}
	pl.Stages = []yamlenv.StagePlan{ref, m0, p.Calibration(train), ev}
	pl.Estimate.Basis = yamlenv.Nothing
	for _, s := range pl.Stages {
		pl.ToPay += s.ToPay
		pl.AtMost = pl.AtMost || s.AtMost > 0
		pl.Estimate = pl.Estimate.Add(s.Estimate)
	}
	return pl, nil
}

// planEvaluation plans the evaluate verb on the held-out tasks held: with
// the embedded policy its proposals depend on evaluate.seed alone, so the
// runs are drawn as evaluate draws them (lm2lm.EvalRuns) and looked up in
// the store; a server proposer is not asked, and the runs are at most
// k × states_per_task per task.
func planEvaluation(ctx context.Context, cfg envconfig.Config, p *yamlenv.Planner, held []records.Task) (yamlenv.StagePlan, error) {
	verbs := []string{"evaluate"}
	ids := make([]string, len(held))
	for i, t := range held {
		ids[i] = t.ID
	}
	if len(held) == 0 {
		return yamlenv.StagePlan{Stage: "evaluation", Verbs: verbs, Estimate: yamlenv.Estimate{Basis: yamlenv.Nothing},
			Note: "no held-out task will have a reference: evaluate stops before paying"}, nil
	}
	if cfg.Evaluate.Proposer != nil {
		n := cfg.Evaluate.K * cfg.Evaluate.StatesPerTask * len(held)
		return p.AtMost("evaluation", verbs, n, fmt.Sprintf("at most k × states_per_task × %d held-out tasks: %s's proposals are known "+
			"only when it is asked, and duplicates or stored ones are not paid", len(held), cfg.Evaluate.Proposer.Model), ids...), nil
	}
	cards, err := cfg.Cards()
	if err != nil {
		return yamlenv.StagePlan{}, err
	}
	pol, err := embeddedPolicy(cards)
	if err != nil {
		return yamlenv.StagePlan{}, err
	}
	jobs, _, err := lm2lm.EvalRuns(ctx, evalConfig(cfg), pol, held, &records.Pool{})
	if err != nil {
		return yamlenv.StagePlan{}, err
	}
	changes := make([]records.TaskChange, len(jobs))
	for i, j := range jobs {
		changes[i] = j.Change
	}
	return p.Changes(ctx, "evaluation", verbs, changes)
}

// printPlan prints the plan as a table of stages, the runs each would
// pay, and how the estimate is made.
func printPlan(w io.Writer, cfg envconfig.Config, pl Plan) error {
	fmt.Fprintf(w, "plan: nothing is run or paid; the store %s holds the runs of training.version %q\n\n", pl.Store, pl.Version)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "stage\tverbs\truns\treused\tfailed before\tto pay\tdevice-hours\tmoney\testimate")
	for _, s := range pl.Stages {
		runs, pay := fmt.Sprint(len(s.Runs)), fmt.Sprint(s.ToPay)
		if s.AtMost > 0 {
			runs, pay = fmt.Sprintf("≤ %d", s.AtMost), fmt.Sprintf("≤ %d", s.AtMost)
		}
		hours, money := estimateCells(s.Estimate, s.AtMost > 0)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Stage, strings.Join(s.Verbs, ", "), runs, s.Reused, s.FailedBefore,
			pay, hours, money, s.Estimate.Basis)
	}
	pay := fmt.Sprint(pl.ToPay)
	if pl.AtMost {
		pay = "≤ " + pay
	}
	hours, money := estimateCells(pl.Estimate, pl.AtMost)
	fmt.Fprintf(tw, "total\t\t\t\t\t%s\t%s\t%s\t%s\n", pay, hours, money, pl.Estimate.Basis)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range pl.Stages {
		printStageRuns(w, s)
	}
	fmt.Fprintf(w, "\nestimate: device-hours = each run to pay × the mean device-seconds of the stored feasible runs of its task "+
		"(any training.version; else of every task; else at most training.timeout × training.slots, %s per run; else none until "+
		"a run is measured: run `reference`, then plan again); money = device-hours × price_per_device_hour (%g).\n",
		cfg.Training.Timeout, cfg.PricePerDeviceHour)
	return nil
}

// printStageRuns prints a stage's note and the runs it would pay, at
// most 12 (-json lists them all).
func printStageRuns(w io.Writer, s yamlenv.StagePlan) {
	const most = 12
	if s.Note != "" {
		fmt.Fprintf(w, "\n%s: %s\n", s.Stage, s.Note)
	}
	var pay []yamlenv.PlannedRun
	for _, r := range s.Runs {
		if r.Status == yamlenv.ToPay {
			pay = append(pay, r)
		}
	}
	if len(pay) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s, to pay:\n", s.Stage)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range pay[:min(most, len(pay))] {
		fmt.Fprintf(tw, "  %s\t%s\tseed %d\n", r.Task, r.Change, r.Seed)
	}
	tw.Flush()
	if len(pay) > most {
		fmt.Fprintf(w, "  … and %d more (plan -json lists them all)\n", len(pay)-most)
	}
}

// estimateCells formats an estimate's device-hours and money: "–" when
// there is none, "≤" before a bound (bounded: the runs are a bound, or
// the estimate is).
func estimateCells(e yamlenv.Estimate, bounded bool) (string, string) {
	if !e.Known() {
		return "–", "–"
	}
	le := ""
	if bounded || e.Basis == yamlenv.TimeoutBound {
		le = "≤ "
	}
	return le + fmt.Sprintf("%.3g", e.DeviceHours), le + fmt.Sprintf("%.3g", e.Money)
}
