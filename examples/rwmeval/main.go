// Command rwmeval measures the embedded world model (rwm.Embedded) on real
// records of the lab (METHOD.md §1 Research World Model):
//
//  1. It executes random catalogue proposals on the lab's training tasks
//     (mechanism-library sampling, METHOD.md §1 Data and evaluation) and keeps
//     every real record in a durable records.FileStore under -out, so a
//     second run reuses them instead of training again.
//  2. Accuracy as the context grows: with the first n records in context
//     (n = 0, 25, 50, 100, 200, 300), it predicts a fixed held-out set of
//     real records and reports Spearman's ρ and the within-task pairwise
//     ranking accuracy of predicted against real gains (in σ_e units), the
//     q10–q90 coverage (0.80 when calibrated), the mean absolute error and
//     the bias — with the catalogue's priors and without them.
//  3. Exploitation of a static context (METHOD.md §1 On-policy calibration):
//     with the first 100 records in context it scores a pool of candidate
//     proposals, executes the top-rated ones, reports predicted against real
//     gain, adds those records to the context and reports how the ranking
//     changes, for -rounds rounds.
//
// With -landscape STORE it runs nothing and instead measures how well world
// models rank the proposals of one task (METHOD.md §1 Research World Model)
// on a landscape store written by examples/sweep -landscape -store STORE:
// every catalogue proposal on every task of a part of the lab's suite, on
// two seeds. For each of -reps random contexts of n (task, proposal) cells
// (-sizes, default 50,100,200; one seed's record each) it predicts every
// other cell and scores, per task, the pairwise ranking accuracy against
// the other seed's gains (pairs ≥ 1 σ_e apart) and the other seed's mean
// gain of the model's top 4 (Avg@4, METHOD.md §1 Data and evaluation),
// beside two baselines: the mean gain and an oracle ranking by the context
// seed's measurement. The models are catalogue, descriptors, descriptors
// tuned, effects and effects tuned (see landscapeModels; -models picks
// others, kernel ablations among them). The Markdown table goes to stdout
// and -out/landscape-report.md.
//
// With -prior FILE (examples/priorcorpus), the models fx-prior,
// fx-tuned-prior, prior-mean and fx-prior-clip rank with the pretrained
// prior.
//
// With -context-landscape STORE2 as well, the tasks of STORE are ranked as
// unseen ones (transfer.go): each context is n cells of STORE2's tasks
// (-context-part keeps a part's) plus -history cells of the ranked task
// itself, as M₀ and a state's history are; -oracle-noise adds noisy
// oracles that chart what a given pairwise accuracy is worth. The table
// goes to -out/transfer-report.md.
//
// Usage:
//
//	go run ./examples/rwmeval [-records 360] [-test 60] [-top 8] [-rounds 2] [-parallel 2] [-out out/rwmeval]
//	go run ./examples/rwmeval -landscape out/landscape.records [-part val] [-sizes 50,100,200] [-reps 6] [-seed 1] [-models fx-tuned,fx-G0] [-out out/rwmeval]
//	go run ./examples/rwmeval -landscape out/valland.records -context-landscape out/trainland.records -context-part train [-history 4] [-oracle-noise 2,4,6] [-sizes 200] [-models fx-tuned]
//
// The runs dominate the time: each trains a tiny model for about a second
// on one core. The -landscape mode trains nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

type options struct {
	out      string
	records  int
	test     int
	sizes    []int
	top      int
	rounds   int
	pool     int
	parallel int
	seed     uint64
	suite    string
}

func main() {
	var o options
	var sizes, landscape, part string
	var reps, hist int
	var contextStore, contextPart, models, noise, prior string
	var priorPerFamily int
	flag.StringVar(&o.out, "out", "out/rwmeval", "directory of the record stores and the report")
	flag.StringVar(&o.suite, "suite", "v2", "lab task suite whose training tasks are used: v2 (lab.SuiteV2) or v1 (the first lab's tasks)")
	flag.IntVar(&o.records, "records", 360, "real records to generate on training tasks (context + held-out test)")
	flag.IntVar(&o.test, "test", 60, "of which held out for testing (the last ones generated)")
	flag.StringVar(&sizes, "sizes", "0,25,50,100,200,300", "context sizes of the accuracy curve; with -landscape, in cells (default there 50,100,200)")
	flag.IntVar(&o.top, "top", 8, "top-rated proposals executed per exploitation round")
	flag.IntVar(&o.rounds, "rounds", 2, "exploitation rounds")
	flag.IntVar(&o.pool, "pool", 40, "candidate proposals per training task in the exploitation pool")
	flag.IntVar(&o.parallel, "parallel", 2, "runs at a time")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the proposal sampler; with -landscape, of the context draws")
	flag.StringVar(&landscape, "landscape", "", "landscape records store to rank the world models on, instead of running anything")
	flag.StringVar(&part, "part", "", "-landscape: keep the tasks of this part of the V2 suite (val, val-out, train, test-in, test-out); empty = every task of the store")
	flag.IntVar(&reps, "reps", 6, "-landscape: random contexts per context size")
	flag.StringVar(&contextStore, "context-landscape", "", "-landscape: rank the store's tasks as unseen tasks, on contexts of this second landscape store's cells (of other tasks)")
	flag.StringVar(&contextPart, "context-part", "", "-context-landscape: keep the tasks of this part of the V2 suite; empty = every task of that store")
	flag.IntVar(&hist, "history", 0, "-context-landscape: cells of each ranked task's own in its context (its history)")
	flag.StringVar(&noise, "oracle-noise", "", "-context-landscape: comma-separated noise levels s (σ_e) of noisy oracles ranked beside the models")
	flag.StringVar(&models, "models", "", "-landscape: comma-separated world models to rank (catalogue, desc, desc-tuned, fx, fx-tuned, and fx-tuned's kernel ablations fx-S0 … fx-dl8, fx-np, fx-tuned-q90, fx-tuned-q10, and proposal-mean); empty = the first five")
	flag.StringVar(&prior, "prior", "", "-landscape: a pretrained prior file (examples/priorcorpus, e.g. lab/prior/v2.prior) for the models fx-prior, fx-tuned-prior, prior-mean and fx-prior-clip")
	flag.IntVar(&priorPerFamily, "prior-per-family", 24, "-prior: the pretraining corpus's tasks per family the prior was fitted over (examples/priorcorpus -per-family)")
	flag.Parse()
	if landscape != "" && !flagSet("sizes") {
		sizes = "50,100,200"
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			log.Fatalf("rwmeval: bad -sizes entry %q", s)
		}
		o.sizes = append(o.sizes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if landscape != "" {
		rc := defaultRankConfig()
		rc.sizes, rc.reps, rc.seed = o.sizes, reps, o.seed
		lo := landscapeOptions{store: landscape, part: part, out: o.out, rank: rc, context: contextStore, contextPart: contextPart, hist: hist,
			prior: prior, priorPerFamily: priorPerFamily}
		for _, m := range strings.Split(models, ",") {
			if m = strings.TrimSpace(m); m != "" {
				lo.models = append(lo.models, m)
			}
		}
		for _, f := range strings.Split(noise, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			s, err := strconv.ParseFloat(f, 64)
			if err != nil {
				log.Fatalf("rwmeval: bad -oracle-noise entry %q", f)
			}
			lo.noise = append(lo.noise, s)
		}
		if err := runLandscape(ctx, lo, os.Stdout); err != nil {
			log.Fatalf("rwmeval: %v", err)
		}
		return
	}
	if o.test < 2 || o.records <= o.test {
		log.Fatalf("rwmeval: need -records > -test ≥ 2")
	}
	if err := run(ctx, o, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// flagSet reports whether the named flag was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// evaluation is one invocation's state, shared by the steps of run.
type evaluation struct {
	o     options
	w     io.Writer
	start time.Time
	lab   *lab.Lab
	ex    *executor
	cat   []records.Card
	tasks []records.Task
	plan  []item           // the generated experiments
	train []records.Record // context records (the first generated)
	test  []records.Record // held-out records (the last generated)
}

// run measures the world model, step by step.
func run(ctx context.Context, o options, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	var files []io.Closer
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	refs, err := records.OpenFile(filepath.Join(o.out, "references.jsonl"), records.DefaultFileConfig())
	if err != nil {
		return err
	}
	files = append(files, refs)
	store, err := records.OpenFile(filepath.Join(o.out, "records.jsonl"), records.DefaultFileConfig())
	if err != nil {
		return err
	}
	files = append(files, store)
	report, err := os.Create(filepath.Join(o.out, "report.txt"))
	if err != nil {
		return err
	}
	files = append(files, report)
	e := &evaluation{o: o, w: io.MultiWriter(stdout, report), cat: lab.Catalogue()}
	for _, step := range []func(context.Context) error{
		func(ctx context.Context) error { return e.references(ctx, refs, store) },
		e.generate,
		e.accuracy,
		e.exploitation,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.w, "\nrwmeval: done in %s (%d runs executed in this invocation)\n", time.Since(e.start).Round(time.Second), e.ex.executed)
	return nil
}

// references makes the lab and runs the training tasks' reference runs.
func (e *evaluation) references(ctx context.Context, refs, store *records.FileStore) error {
	cfg := lab.DefaultConfig()
	switch e.o.suite {
	case "v2", "":
		cfg.Tasks = lab.SuiteV2(lab.DefaultSuiteSeed).Train
	case "v1":
		cfg.Tasks = lab.SuiteV1()
	default:
		return fmt.Errorf("unknown -suite %q (v2 or v1)", e.o.suite)
	}
	lb, err := lab.New(cfg, refs)
	if err != nil {
		return err
	}
	e.lab, e.ex = lb, &executor{lab: lb, store: store, parallel: e.o.parallel}
	e.start = time.Now()
	tasks, out, err := lb.Ready(ctx, lb.IDs(records.Train), nil)
	if err != nil {
		return fmt.Errorf("reference runs: %w", err)
	}
	for _, x := range out {
		fmt.Fprintf(e.w, "rwmeval: task %s left out: %v\n", x.ID, x.Err)
	}
	e.tasks = tasks
	fmt.Fprintf(e.w, "rwmeval: %d training tasks, references ready in %s\n", len(e.tasks), time.Since(e.start).Round(time.Second))
	return nil
}

// generate executes random catalogue proposals (part 1).
func (e *evaluation) generate(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(e.o.seed, 0x5eed))
	e.plan = records.DrawChanges(rng, e.tasks, e.cat, e.o.records, nil)
	t0 := time.Now()
	rs, err := e.ex.records(ctx, e.plan)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.w, "rwmeval: %d real records (%d executed now, %d from %s) in %s; %d infeasible\n",
		len(rs), e.ex.executed, len(rs)-e.ex.executed, filepath.Join(e.o.out, "records.jsonl"),
		time.Since(t0).Round(time.Second), countInfeasible(rs))
	e.train, e.test = rs[:len(rs)-e.o.test], rs[len(rs)-e.o.test:]
	return nil
}

// accuracy reports the accuracy as the context grows (part 2).
func (e *evaluation) accuracy(ctx context.Context) error {
	w := e.w
	fmt.Fprintf(w, "\n## Accuracy on %d held-out real records (%d feasible) as the context grows\n", len(e.test), len(e.test)-countInfeasible(e.test))
	fmt.Fprintln(w, "gains in σ_e units; pairwise = within-task pairwise ranking accuracy; coverage = share of real gains inside q10–q90 (target 0.80)")
	for _, v := range []struct {
		name         string
		priors, tune bool
	}{
		{"default config, priors from the cards", true, false},
		{"default config, no priors", false, false},
		{"priors, hyperparameters tuned by marginal likelihood on the context (rwm.Tune)", true, true},
	} {
		fmt.Fprintf(w, "\n%s\n", v.name)
		fmt.Fprintf(w, "%8s %9s %9s %9s %9s %9s\n", "context", "spearman", "pairwise", "coverage", "MAE", "bias")
		for _, n := range e.o.sizes {
			if err := e.accuracyAt(ctx, n, v.priors, v.tune); err != nil {
				return err
			}
		}
	}
	return nil
}

// accuracyAt prints one row of the accuracy curve: n context records.
func (e *evaluation) accuracyAt(ctx context.Context, n int, priors, tune bool) error {
	if n > len(e.train) {
		fmt.Fprintf(e.w, "%8d (only %d context records; rerun with a larger -records)\n", n, len(e.train))
		return nil
	}
	ev, err := records.NewEvidence(e.train[:n]...)
	if err != nil {
		return err
	}
	cfg := modelConfig(e.cat, priors)
	tuned := ""
	if tune {
		if cfg, _, err = rwm.Tune(ctx, cfg, ev, nil); err != nil {
			return err
		}
		tuned = fmt.Sprintf("   noise %.2g, task corr %.2g/%.2g/%.2g, mech corr %.2g, lengthscale %.2g",
			cfg.NoiseSigmas, cfg.CorrFamily, cfg.CorrMetric, cfg.CorrAny, cfg.CorrMech, cfg.Lengthscale)
	}
	m, err := rwm.NewEmbedded(cfg)
	if err != nil {
		return err
	}
	s, err := score(ctx, m, ev, e.test)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.w, "%8d %9.3f %9.3f %9.3f %9.2f %+9.2f%s\n", n, s.spearman, s.pairwise, s.coverage, s.mae, s.bias, tuned)
	return nil
}

// exploit is the state of the exploitation rounds (part 3).
type exploit struct {
	pool       []item
	ctxRecs    []records.Record
	executed   map[int]bool // pool items already in context are not picked again
	prevScores []float64
	prevTop    []int
	m          *rwm.Embedded
}

// exploitation checks whether a static context gets exploited (part 3):
// rounds of executing the top-rated pool proposals, then the last round's
// effect on the ranking.
func (e *evaluation) exploitation(ctx context.Context) error {
	n0 := min(100, len(e.train))
	fmt.Fprintf(e.w, "\n## Exploitation of a static context (%d records), %d rounds of the top %d\n", n0, e.o.rounds, e.o.top)
	fmt.Fprintln(e.w, "model: priors from the cards, hyperparameters tuned (rwm.Tune) on the context at the start of each round")
	seen := map[string]bool{}
	for _, it := range e.plan {
		seen[it.Key()] = true
	}
	prng := rand.New(rand.NewPCG(e.o.seed, 0x9001))
	x := &exploit{pool: records.DrawChanges(prng, e.tasks, e.cat, e.o.pool*len(e.tasks), seen),
		ctxRecs: slices.Clone(e.train[:n0]), executed: map[int]bool{}}
	for round := 1; round <= e.o.rounds; round++ {
		if err := e.round(ctx, x, round); err != nil {
			return err
		}
	}
	if e.o.rounds < 1 {
		return nil
	}
	// The last round's effect on the ranking (same tuned model, more records).
	scores, _, err := x.scores(ctx)
	if err != nil {
		return err
	}
	top := argsortDesc(scores)[:min(e.o.top, len(x.pool))]
	fmt.Fprintf(e.w, "\nafter adding the last round's records: Spearman of pool scores vs before %.3f; %d of the previous top %d stay; previous top now predicted %+.2f σ_e (was %+.2f)\n",
		spearman(x.prevScores, scores), overlap(top, x.prevTop), len(x.prevTop), meanAt(scores, x.prevTop), meanAt(x.prevScores, x.prevTop))
	return nil
}

// scores predicts the pool with x.m under the current context, in σ_e
// units (−∞ for invalid predictions).
func (x *exploit) scores(ctx context.Context) ([]float64, []rwm.Prediction, error) {
	ev, err := records.NewEvidence(x.ctxRecs...)
	if err != nil {
		return nil, nil, err
	}
	preds, err := predictAll(ctx, x.m, ev, x.pool)
	if err != nil {
		return nil, nil, err
	}
	scores := make([]float64, len(x.pool))
	for i, p := range preds {
		scores[i] = p.Gain / x.pool[i].Task.SeedNoise
		if !p.Valid {
			scores[i] = math.Inf(-1)
		}
	}
	return scores, preds, nil
}

// overlap counts the elements of a that are in b.
func overlap(a, b []int) int {
	n := 0
	for _, i := range a {
		if slices.Contains(b, i) {
			n++
		}
	}
	return n
}

// round retunes the model on the context, executes the top-rated
// candidates not yet executed and adds their records to the context.
func (e *evaluation) round(ctx context.Context, x *exploit, round int) error {
	ev, err := records.NewEvidence(x.ctxRecs...)
	if err != nil {
		return err
	}
	// Retune at each calibration point, then keep the model frozen.
	cfg, _, err := rwm.Tune(ctx, modelConfig(e.cat, true), ev, nil)
	if err != nil {
		return err
	}
	if x.m, err = rwm.NewEmbedded(cfg); err != nil {
		return err
	}
	scores, preds, err := x.scores(ctx)
	if err != nil {
		return err
	}
	var order []int
	for _, i := range argsortDesc(scores) {
		if !x.executed[i] {
			order = append(order, i)
		}
	}
	top := order[:min(e.o.top, len(order))]
	if x.prevScores != nil {
		fmt.Fprintf(e.w, "\nafter adding the previous round's %d records: Spearman of pool scores vs before %.3f; %d of the previous top %d stay in the top %d\n",
			len(x.prevTop), spearman(x.prevScores, scores), overlap(top, x.prevTop), len(x.prevTop), len(top))
		fmt.Fprintf(e.w, "previous top %d now predicted: mean %+.2f σ_e (was %+.2f)\n",
			len(x.prevTop), meanAt(scores, x.prevTop), meanAt(x.prevScores, x.prevTop))
	}
	var items []item
	for _, i := range top {
		items = append(items, x.pool[i])
		x.executed[i] = true
	}
	got, err := e.ex.records(ctx, items)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.w, "\nround %d: top %d of %d candidates with %d records in context\n", round, len(top), len(x.pool), len(x.ctxRecs))
	e.printRound(x, top, preds, got)
	x.ctxRecs = append(x.ctxRecs, got...)
	x.prevScores, x.prevTop = scores, top
	return nil
}

// printRound prints a round's predicted against real gains.
func (e *evaluation) printRound(x *exploit, top []int, preds []rwm.Prediction, got []records.Record) {
	w := e.w
	fmt.Fprintf(w, "%-34s %-44s %8s %17s %8s\n", "task", "proposal", "pred σ", "q10…q90 σ", "real σ")
	var predSum, realSum float64
	nReal := 0
	for k, i := range top {
		p, r := preds[i], got[k]
		s := x.pool[i].Task.SeedNoise
		real := "infeas."
		if r.Infeasible == "" {
			real = fmt.Sprintf("%+8.2f", r.Gain/s)
			predSum += p.Gain / s
			realSum += r.Gain / s
			nReal++
		}
		fmt.Fprintf(w, "%-34s %-44s %+8.2f %+8.2f…%+7.2f %8s\n", trunc(x.pool[i].Task.ID, 34), trunc(x.pool[i].Proposal.Key(), 44),
			p.Gain/s, p.Low/s, p.High/s, real)
	}
	if nReal > 0 {
		fmt.Fprintf(w, "mean over %d feasible: predicted %+.2f σ_e, real %+.2f σ_e, over-prediction %+.2f σ_e\n",
			nReal, predSum/float64(nReal), realSum/float64(nReal), (predSum-realSum)/float64(nReal))
	}
}

func modelConfig(cat []records.Card, priors bool) rwm.EmbeddedConfig {
	cfg := rwm.DefaultEmbeddedConfig()
	cfg.Cards = cat
	if priors {
		cfg.Priors = rwm.PriorsFromCards(cat)
	}
	return cfg
}

// item is one planned experiment.
type item = records.TaskChange

func itemKey(t records.Task, p records.Proposal) string { return item{Task: t, Proposal: p}.Key() }

// executor runs planned items on the lab, reusing the records already in
// the store.
type executor struct {
	lab      *lab.Lab
	store    *records.FileStore
	parallel int

	mu       sync.Mutex
	executed int
}

// records returns one real record per item, in order, executing the items
// the store does not hold yet.
func (x *executor) records(ctx context.Context, items []item) ([]records.Record, error) {
	have, err := x.store.Scan(ctx, records.Filter{Source: records.Real})
	if err != nil {
		return nil, err
	}
	byKey := map[string]records.Record{}
	for _, r := range have {
		byKey[itemKey(r.Task, r.Proposal)] = r
	}
	out := make([]records.Record, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, x.parallel))
	done := 0
	for i, it := range items {
		if r, ok := byKey[itemKey(it.Task, it.Proposal)]; ok {
			out[i] = r
			continue
		}
		g.Go(func() error {
			r, err := x.run(gctx, it)
			if err != nil {
				return err
			}
			if err := x.store.Append(gctx, r); err != nil {
				return err
			}
			out[i] = r
			x.mu.Lock()
			x.executed++
			done++
			if done%25 == 0 {
				log.Printf("rwmeval: %d runs done", done)
			}
			x.mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// run builds and executes one item; an infeasible proposal is a real
// record with Infeasible set. A transient failure is retried twice.
func (x *executor) run(ctx context.Context, it item) (records.Record, error) {
	job, err := x.lab.Build(ctx, it.Task, it.Proposal)
	if errors.Is(err, builder.ErrInfeasible) {
		return records.Record{Task: it.Task, Proposal: it.Proposal, Source: records.Real, Infeasible: err.Error()}, nil
	}
	if err != nil {
		return records.Record{}, err
	}
	for attempt := 1; ; attempt++ {
		out, err := x.lab.Execute(ctx, job)
		switch {
		case err == nil || errors.Is(err, builder.ErrInfeasible):
			r := out.Record(job)
			if r.Infeasible == "" && err != nil {
				r.Infeasible = err.Error()
			}
			if r.Infeasible != "" {
				r.Gain, r.Loss = 0, 0
			}
			return r, nil
		case errors.Is(err, builder.ErrTransient) && attempt < 3:
			continue
		default:
			return records.Record{}, fmt.Errorf("run %s on %s: %w", it.Proposal.Key(), it.Task.ID, err)
		}
	}
}

func countInfeasible(rs []records.Record) int {
	n := 0
	for _, r := range rs {
		if r.Infeasible != "" {
			n++
		}
	}
	return n
}

func predictAll(ctx context.Context, m rwm.WorldModel, ev records.Evidence, items []item) ([]rwm.Prediction, error) {
	out := make([]rwm.Prediction, len(items))
	for i, it := range items {
		p, err := m.Predict(ctx, rwm.Query{Task: it.Task, Proposal: it.Proposal, Evidence: ev})
		if err != nil {
			return nil, err
		}
		out[i] = p
	}
	return out, nil
}

// scores are the accuracy figures of one context.
type scores struct {
	spearman, pairwise, coverage, mae, bias float64
}

// score predicts the feasible test records with ev in context.
func score(ctx context.Context, m rwm.WorldModel, ev records.Evidence, test []records.Record) (scores, error) {
	var pred, real []float64
	var taskOf []string
	var s scores
	for _, r := range test {
		if r.Infeasible != "" {
			continue
		}
		p, err := m.Predict(ctx, rwm.Query{Task: r.Task, Proposal: r.Proposal, Evidence: ev})
		if err != nil {
			return s, err
		}
		if !p.Valid {
			return s, fmt.Errorf("prediction for %s judged invalid: %s", r.Proposal.Key(), p.Reason)
		}
		sg := r.Task.SeedNoise
		pred = append(pred, p.Gain/sg)
		real = append(real, r.Gain/sg)
		taskOf = append(taskOf, r.Task.ID)
		if p.Low <= r.Gain && r.Gain <= p.High {
			s.coverage++
		}
		s.mae += math.Abs(p.Gain-r.Gain) / sg
		s.bias += (p.Gain - r.Gain) / sg
	}
	n := float64(len(pred))
	s.coverage /= n
	s.mae /= n
	s.bias /= n
	s.spearman = spearman(pred, real)
	s.pairwise = pairwise(pred, real, taskOf)
	return s, nil
}

// spearman is Spearman's rank correlation (stat.Spearman), 0 where a side
// is constant. −Inf entries rank lowest.
func spearman(a, b []float64) float64 {
	rho, _ := stat.Spearman(a, b)
	return rho
}

// pairwise is the share of same-group pairs with different real values
// whose predicted order matches the real order; tied predictions count ½.
func pairwise(pred, real []float64, group []string) float64 {
	var ok, n float64
	for i := range pred {
		for j := i + 1; j < len(pred); j++ {
			if group[i] != group[j] || real[i] == real[j] {
				continue
			}
			n++
			d := (pred[i] - pred[j]) * (real[i] - real[j])
			switch {
			case d > 0:
				ok++
			case d == 0:
				ok += 0.5
			}
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return ok / n
}

func argsortDesc(xs []float64) []int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return xs[idx[a]] > xs[idx[b]] })
	return idx
}

func meanAt(xs []float64, idx []int) float64 {
	var s float64
	for _, i := range idx {
		s += xs[i]
	}
	return s / float64(len(idx))
}

func trunc(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
