package yamlenv

import (
	"context"
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/records"
)

// RunStatus is what a stage does with a run it needs (Planner).
type RunStatus string

const (
	// ToPay: the store holds no outcome of the run: the stage runs it and
	// pays for it.
	ToPay RunStatus = "to pay"
	// Reused: the store holds its outcome (or the stage asks for the same
	// run twice): served from the store, not paid again.
	Reused RunStatus = "reused"
	// FailedBefore: the store holds its failure and no outcome: answered
	// from the store (ErrFailedBefore), not paid until it is forgotten;
	// the stage ends short of it.
	FailedBefore RunStatus = "failed before"
	// NotBuilt: the builder refuses the proposal (outside the catalogue's
	// cards): an infeasible record, never run.
	NotBuilt RunStatus = "infeasible at build"
)

// PlannedRun is one run a stage needs.
type PlannedRun struct {
	Task   string    `json:"task"`
	Change string    `json:"change"` // the proposal's key
	Seed   uint64    `json:"seed"`
	Status RunStatus `json:"status"`
}

// StagePlan is what one stage would run and pay, and an estimate of what
// it would cost.
type StagePlan struct {
	Stage string   `json:"stage"`
	Verbs []string `json:"verbs"` // the verbs that run the stage
	// Runs are the runs the stage needs, when they are known before it
	// runs.
	Runs []PlannedRun `json:"runs,omitempty"`
	// AtMost, when set, is a bound on runs known only as the stage runs
	// (the service's calibration picks, a server proposer's answers): at
	// most that many, each counted as to pay. Runs is then empty.
	AtMost       int      `json:"at_most,omitempty"`
	ToPay        int      `json:"to_pay"`
	Reused       int      `json:"reused"`
	FailedBefore int      `json:"failed_before"`
	NotBuilt     int      `json:"infeasible_at_build"`
	Estimate     Estimate `json:"estimate"`
	Note         string   `json:"note,omitempty"`
}

// count adds r to the stage.
func (s *StagePlan) count(r PlannedRun) {
	s.Runs = append(s.Runs, r)
	switch r.Status {
	case ToPay:
		s.ToPay++
	case Reused:
		s.Reused++
	case FailedBefore:
		s.FailedBefore++
	case NotBuilt:
		s.NotBuilt++
	}
}

// Basis says what an Estimate is made from, from the best to the worst.
type Basis string

const (
	// Nothing: there is nothing to pay.
	Nothing Basis = "nothing to pay"
	// Measured: each run is estimated by the mean device-seconds of the
	// store's feasible runs of its own task (of every version).
	Measured Basis = "measured on the same tasks"
	// MeasuredElsewhere: some run's task has no measured run; it is
	// estimated by the mean over every task's measured runs.
	MeasuredElsewhere Basis = "measured on other tasks"
	// TimeoutBound: nothing is measured yet; an upper bound of
	// training.timeout × training.slots device-seconds per run (and
	// attempt: a retried run pays again).
	TimeoutBound Basis = "at most training.timeout per run"
	// Unknown: nothing is measured yet and there is no training.timeout:
	// no estimate.
	Unknown Basis = "no run measured yet"
)

// weaker reports whether a is a weaker basis than b.
func (a Basis) weaker(b Basis) bool {
	rank := map[Basis]int{Nothing: 0, Measured: 1, MeasuredElsewhere: 2, TimeoutBound: 3, Unknown: 4}
	return rank[a] > rank[b]
}

// Estimate is the device-hours and money of the runs a stage pays, and
// what they are estimated from. With Basis Unknown the figures are 0 and
// mean nothing.
type Estimate struct {
	DeviceHours float64 `json:"device_hours"`
	Money       float64 `json:"money"` // device-hours × price_per_device_hour
	Basis       Basis   `json:"basis"`
}

// Known reports whether the estimate has figures.
func (e Estimate) Known() bool { return e.Basis != Unknown }

// Durations are the measured device-seconds of the feasible runs (real
// and reference) a store holds, by task: what a plan's estimates come
// from. The zero value has no measurement.
type Durations struct {
	sum map[string]float64
	n   map[string]int
	// Bound is the device-seconds one run can take at most
	// (training.timeout × training.slots); 0: none.
	Bound float64
}

// NewDurations measures rs: every feasible real or reference record that
// reports its device-seconds counts for its task. bound is the most
// device-seconds a run can take (0: no bound).
func NewDurations(rs []records.Record, bound float64) Durations {
	d := Durations{sum: map[string]float64{}, n: map[string]int{}, Bound: bound}
	for _, r := range rs {
		if (r.Source == records.Real || r.Source == records.Reference) && r.Infeasible == "" && r.Cost.DeviceSeconds > 0 {
			d.sum[r.Task.ID] += r.Cost.DeviceSeconds
			d.n[r.Task.ID]++
		}
	}
	return d
}

// PerRun estimates the device-seconds of one run on one of tasks (any of
// them alike): the mean over the measured runs of those tasks (Measured),
// else over every measured run (MeasuredElsewhere), else Bound
// (TimeoutBound), else nothing (Unknown).
func (d Durations) PerRun(tasks ...string) (float64, Basis) {
	sum, n := 0.0, 0
	for _, t := range tasks {
		sum, n = sum+d.sum[t], n+d.n[t]
	}
	if n > 0 {
		return sum / float64(n), Measured
	}
	for t := range d.n {
		sum, n = sum+d.sum[t], n+d.n[t]
	}
	switch {
	case n > 0:
		return sum / float64(n), MeasuredElsewhere
	case d.Bound > 0:
		return d.Bound, TimeoutBound
	}
	return 0, Unknown
}

// Add returns the sum of e and f, on the weaker basis of the two.
func (e Estimate) Add(f Estimate) Estimate {
	b := e.Basis
	if f.Basis.weaker(b) {
		b = f.Basis
	}
	if b == Unknown {
		return Estimate{Basis: Unknown}
	}
	return Estimate{DeviceHours: e.DeviceHours + f.DeviceHours, Money: e.Money + f.Money, Basis: b}
}

// estimate adds n runs on one of tasks to e, priced at price per
// device-hour.
func (d Durations) estimate(e Estimate, price float64, n int, tasks ...string) Estimate {
	if n == 0 {
		return e
	}
	s, b := d.PerRun(tasks...)
	h := float64(n) * s / 3600
	return e.Add(Estimate{DeviceHours: h, Money: h * price, Basis: b})
}

// Planner says what each stage would run and pay and what it would cost,
// from the config and the store alone: it runs nothing, and reads the
// store through the training code's version as the stages do.
type Planner struct {
	cfg   envconfig.Config
	view  records.Store
	b     *envBuilder
	cards []records.Card
	dur   Durations
}

// NewPlanner returns the planner of cfg over store (which may be opened
// read-only); its estimates come from the durations of every run store
// holds (NewDurations), bounded by training.timeout.
func NewPlanner(ctx context.Context, cfg envconfig.Config, store records.Store) (*Planner, error) {
	cards, err := cfg.Cards()
	if err != nil {
		return nil, err
	}
	all, err := store.Scan(ctx, records.Filter{})
	if err != nil {
		return nil, err
	}
	bound := cfg.Training.Timeout.Seconds() * float64(cfg.Training.Slots)
	return &Planner{cfg: cfg, view: View(store, cfg.Training.Version), b: newBuilder(cfg, cards), cards: cards,
		dur: NewDurations(all, bound)}, nil
}

// Durations returns what the planner's estimates come from.
func (p *Planner) Durations() Durations { return p.dur }

// References plans the reference stage: every task's reference runs by
// seed, as ReferenceRuns asks for them. It returns the tasks that will
// have b_e and σ_e, in the file's order: those with their reference runs
// stored (b_e and σ_e measured) and those with runs to pay, assumed to
// succeed (b_e 0 and σ_e reference.min_seed_noise stand in: they fix
// which tasks M_0 draws over, not what is drawn); a task left out by a
// stored infeasible or failed run is not among them.
func (p *Planner) References(ctx context.Context) (StagePlan, []records.Task, error) {
	out, stored, err := scanReferences(ctx, p.cfg, p.view)
	if err != nil {
		return StagePlan{}, nil, err
	}
	aggregate(p.cfg, out, stored)
	sp := StagePlan{Stage: "reference", Verbs: []string{"reference", "m0", "serve", "evaluate"}, Estimate: Estimate{Basis: Nothing}}
	var ready []records.Task
	for i, r := range out {
		pending := 0
		for _, s := range r.Seeds {
			st := refStatus(stored[i], s)
			pending += btoi(st == ToPay)
			sp.count(PlannedRun{Task: r.Task.ID, Change: records.Proposal{Mechanism: records.NoChange}.Key(), Seed: s, Status: st})
		}
		sp.Estimate = p.dur.estimate(sp.Estimate, p.cfg.PricePerDeviceHour, pending, r.Task.ID)
		switch {
		case r.LeftOut == "":
			ready = append(ready, r.Task)
		case pending > 0 && r.Failed == 0 && !infeasibleRef(stored[i]):
			t := r.Task
			t.RefLoss, t.SeedNoise = 0, p.cfg.Reference.MinSeedNoise
			ready = append(ready, t)
		}
	}
	sp.Estimate = settle(sp.Estimate, sp.ToPay)
	if sp.FailedBefore > 0 {
		sp.Note = fmt.Sprintf("%d runs failed before: the stage ends short (exit 1), so no later stage runs, until they are forgotten "+
			"(forget -failed) and paid again", sp.FailedBefore)
	}
	return sp, ready, nil
}

// refStatus is what the reference stage does with the run of seed given
// the task's stored reference runs by seed (scanReferences).
func refStatus(stored map[uint64]records.Record, seed uint64) RunStatus {
	r, ok := stored[seed]
	switch {
	case !ok:
		return ToPay
	case r.Source == records.Failed:
		return FailedBefore
	}
	return Reused
}

// infeasibleRef reports whether a stored reference run is infeasible.
func infeasibleRef(stored map[uint64]records.Record) bool {
	for _, r := range stored {
		if r.Source == records.Reference && r.Infeasible != "" {
			return true
		}
	}
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// settle marks an estimate with nothing to pay.
func settle(e Estimate, toPay int) Estimate {
	if toPay == 0 {
		return Estimate{Basis: Nothing}
	}
	return e
}

// M0 plans M_0 over the training tasks of tasks (References' tasks): its
// draw (environment.DrawM0 with m0.seed and m0.size), each built as the
// stage builds it.
func (p *Planner) M0(ctx context.Context, tasks []records.Task) (StagePlan, error) {
	train, _ := environment.Split(tasks)
	var changes []records.TaskChange
	if len(train) > 0 {
		for _, d := range environment.DrawM0(p.cfg.M0.Seed, train, p.cards, p.cfg.M0.Size) {
			changes = append(changes, records.TaskChange{Task: d.Task, Proposal: d.Proposal})
		}
	}
	sp, err := p.Changes(ctx, "M_0", []string{"m0", "serve"}, changes)
	if err == nil && len(train) == 0 {
		sp.Note = "no training task will have a reference: M_0 cannot be drawn"
	}
	return sp, err
}

// Changes plans the runs of changes, built as the stages build them (the
// task's first reference seed) and looked up in the store as the
// executor looks them up: a stored failure first (the recorder), then a
// stored outcome (builder.Reuses); a run asked for twice is paid once.
func (p *Planner) Changes(ctx context.Context, stage string, verbs []string, changes []records.TaskChange) (StagePlan, error) {
	sp := StagePlan{Stage: stage, Verbs: verbs, Estimate: Estimate{Basis: Nothing}}
	seen := map[string]bool{}
	for _, c := range changes {
		j, err := p.b.Build(ctx, c.Task, c.Proposal)
		if err != nil {
			if !errors.Is(err, builder.ErrInfeasible) {
				return StagePlan{}, err
			}
			sp.count(PlannedRun{Task: c.Task.ID, Change: c.Proposal.Key(), Status: NotBuilt})
			continue
		}
		st, err := p.status(ctx, j)
		if err != nil {
			return StagePlan{}, err
		}
		id := fmt.Sprintf("%s\x00%s\x00%d", j.Task.ID, j.Proposal.Key(), j.Seed)
		if st == ToPay && seen[id] {
			st = Reused
		}
		seen[id] = true
		sp.count(PlannedRun{Task: j.Task.ID, Change: j.Proposal.Key(), Seed: j.Seed, Status: st})
		if st == ToPay {
			sp.Estimate = p.dur.estimate(sp.Estimate, p.cfg.PricePerDeviceHour, 1, j.Task.ID)
		}
	}
	sp.Estimate = settle(sp.Estimate, sp.ToPay)
	return sp, nil
}

// status is what the executor does with j given the store.
func (p *Planner) status(ctx context.Context, j builder.Job) (RunStatus, error) {
	rs, err := p.view.Scan(ctx, records.Filter{TaskID: j.Task.ID, Key: j.Proposal.Key()})
	if err != nil {
		return "", err
	}
	if _, failed := storedFailure(rs, j.Seed); failed {
		return FailedBefore, nil
	}
	for _, r := range rs {
		if builder.Reuses(r, j.Seed) {
			return Reused, nil
		}
	}
	return ToPay, nil
}

// AtMost plans a stage whose runs are known only as it runs: at most n
// runs, each on one of tasks, each counted as to pay.
func (p *Planner) AtMost(stage string, verbs []string, n int, note string, tasks ...string) StagePlan {
	sp := StagePlan{Stage: stage, Verbs: verbs, AtMost: n, ToPay: n, Note: note}
	sp.Estimate = settle(p.dur.estimate(Estimate{Basis: Nothing}, p.cfg.PricePerDeviceHour, n, tasks...), n)
	return sp
}

// Calibration plans the service's calibrations over train (References'
// training tasks): at most the sum of calibration.budgets runs, picked by
// the service from the proposals it scored, so known only as it runs.
func (p *Planner) Calibration(train []records.Task) StagePlan {
	n := 0
	for _, b := range p.cfg.Calibration.Budgets {
		n += b
	}
	ids := make([]string, len(train))
	for i, t := range train {
		ids[i] = t.ID
	}
	return p.AtMost("calibration", []string{"serve"}, n, "at most the sum of calibration.budgets: at each calibration step the "+
		"trainer reaches, the service picks up to that step's budget of the proposals it scored; which ones, and so whether the "+
		"store holds them, is known only then", ids...)
}
