package yamlenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// Failure is a run that gave no outcome (builder.ErrFailed: a crash, a
// missing or malformed result, a job the cluster rejected), as a stage
// reports it.
type Failure struct {
	Task    string       `json:"task"`
	Key     string       `json:"proposal"`
	Seed    uint64       `json:"seed"`
	Reason  string       `json:"reason"`
	Log     string       `json:"log,omitempty"`      // the tail of its output (records.LogTail)
	LogFile string       `json:"log_file,omitempty"` // its whole output
	Cost    records.Cost `json:"cost"`
	// Earlier is set when the failure was read back from the store, not
	// paid for now: a deterministic failure is not paid twice unless it
	// is forgotten (Forget).
	Earlier bool `json:"earlier,omitempty"`
}

// ErrFailedBefore marks a run that is not paid for again because the
// store holds its failure (a records.Failed record of the same task,
// proposal, seed and version); Forget it to run it again.
var ErrFailedBefore = errors.New("failed before; not run again until its failure is forgotten")

// recorder remembers the runs of an executor that give no outcome: each
// is appended to the store as a records.Failed record (its cost, reason,
// log tail and log file), and a later request of the same job is answered
// from that record without running (ErrFailedBefore, Outcome.Reused). It
// keeps the failures it saw for the stage to print (take). It is safe for
// concurrent use.
type recorder struct {
	inner builder.Executor
	store records.Store
	// minNoise stands in for σ_e in the record of a failed reference run,
	// whose task has none yet.
	minNoise float64
	now      func() time.Time

	mu   sync.Mutex
	seen []Failure
}

var _ builder.Executor = (*recorder)(nil)

// Execute runs j through the inner executor unless the store holds its
// failure and no outcome of it.
func (r *recorder) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	if f, ok, err := r.failedBefore(ctx, j); err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrTransient, Reason: "scan records store", Err: err}
	} else if ok {
		r.note(Failure{Task: j.Task.ID, Key: j.Proposal.Key(), Seed: j.Seed, Reason: f.Failure, Log: f.Log,
			LogFile: f.LogFile, Cost: f.Cost, Earlier: true})
		return builder.Outcome{Cost: f.Cost, Log: f.Log, LogFile: f.LogFile, Reused: true},
			&builder.RunError{Class: builder.ErrFailed, Reason: f.Failure, Log: f.Log, Err: ErrFailedBefore}
	}
	o, err := r.inner.Execute(ctx, j)
	if builder.Class(err) != builder.ErrFailed || ctx.Err() != nil || errors.Is(err, ErrFailedBefore) {
		return o, err
	}
	f := Failure{Task: j.Task.ID, Key: j.Proposal.Key(), Seed: j.Seed, Reason: err.Error(), Log: records.LogTail(runLog(o, err)),
		LogFile: o.LogFile, Cost: o.Cost, Earlier: o.Reused}
	if len(f.Reason) > records.MaxLogFile {
		f.Reason = f.Reason[:records.MaxLogFile-len("…")] + "…"
	}
	if !o.Reused {
		rec := records.Record{Task: j.Task, Proposal: j.Proposal, Source: records.Failed, Seeds: []uint64{j.Seed}, Cost: o.Cost,
			Time: r.now().UTC(), Failure: f.Reason, Log: f.Log, LogFile: f.LogFile}
		rec.Task.SeedNoise = max(rec.Task.SeedNoise, r.minNoise)
		if aerr := r.store.Append(context.WithoutCancel(ctx), rec); aerr != nil {
			err = errors.Join(err, fmt.Errorf("the failure was not recorded: %w", aerr))
		}
	}
	r.note(f)
	return o, err
}

// failedBefore returns the stored failure of j when the store holds one and
// no real record of j.
func (r *recorder) failedBefore(ctx context.Context, j builder.Job) (records.Record, bool, error) {
	rs, err := r.store.Scan(ctx, records.Filter{TaskID: j.Task.ID, Key: j.Proposal.Key()})
	if err != nil {
		return records.Record{}, false, err
	}
	f, ok := storedFailure(rs, j.Seed)
	return f, ok, nil
}

// storedFailure returns the failure of seed among rs (the stored records
// of one task and proposal) when they hold one and no real record of that
// seed: such a run is answered from the store, not run again.
func storedFailure(rs []records.Record, seed uint64) (records.Record, bool) {
	var failed *records.Record
	for i, x := range rs {
		if !x.HasSeed(seed) {
			continue
		}
		switch x.Source {
		case records.Real:
			return records.Record{}, false
		case records.Failed:
			failed = &rs[i]
		}
	}
	if failed == nil {
		return records.Record{}, false
	}
	return *failed, true
}

// runLog is the log of a failed run: the outcome's, else the error's (a
// rejected submission has only sbatch's message).
func runLog(o builder.Outcome, err error) string {
	if o.Log != "" {
		return o.Log
	}
	var re *builder.RunError
	if errors.As(err, &re) {
		return re.Log
	}
	return ""
}

func (r *recorder) note(f Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, f)
}

// take returns the failures seen since the last take, ordered by task,
// proposal and seed.
func (r *recorder) take() []Failure {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.seen
	r.seen = nil
	slices.SortStableFunc(out, func(a, b Failure) int {
		if c := strings.Compare(a.Task, b.Task); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.Seed, b.Seed)
	})
	return out
}

// versioned is a view of a store that holds the runs of one version of
// the training code (envconfig training.version): Scan returns only
// records of that version, Append stamps it on every record. So runs of an
// edited script are never reused, and the older ones stay in the file.
type versioned struct {
	records.Store
	version string
}

// Append appends copies of rs stamped with the view's version.
func (v versioned) Append(ctx context.Context, rs ...records.Record) error {
	cp := slices.Clone(rs)
	for i := range cp {
		cp[i].Version = v.version
	}
	return v.Store.Append(ctx, cp...)
}

// Scan returns the records of the view's version that match f.
func (v versioned) Scan(ctx context.Context, f records.Filter) ([]records.Record, error) {
	rs, err := v.Store.Scan(ctx, f)
	return slices.DeleteFunc(rs, func(r records.Record) bool { return r.Version != v.version }), err
}

// View returns the view of store that holds the runs of the training
// code's version (Record.Version): what every stage reads and writes.
func View(store records.Store, version string) records.Store { return versioned{store, version} }
