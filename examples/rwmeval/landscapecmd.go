package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// landscapeOptions are the flags of the -landscape mode.
type landscapeOptions struct {
	store string // the landscape records store (examples/sweep -landscape -store)
	part  string // lab.SuiteV2 part whose tasks are kept; "" = every task of the store
	out   string // directory of landscape-report.md
	rank  rankConfig
}

// runLandscape ranks the world models on a landscape store and writes the
// report to stdout and to o.out/landscape-report.md.
func runLandscape(ctx context.Context, o landscapeOptions, stdout io.Writer) error {
	start := time.Now()
	rs, err := readStore(ctx, o.store)
	if err != nil {
		return err
	}
	keep, err := partFilter(o.part)
	if err != nil {
		return err
	}
	l, err := newLandscape(rs, keep)
	if err != nil {
		return fmt.Errorf("landscape store %s, -part %q: %w", o.store, o.part, err)
	}
	models, err := landscapeModels()
	if err != nil {
		return err
	}
	rows, err := rankLandscape(ctx, l, models, o.rank)
	if err != nil {
		return fmt.Errorf("landscape store %s: %w", o.store, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## Ranking on the landscape %s\n\n", o.store)
	fmt.Fprintf(&b, "%d cells (task, proposal) measured on two seeds, on %d tasks; %d context draws per size, seed %d.\n",
		len(l.cells), len(l.tasks), o.rank.reps, o.rank.seed)
	fmt.Fprintf(&b, "Per task, the cells outside the context are predicted and scored against the seed the context does not hold: pairwise accuracy over pairs whose real gains differ by ≥ %g σ_e, and the mean real gain (σ_e, clipped to ±%d, infeasible −%d) of the %d predicted best. Figures: mean over tasks of the mean over draws; 95%% percentile-bootstrap interval over tasks (%d resamples).\n\n",
		pairThreshold, landClip, landClip, o.rank.k, o.rank.resamples)
	b.WriteString(landscapeTable(rows, o.rank.k))
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, "landscape-report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\nrwmeval: done in %s; report in %s\n", b.String(), time.Since(start).Round(time.Second), filepath.Join(o.out, "landscape-report.md"))
	return err
}

// readStore returns every record of the file store at path. The store is
// opened (which locks it) and closed again.
func readStore(ctx context.Context, path string) ([]records.Record, error) {
	st, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		return nil, fmt.Errorf("landscape store: %w", err)
	}
	rs, err := st.Scan(ctx, records.Filter{})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("landscape store %s: %w", path, err)
	}
	return rs, nil
}

// partFilter keeps the task IDs of a part of lab.SuiteV2(lab.DefaultSuiteSeed),
// named as examples/sweep's -part: val, val-out, train, test-in or test-out;
// "" keeps every task (nil filter).
func partFilter(part string) (func(string) bool, error) {
	if part == "" {
		return nil, nil
	}
	s := lab.SuiteV2(lab.DefaultSuiteSeed)
	specs, ok := map[string][]lab.TaskSpec{"val": s.Validation, "val-out": s.ValidationOut, "train": s.Train, "test-in": s.TestIn, "test-out": s.TestOut}[part]
	if !ok {
		return nil, fmt.Errorf("-part %q, want val, val-out, train, test-in, test-out or empty (every task)", part)
	}
	ids := map[string]bool{}
	for _, t := range specs {
		ids[t.ID] = true
	}
	return func(id string) bool { return ids[id] }, nil
}

// landscapeModels returns the world models the report ranks, built as
// examples/compare builds its world model (catalogue priors and cards from
// lab.Catalogue(); METHOD.md §1 Research World Model):
//
//   - catalogue: rwm.DefaultEmbeddedConfig;
//   - descriptors: DescriptorWeight 0.5 (the tasks' descriptors in the kernel);
//   - descriptors, tuned: rwm.NewTuned around it (hyperparameters by
//     marginal likelihood on each context);
//   - effects: DescriptorWeight 1 and rwm.WithEffects with the lab's
//     Effects (what a proposal does to the task's descriptors);
//   - effects, tuned: rwm.NewTuned around it.
//
// The lab behind Effects holds lab.SuiteV2(lab.DefaultSuiteSeed)'s
// training, validation and test tasks and no records: an effect needs no
// reference run. A store of another suite's tasks gets no effect terms.
func landscapeModels() ([]rankModel, error) {
	su := lab.SuiteV2(lab.DefaultSuiteSeed)
	lcfg := lab.DefaultConfig()
	lcfg.Tasks = append(append(append([]lab.TaskSpec(nil), su.Train...), su.Val()...), su.Test()...)
	lb, err := lab.New(lcfg, records.NewMemStore())
	if err != nil {
		return nil, fmt.Errorf("lab for the effects: %w", err)
	}
	cat := lab.Catalogue()
	base := rwm.DefaultEmbeddedConfig()
	base.Priors, base.Cards = rwm.PriorsFromCards(cat), cat
	desc := base
	desc.DescriptorWeight = 0.5
	eff := base
	eff.DescriptorWeight = 1
	eff = rwm.WithEffects(eff, lb.Effects())
	return []rankModel{
		{"catalogue", rwm.NewEmbedded(base)},
		{"descriptors", rwm.NewEmbedded(desc)},
		{"descriptors, tuned", rwm.NewTuned(desc, nil)},
		{"effects", rwm.NewEmbedded(eff)},
		{"effects, tuned", rwm.NewTuned(eff, nil)},
	}, nil
}
