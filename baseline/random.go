package baseline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/internal/realrun"
	"github.com/lm2lm/lm2lm/records"
)

// Draw is one (task, proposal) pair to measure for real.
type Draw struct {
	Task     records.Task
	Proposal records.Proposal
}

// RandomDraws draws up to n distinct (task, proposal) pairs by
// mechanism-library sampling (records.DrawChanges, METHOD.md §1 Data and
// evaluation): a task uniformly from tasks, a card uniformly from cat, and a
// choice uniformly per parameter. Pairs already in known (same task and proposal key) and
// repeats are drawn again: the runs are paid for, and a repeat would
// measure nothing new. It gives up after 100·n draws (a small catalogue),
// returning fewer pairs. It is pure: the result is a function of rng's
// state and the arguments.
func RandomDraws(rng *rand.Rand, tasks []records.Task, cat []records.Card, n int, known records.Evidence) []Draw {
	if n <= 0 || len(tasks) == 0 || len(cat) == 0 {
		return nil
	}
	skip := map[string]bool{}
	for i := range known.Len() {
		r := known.At(i)
		skip[records.TaskChange{Task: r.Task, Proposal: r.Proposal}.Key()] = true
	}
	var out []Draw
	for _, c := range records.DrawChanges(rng, tasks, cat, n, skip) {
		out = append(out, Draw{Task: c.Task, Proposal: c.Proposal})
	}
	return out
}

// Spent is what measuring records cost: Runs counts the executor calls
// that ran (outcomes not marked builder.Outcome.Reused, failed runs
// included), Reused the calls served from a store or a coalesced twin, and
// Cost sums the cost of the runs alone.
type Spent struct {
	Runs, Reused int
	Cost         records.Cost
}

// RunDraws measures every draw for real through b and e (lm2lm.RunReal),
// at most parallel at once, and returns the measured records in draw order
// (draws that failed for reasons other than the proposal are left out, as
// RunReal does) and what they cost.
func RunDraws(ctx context.Context, b builder.Builder, e builder.Executor, draws []Draw, parallel int) ([]records.Record, Spent, error) {
	if parallel < 1 {
		return nil, Spent{}, fmt.Errorf("%w: parallel = %d, want ≥ 1", ErrConfig, parallel)
	}
	m := &meter{Executor: e}
	jobs := make([]realrun.Change, len(draws))
	for i, d := range draws {
		jobs[i] = realrun.Change{TaskChange: records.TaskChange{Task: d.Task, Proposal: d.Proposal}}
	}
	runs, err := realrun.MeasureAll(ctx, b, m, parallel, jobs)
	var out []records.Record
	for _, r := range runs {
		if r.Rec.Task.ID != "" {
			out = append(out, r.Rec)
		}
	}
	return out, m.spent(), err
}

// StaticPlusRandom returns M'_0 of the static-RWM ablation (METHOD.md §1
// Data and evaluation): m0 plus extra records of random (task, proposal)
// pairs of tasks and cat not already in m0 (RandomDraws, RunDraws), i.e.
// the calibration budget spent on random real records up front. Spent
// counts only the extra runs.
func StaticPlusRandom(ctx context.Context, rng *rand.Rand, m0 records.Evidence, tasks []records.Task, cat []records.Card, extra int, b builder.Builder, e builder.Executor, parallel int) (records.Evidence, Spent, error) {
	recs, spent, err := RunDraws(ctx, b, e, RandomDraws(rng, tasks, cat, extra, m0), parallel)
	if err != nil {
		return m0, spent, fmt.Errorf("baseline: static plus random: %w", err)
	}
	ev, err := m0.Add(recs...)
	if err != nil {
		return m0, spent, fmt.Errorf("baseline: static plus random: %w", err)
	}
	return ev, spent, nil
}

// meter counts the runs an executor paid for.
type meter struct {
	builder.Executor
	mu sync.Mutex
	s  Spent
}

func (m *meter) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	out, err := m.Executor.Execute(ctx, j)
	m.mu.Lock()
	defer m.mu.Unlock()
	if out.Reused {
		m.s.Reused++
		return out, err
	}
	m.s.Runs++
	m.s.Cost.DeviceSeconds += out.Cost.DeviceSeconds
	m.s.Cost.WallSeconds += out.Cost.WallSeconds
	m.s.Cost.FLOPs += out.Cost.FLOPs
	m.s.Cost.Money += out.Cost.Money
	return out, err
}

func (m *meter) spent() Spent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s
}
