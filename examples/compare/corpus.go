package main

import (
	"context"
	"fmt"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// loadCorpus reads the real proposal runs of the pretraining corpus's
// store at path, opened read only (lab.PretrainRuns: reference runs are
// left out, the baselines rank and imitate proposals). A record of a task
// outside the corpus is an error wrapping lab.ErrNotPretrain; a store with
// no proposal run is an error too.
func loadCorpus(ctx context.Context, path string) (records.Evidence, error) {
	cfg := records.DefaultFileConfig()
	cfg.ReadOnly = true
	st, err := records.OpenFile(path, cfg)
	if err != nil {
		return records.Evidence{}, fmt.Errorf("-corpus: %w", err)
	}
	defer st.Close()
	rs, err := st.Scan(ctx, records.Filter{Source: records.Real})
	if err != nil {
		return records.Evidence{}, fmt.Errorf("-corpus %s: %w", path, err)
	}
	keep, err := lab.PretrainRuns(rs)
	if err != nil {
		return records.Evidence{}, fmt.Errorf("-corpus %s: %w", path, err)
	}
	if len(keep) == 0 {
		return records.Evidence{}, fmt.Errorf("-corpus %s: no proposal run (build it with examples/priorcorpus)", path)
	}
	ev, err := records.RealOnly(keep)
	if err != nil {
		return records.Evidence{}, fmt.Errorf("-corpus %s: %w", path, err)
	}
	return ev, nil
}

// corpusTasks lists the distinct tasks of ev's records.
func corpusTasks(ev records.Evidence) []string {
	seen := map[string]bool{}
	var out []string
	for i := range ev.Len() {
		if id := ev.At(i).Task.ID; !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// withoutFamily returns ev without the records of family's tasks: the
// held-out family's runs are outside knowledge no method may draw on.
func withoutFamily(ev records.Evidence, family string) (records.Evidence, error) {
	var keep []records.Record
	for _, r := range ev.Records() {
		if r.Task.Family != family {
			keep = append(keep, r)
		}
	}
	return records.NewEvidence(keep...)
}

// withCorpus returns m0 followed by the corpus's records: what a corpus
// method ranks or imitates. m0 alone is what it paid for.
func withCorpus(m0, corpus records.Evidence) (records.Evidence, error) {
	ev, err := m0.Add(corpus.Records()...)
	if err != nil {
		return records.Evidence{}, fmt.Errorf("M'_0 with the corpus: %w", err)
	}
	return ev, nil
}
