package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// result is one job's measurement.
type result struct {
	gain       float64 // metric units, against the reference run of the same seed
	infeasible string  // why the run was infeasible ("" = feasible)
	cpu        float64 // CPU seconds of the run
}

// execute runs jobs on l, reusing the store's records of the same task
// (same reference loss), proposal and seed, and appends the new records.
// Progress goes to log.
func execute(ctx context.Context, log io.Writer, l *lab.Lab, store records.Store, jobs []builder.Job, parallel int) ([]result, error) {
	out := make([]result, len(jobs))
	var todo []builder.Job
	var at []int
	for i, j := range jobs {
		rec, ok, err := records.Seen(ctx, store, j.Task.ID, j.Proposal.Key(), j.Seed)
		if err != nil {
			return nil, err
		}
		if ok && rec.Task.RefLoss == j.Task.RefLoss {
			out[i] = fromRecord(rec)
			continue
		}
		todo = append(todo, j)
		at = append(at, i)
	}
	fmt.Fprintf(log, "running %d jobs (%d already recorded), %d at a time...\n", len(todo), len(jobs)-len(todo), parallel)
	start := time.Now()
	for lo := 0; lo < len(todo); lo += chunk {
		hi := min(lo+chunk, len(todo))
		if err := runChunk(ctx, l, store, todo[lo:hi], at[lo:hi], out, parallel); err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "%d/%d jobs, %.0f s wall\n", hi, len(todo), time.Since(start).Seconds())
	}
	return out, nil
}

// chunk is how many jobs run between appends to the store, so that an
// interrupted sweep keeps most of its runs.
const chunk = 64

// runChunk runs jobs, stores their records and puts their results at
// out[at[i]].
func runChunk(ctx context.Context, l *lab.Lab, store records.Store, jobs []builder.Job, at []int, out []result, parallel int) error {
	res := lab.RunAll(ctx, l, jobs, parallel)
	recs := make([]records.Record, 0, len(res))
	for i, r := range res {
		if r.Err != nil && !errors.Is(r.Err, builder.ErrInfeasible) {
			return r.Err
		}
		rec := r.Outcome.Record(r.Job)
		rec.Time = time.Now()
		recs = append(recs, rec)
		out[at[i]] = fromRecord(rec)
	}
	return store.Append(ctx, recs...)
}

func fromRecord(r records.Record) result {
	return result{gain: r.Gain, infeasible: r.Infeasible, cpu: r.Cost.DeviceSeconds}
}

// seedList returns the first n reference seeds of l, then 1001, 1002, …
func seedList(l *lab.Lab, n int) []uint64 {
	ref := l.Config().RefSeeds
	seeds := append([]uint64(nil), ref[:min(n, len(ref))]...)
	for s := uint64(1001); len(seeds) < n; s++ {
		seeds = append(seeds, s)
	}
	return seeds
}
