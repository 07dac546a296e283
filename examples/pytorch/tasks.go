package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/records"
)

// ErrReference: a reference run failed, so the task has no b_e.
var ErrReference = errors.New("pytorch: reference run failed")

// Corpora writes the example's two corpora as text files under dir (when
// missing or different) and returns their paths: Newton's Opticks and a
// 1 MiB selection of Go standard-library source, both from GOROOT (see
// package lab/corpus).
func Corpora(dir string) (prose, code string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	cfg := corpus.DefaultConfig()
	out := [2]string{}
	for i, load := range []func(corpus.Config) (*corpus.Corpus, error){corpus.LoadOpticks, corpus.LoadGoSource} {
		c, err := load(cfg)
		if err != nil {
			return "", "", err
		}
		path := filepath.Join(dir, c.Name+".txt")
		text := corpus.UnfoldBytes(c.Symbols)
		if old, err := os.ReadFile(path); err != nil || !bytes.Equal(old, text) {
			if err := os.WriteFile(path, text, 0o644); err != nil {
				return "", "", err
			}
		}
		out[i] = path
	}
	return out[0], out[1], nil
}

// Tasks returns the example's tasks on the two corpora: each family
// ("gpt-prose", "gpt-code") has a base reference and a deliberately
// untuned one ("slow": a low learning rate and a narrow model; "hot": a
// high learning rate and a small batch). The first n are used (n ≤ 4):
// two training tasks, the held-out one, then a third training task.
func Tasks(prose, code string, n int) []TaskSpec {
	slow := BaseRecipe()
	slow.LR, slow.Width = 2e-3, 24
	hot := BaseRecipe()
	hot.LR, hot.Batch = 4e-2, 8
	all := []TaskSpec{
		task("gpt-prose/slow", "gpt-prose", records.Train, prose, "Newton's Opticks (English prose)", slow),
		task("gpt-code/base", "gpt-code", records.Train, code, "Go standard-library source code", BaseRecipe()),
		task("gpt-prose/base", "gpt-prose", records.HeldOut, prose, "Newton's Opticks (English prose)", BaseRecipe()),
		task("gpt-code/hot", "gpt-code", records.Train, code, "Go standard-library source code", hot),
	}
	return all[:min(max(n, 1), len(all))]
}

func task(id, family string, split records.Split, path, what string, r Recipe) TaskSpec {
	desc := fmt.Sprintf("Tiny byte-level GPT (PyTorch) on %s: %d block(s) of width %d, %d heads, MLP ×%g, %s, "+
		"context %d, batch %d, %d steps, %s lr %g (%s schedule, warm-up %d, final %g×), β %g/%g, "+
		"weight decay %g, clip %g, dropout %g, tied embeddings %t. Metric: validation bits per byte (lower is better).",
		what, r.Depth, r.Width, r.Heads, r.MLPRatio, r.Activation, r.Context, r.Batch, r.Steps, r.Optimizer, r.LR,
		r.Schedule, r.Warmup, r.MinLRFrac, r.Beta1, r.Beta2, r.WeightDecay, r.GradClip, r.Dropout, r.TieEmbeddings)
	return TaskSpec{Task: records.Task{ID: id, Family: family, Split: split, Metric: records.BitsPerByte,
		Budget: r.Steps, Description: desc}, Corpus: path, Reference: r}
}

// minSeedNoise floors σ_e so that a task is valid even if every reference
// seed gave the same loss.
const minSeedNoise = 1e-6

// References measures every task's reference recipe with each of the
// Builder's RefSeeds (METHOD.md §1 Vocabulary: b_e is the mean, σ_e the
// sample standard deviation over seeds), running ex at most parallel at a
// time, and records each loss with b.SetReference. Runs already in store
// (records.Reference records of the task and seed) are reused; new ones
// are appended with Source records.Reference, so that a lookup of the
// no-change proposal's outcome (builder.Pool's) never returns one. It
// returns the tasks with RefLoss and SeedNoise set.
func References(ctx context.Context, b *Builder, ex builder.Executor, store records.Store, parallel int) ([]records.Task, error) {
	out := make([]records.Task, len(b.cfg.Tasks))
	for i, ts := range b.cfg.Tasks {
		losses, runs, err := referenceLosses(ctx, b, ex, store, ts.Task, parallel)
		if err != nil {
			return nil, err
		}
		t := ts.Task
		t.RefLoss, t.SeedNoise = stat.MeanStd(losses)
		t.SeedNoise = max(t.SeedNoise, minSeedNoise)
		for _, r := range runs {
			r.Task, r.Gain, r.Source = t, t.RefLoss-r.Loss, records.Reference
			if err := store.Append(ctx, r); err != nil {
				return nil, fmt.Errorf("pytorch: store reference of %s: %w", t.ID, err)
			}
		}
		out[i] = t
	}
	return out, nil
}

// referenceLosses returns the task's reference losses in RefSeeds order and
// the records of the runs it had to make (their Task is set by the caller).
func referenceLosses(ctx context.Context, b *Builder, ex builder.Executor, store records.Store, t records.Task, parallel int) ([]float64, []records.Record, error) {
	none := records.Proposal{Mechanism: records.NoChange}
	stored, err := store.Scan(ctx, records.Filter{TaskID: t.ID, Key: none.Key(), Source: records.Reference})
	if err != nil {
		return nil, nil, err
	}
	seeds := b.cfg.RefSeeds
	losses := make([]float64, len(seeds))
	fresh := make([]*records.Record, len(seeds))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for i, s := range seeds {
		if l, ok := storedLoss(stored, s); ok {
			losses[i] = l
			continue
		}
		g.Go(func() error {
			j, err := b.referenceJob(t, s)
			if err != nil {
				return err
			}
			o, err := ex.Execute(gctx, j)
			if err != nil {
				return fmt.Errorf("%w: task %s seed %d: %w", ErrReference, t.ID, s, err)
			}
			losses[i] = o.Loss
			r := o.Record(j)
			fresh[i] = &r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	var runs []records.Record
	for i, s := range seeds {
		b.SetReference(t.ID, s, losses[i])
		if fresh[i] != nil {
			runs = append(runs, *fresh[i])
		}
	}
	return losses, runs, nil
}

func storedLoss(rs []records.Record, seed uint64) (float64, bool) {
	for _, r := range rs {
		if r.Infeasible == "" && len(r.Seeds) == 1 && r.Seeds[0] == seed {
			return r.Loss, true
		}
	}
	return 0, false
}
