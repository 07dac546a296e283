// Command judgement measures what a world model could know of an unseen
// task's need before any record of it: for each task of a landscape store
// (examples/sweep -landscape), the rank, among the catalogue's
// mechanisms, of the task's best mechanism under rankings read from
// outside knowledge alone (METHOD.md §1 Research World Model: W brings
// knowledge from pretraining). The rankings are the pretraining corpus's
// landscapes (examples/priorcorpus's store: every catalogue change on 95
// tasks of the training space, two seeds) near the task in its
// descriptors, the corpus's mean landscape, and the lab's pretrained
// prior's mean function (lab/prior). No ranking reads the landscape it is
// scored on; 15.5 of 30 is a ranking blind to the task.
//
//	go run ./examples/judgement -corpus out/pretrain.records -landscape out/v3valland.records
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/prior"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "judgement:", err)
		os.Exit(1)
	}
}

// land is a landscape store as examples/compare's judgement reads it
// (internal/landscape: gains unclipped, an infeasible run counting −c), so
// the ranks here compare with its references, and the mechanism of each
// proposal a ranking scores.
type land struct {
	tasks map[string]records.Task
	gains landscape.Gains   // task → mechanism → best gain
	mech  map[string]string // proposal key → canonical mechanism
}

// readLand reads a landscape store, read only.
func readLand(ctx context.Context, path string) (*land, error) {
	l, err := landscape.Read(ctx, path)
	if err != nil {
		return nil, err
	}
	return &land{tasks: l.Tasks, gains: l.Gains, mech: map[string]string{}}, nil
}

// byMech is a per-proposal score turned into a per-mechanism one: a
// mechanism's best proposal's.
func byMech(score map[string]float64, mech map[string]string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range score {
		m := mech[k]
		if m == "" {
			continue
		}
		if old, ok := out[m]; !ok || v > old {
			out[m] = v
		}
	}
	return out
}

// ranking is one way to score a task's proposals from outside knowledge.
type ranking struct {
	name  string
	score func(records.Task) (map[string]float64, error)
}

func run(ctx context.Context, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("judgement", flag.ContinueOnError)
	corpus := fs.String("corpus", "", "the pretraining corpus's store (examples/priorcorpus -store)")
	landscape := fs.String("landscape", "", "the landscape store of the split to score on (examples/sweep -landscape -store)")
	k := fs.Int("k", 4, "proposals a rerank keeps per state (lm2lm.EvalConfig.K), for the second table")
	suite := fs.String("suite", lab.V3ValName, "the V3 split whose tasks the landscape holds (its tasks build the lab the prior's effects are read from)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *k < 1 {
		return fmt.Errorf("-k %d: want ≥ 1", *k)
	}
	if *corpus == "" || *landscape == "" {
		return errors.New("-corpus and -landscape name the two stores")
	}
	sp, ok := lab.SplitNamed(*suite)
	if !ok {
		return fmt.Errorf("-suite %q: not a V3 split", *suite)
	}
	crs, err := readCorpus(ctx, *corpus)
	if err != nil {
		return fmt.Errorf("-corpus: %w", err)
	}
	l, err := readLand(ctx, *landscape)
	if err != nil {
		return fmt.Errorf("-landscape: %w", err)
	}
	for _, r := range crs {
		if _, ok := l.tasks[r.Task.ID]; ok {
			return fmt.Errorf("task %s is in both stores", r.Task.ID)
		}
	}
	lcfg := lab.DefaultConfig()
	lcfg.Tasks = sp.Tasks
	lb, err := lab.New(lcfg, records.NewMemStore())
	if err != nil {
		return err
	}
	cat := lab.Catalogue()
	props := cards.All(cat)
	rankings, corpusTasks, err := rankingsOf(crs, lb.Effects(), props)
	if err != nil {
		return err
	}
	for k, q := range propsMech(props) {
		l.mech[k] = q
	}
	tids := make([]string, 0, len(l.tasks))
	for id := range l.tasks {
		tids = append(tids, id)
	}
	slices.Sort(tids)
	fmt.Fprintf(w, "Rank of each task's best mechanism (of %d) in %s, %d tasks; corpus %s, %d tasks\n\n", len(mechanisms(cat)), *landscape, len(l.tasks), *corpus, corpusTasks)
	full := func(score, gains map[string]float64) float64 {
		return evalstat.BestRank(byMech(score, l.mech), gains, math.Inf(-1))
	}
	if err := table(w, rankings, l, tids, full); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nThe same, read from each ranking's %d best proposals as examples/compare reads a rerank's (a mechanism's share of them; the others tie at 0)\n\n", *k)
	return table(w, rankings, l, tids, func(score, gains map[string]float64) float64 {
		return evalstat.BestRank(topShares(score, l.mech, *k), gains, 0)
	})
}

// readCorpus reads a store's real records, read only.
func readCorpus(ctx context.Context, path string) ([]records.Record, error) {
	cs, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	return cs.Scan(ctx, records.Filter{Source: records.Real})
}

// rankingsOf returns the rankings scored (each proposal of props): the
// corpus's mean landscape, the prior's mean function (lab/prior V2 with
// eff), the nearest 1, 3, 5, 10 and 20 corpus tasks' mean and their blends
// with the prior's mean; and the number of corpus tasks.
func rankingsOf(crs []records.Record, eff rwm.Effector, props []records.Proposal) ([]ranking, int, error) {
	p, err := prior.V2()
	if err != nil {
		return nil, 0, err
	}
	neighbours := func(k int) (*NeighbourMean, error) {
		cfg := DefaultNeighbourConfig()
		cfg.K = k
		return NewNeighbourMean(crs, cfg)
	}
	scoreOf := func(f func(records.Task, records.Proposal) (float64, bool)) func(records.Task) (map[string]float64, error) {
		return func(t records.Task) (map[string]float64, error) {
			out := map[string]float64{}
			for _, q := range props {
				if v, ok := f(t, q); ok {
					out[q.Key()] = v
				}
			}
			return out, nil
		}
	}
	priorMean := func(t records.Task, q records.Proposal) (float64, bool) { return p.Mean(t, q, eff, 0), true }
	all, err := neighbours(1 << 20)
	if err != nil {
		return nil, 0, fmt.Errorf("-corpus: %w", err)
	}
	rankings := []ranking{
		{fmt.Sprintf("corpus mean (%d tasks)", all.Tasks()), scoreOf(all.Mean)},
		{"pretrained prior's mean (lab/prior V2)", scoreOf(priorMean)},
	}
	for _, k := range []int{1, 3, 5, 10, 20} {
		nb, err := neighbours(k)
		if err != nil {
			return nil, 0, err
		}
		rankings = append(rankings, ranking{fmt.Sprintf("nearest %d corpus tasks (NeighbourMean)", k), scoreOf(nb.Mean)})
		rankings = append(rankings, ranking{fmt.Sprintf("½ prior's mean + ½ nearest %d", k), scoreOf(func(t records.Task, q records.Proposal) (float64, bool) {
			a, _ := priorMean(t, q)
			if b, ok := nb.Mean(t, q); ok {
				return (a + b) / 2, true
			}
			return a, true
		})})
	}
	return rankings, all.Tasks(), nil
}

// table writes one row per ranking: the mean over tids of rankOf(the
// ranking's scores of the task, the task's gains), over all tasks and by
// region.
func table(w io.Writer, rankings []ranking, l *land, tids []string, rankOf func(score, gains map[string]float64) float64) error {
	regions := append([]string{"all"}, lab.RegionNames...)
	fmt.Fprintf(w, "| ranking | %s |\n|---|%s\n", strings.Join(regions, " | "), strings.Repeat("---|", len(regions)))
	for _, r := range rankings {
		sum, n := map[string]float64{}, map[string]float64{}
		for _, id := range tids {
			score, err := r.score(l.tasks[id])
			if err != nil {
				return err
			}
			rank := rankOf(score, l.gains[id])
			for _, g := range []string{"all", lab.RegionOf(id)} {
				sum[g] += rank
				n[g]++
			}
		}
		fmt.Fprintf(w, "| %s |", r.name)
		for _, g := range regions {
			fmt.Fprintf(w, " %.1f |", sum[g]/n[g])
		}
		fmt.Fprintln(w)
	}
	return nil
}

// topShares is each mechanism's share of the k best-scored proposals of
// score (equal scores in key order).
func topShares(score map[string]float64, mech map[string]string, k int) map[string]float64 {
	keys := make([]string, 0, len(score))
	for key := range score {
		if mech[key] != "" {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(score[b], score[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	keys = keys[:min(k, len(keys))]
	out := map[string]float64{}
	for _, key := range keys {
		out[mech[key]] += 1 / float64(len(keys))
	}
	return out
}

// propsMech maps each proposal's key to its canonical mechanism.
func propsMech(props []records.Proposal) map[string]string {
	out := map[string]string{}
	for _, q := range props {
		out[q.Key()] = records.CanonicalName(q.Mechanism)
	}
	return out
}

// mechanisms lists the catalogue's canonical mechanisms.
func mechanisms(cat []records.Card) []string {
	var out []string
	for _, c := range cat {
		if m := records.CanonicalName(c.Mechanism); !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}
