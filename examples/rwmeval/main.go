// Command rwmeval measures the embedded world model (rwm.Embedded) on real
// records of the lab (METHOD.md §1 Research World Model; issue "World
// models", Checked by):
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
// Usage:
//
//	go run ./examples/rwmeval [-records 360] [-test 60] [-top 8] [-rounds 2] [-parallel 2] [-out out/rwmeval]
//
// The runs dominate the time: each trains a tiny model for about a second
// on one core.
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
}

func main() {
	var o options
	var sizes string
	flag.StringVar(&o.out, "out", "out/rwmeval", "directory of the record stores and the report")
	flag.IntVar(&o.records, "records", 360, "real records to generate on training tasks (context + held-out test)")
	flag.IntVar(&o.test, "test", 60, "of which held out for testing (the last ones generated)")
	flag.StringVar(&sizes, "sizes", "0,25,50,100,200,300", "context sizes of the accuracy curve")
	flag.IntVar(&o.top, "top", 8, "top-rated proposals executed per exploitation round")
	flag.IntVar(&o.rounds, "rounds", 2, "exploitation rounds")
	flag.IntVar(&o.pool, "pool", 40, "candidate proposals per training task in the exploitation pool")
	flag.IntVar(&o.parallel, "parallel", 2, "runs at a time")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the proposal sampler")
	flag.Parse()
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			log.Fatalf("rwmeval: bad -sizes entry %q", s)
		}
		o.sizes = append(o.sizes, n)
	}
	if o.test < 2 || o.records <= o.test {
		log.Fatalf("rwmeval: need -records > -test ≥ 2")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, o options, stdout io.Writer) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	refs, err := records.OpenFile(filepath.Join(o.out, "references.jsonl"), records.DefaultFileConfig())
	if err != nil {
		return err
	}
	defer refs.Close()
	store, err := records.OpenFile(filepath.Join(o.out, "records.jsonl"), records.DefaultFileConfig())
	if err != nil {
		return err
	}
	defer store.Close()
	report, err := os.Create(filepath.Join(o.out, "report.txt"))
	if err != nil {
		return err
	}
	defer report.Close()
	w := io.MultiWriter(stdout, report)

	lb, err := lab.New(lab.DefaultConfig(), refs)
	if err != nil {
		return err
	}
	start := time.Now()
	var tasks []records.Task
	for _, id := range lb.IDs(records.Train) {
		t, err := lb.Task(ctx, id)
		if err != nil {
			return fmt.Errorf("reference runs of %s: %w", id, err)
		}
		tasks = append(tasks, t)
	}
	fmt.Fprintf(w, "rwmeval: %d training tasks, references ready in %s\n", len(tasks), time.Since(start).Round(time.Second))

	cat := lab.Catalogue()
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	plan := records.DrawChanges(rng, tasks, cat, o.records, nil)
	ex := &executor{lab: lb, store: store, parallel: o.parallel}
	t0 := time.Now()
	rs, err := ex.records(ctx, plan)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "rwmeval: %d real records (%d executed now, %d from %s) in %s; %d infeasible\n",
		len(rs), ex.executed, len(rs)-ex.executed, filepath.Join(o.out, "records.jsonl"),
		time.Since(t0).Round(time.Second), countInfeasible(rs))

	// Part 2: accuracy as the context grows.
	train, test := rs[:len(rs)-o.test], rs[len(rs)-o.test:]
	fmt.Fprintf(w, "\n## Accuracy on %d held-out real records (%d feasible) as the context grows\n", len(test), len(test)-countInfeasible(test))
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
		for _, n := range o.sizes {
			if n > len(train) {
				fmt.Fprintf(w, "%8d (only %d context records; rerun with a larger -records)\n", n, len(train))
				continue
			}
			ev, err := records.NewEvidence(train[:n]...)
			if err != nil {
				return err
			}
			cfg := modelConfig(cat, v.priors)
			tuned := ""
			if v.tune {
				if cfg, _, err = rwm.Tune(ctx, cfg, ev, nil); err != nil {
					return err
				}
				tuned = fmt.Sprintf("   noise %.2g, task corr %.2g/%.2g/%.2g, mech corr %.2g, lengthscale %.2g",
					cfg.NoiseSigmas, cfg.CorrFamily, cfg.CorrMetric, cfg.CorrAny, cfg.CorrMech, cfg.Lengthscale)
			}
			s, err := score(ctx, rwm.NewEmbedded(cfg), ev, test)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%8d %9.3f %9.3f %9.3f %9.2f %+9.2f%s\n", n, s.spearman, s.pairwise, s.coverage, s.mae, s.bias, tuned)
		}
	}

	// Part 3: does a static context get exploited?
	n0 := min(100, len(train))
	fmt.Fprintf(w, "\n## Exploitation of a static context (%d records), %d rounds of the top %d\n", n0, o.rounds, o.top)
	fmt.Fprintln(w, "model: priors from the cards, hyperparameters tuned (rwm.Tune) on the context at the start of each round")
	ctxRecs := slices.Clone(train[:n0])
	seen := map[string]bool{}
	for _, it := range plan {
		seen[itemKey(it.Task, it.Proposal)] = true
	}
	prng := rand.New(rand.NewPCG(o.seed, 0x9001))
	pool := records.DrawChanges(prng, tasks, cat, o.pool*len(tasks), seen)
	var prevScores []float64
	var prevTop []int
	executed := map[int]bool{} // pool items already in context are not picked again
	var m *rwm.Embedded
	for round := 1; round <= o.rounds; round++ {
		ev, err := records.NewEvidence(ctxRecs...)
		if err != nil {
			return err
		}
		// Retune at each calibration point, then keep the model frozen.
		cfg, _, err := rwm.Tune(ctx, modelConfig(cat, true), ev, nil)
		if err != nil {
			return err
		}
		m = rwm.NewEmbedded(cfg)
		preds, err := predictAll(ctx, m, ev, pool)
		if err != nil {
			return err
		}
		scores := make([]float64, len(pool))
		for i, p := range preds {
			scores[i] = p.Gain / pool[i].Task.SeedNoise
			if !p.Valid {
				scores[i] = math.Inf(-1)
			}
		}
		var order []int
		for _, i := range argsortDesc(scores) {
			if !executed[i] {
				order = append(order, i)
			}
		}
		top := order[:min(o.top, len(order))]
		if prevScores != nil {
			kept := 0
			for _, i := range top {
				if slices.Contains(prevTop, i) {
					kept++
				}
			}
			fmt.Fprintf(w, "\nafter adding the previous round's %d records: Spearman of pool scores vs before %.3f; %d of the previous top %d stay in the top %d\n",
				len(prevTop), spearman(prevScores, scores), kept, len(prevTop), len(top))
			fmt.Fprintf(w, "previous top %d now predicted: mean %+.2f σ_e (was %+.2f)\n",
				len(prevTop), meanAt(scores, prevTop), meanAt(prevScores, prevTop))
		}
		var items []item
		for _, i := range top {
			items = append(items, pool[i])
			executed[i] = true
		}
		got, err := ex.records(ctx, items)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nround %d: top %d of %d candidates with %d records in context\n", round, len(top), len(pool), len(ctxRecs))
		fmt.Fprintf(w, "%-34s %-44s %8s %17s %8s\n", "task", "proposal", "pred σ", "q10…q90 σ", "real σ")
		var predSum, realSum float64
		nReal := 0
		for k, i := range top {
			p, r := preds[i], got[k]
			s := pool[i].Task.SeedNoise
			real := "infeas."
			if r.Infeasible == "" {
				real = fmt.Sprintf("%+8.2f", r.Gain/s)
				predSum += p.Gain / s
				realSum += r.Gain / s
				nReal++
			}
			fmt.Fprintf(w, "%-34s %-44s %+8.2f %+8.2f…%+7.2f %8s\n", trunc(pool[i].Task.ID, 34), trunc(pool[i].Proposal.Key(), 44),
				p.Gain/s, p.Low/s, p.High/s, real)
		}
		if nReal > 0 {
			fmt.Fprintf(w, "mean over %d feasible: predicted %+.2f σ_e, real %+.2f σ_e, over-prediction %+.2f σ_e\n",
				nReal, predSum/float64(nReal), realSum/float64(nReal), (predSum-realSum)/float64(nReal))
		}
		ctxRecs = append(ctxRecs, got...)
		prevScores, prevTop = scores, top
	}
	if o.rounds < 1 {
		return nil
	}
	// The last round's effect on the ranking (same tuned model, more records).
	ev, err := records.NewEvidence(ctxRecs...)
	if err != nil {
		return err
	}
	preds, err := predictAll(ctx, m, ev, pool)
	if err != nil {
		return err
	}
	scores := make([]float64, len(pool))
	for i, p := range preds {
		scores[i] = p.Gain / pool[i].Task.SeedNoise
		if !p.Valid {
			scores[i] = math.Inf(-1)
		}
	}
	top := argsortDesc(scores)[:min(o.top, len(pool))]
	kept := 0
	for _, i := range top {
		if slices.Contains(prevTop, i) {
			kept++
		}
	}
	fmt.Fprintf(w, "\nafter adding the last round's records: Spearman of pool scores vs before %.3f; %d of the previous top %d stay; previous top now predicted %+.2f σ_e (was %+.2f)\n",
		spearman(prevScores, scores), kept, len(prevTop), meanAt(scores, prevTop), meanAt(prevScores, prevTop))
	fmt.Fprintf(w, "\nrwmeval: done in %s (%d runs executed in this invocation)\n", time.Since(start).Round(time.Second), ex.executed)
	return nil
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

// ranks returns the 1-based ranks of xs, ties getting their mean rank.
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return xs[idx[a]] < xs[idx[b]] })
	r := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && xs[idx[j+1]] == xs[idx[i]] {
			j++
		}
		for k := i; k <= j; k++ {
			r[idx[k]] = float64(i+j)/2 + 1
		}
		i = j + 1
	}
	return r
}

// spearman is Spearman's rank correlation: Pearson's r of the ranks.
// −Inf entries rank lowest.
func spearman(a, b []float64) float64 {
	if len(a) != len(b) {
		panic("rwmeval: spearman: length mismatch")
	}
	ra, rb := ranks(a), ranks(b)
	n := float64(len(a))
	var ma, mb float64
	for i := range ra {
		ma += ra[i]
		mb += rb[i]
	}
	ma /= n
	mb /= n
	var sab, saa, sbb float64
	for i := range ra {
		sab += (ra[i] - ma) * (rb[i] - mb)
		saa += (ra[i] - ma) * (ra[i] - ma)
		sbb += (rb[i] - mb) * (rb[i] - mb)
	}
	if saa == 0 || sbb == 0 {
		return 0
	}
	return sab / math.Sqrt(saa*sbb)
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
