package records

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
)

// Pool is the record pool of METHOD.md §1 Synthetic state expansion:
// records of any source, grouped by task in the order they were added, from
// which research states are drawn. Real records seed it; every few steps the
// trainer adds the rollout's (state, proposal) pairs as Synthetic records
// with their predicted gains, growing the set of training states without any
// execution. Synthetic records build histories only: Evidence returns the
// real records alone, so they can never reach a world model as evidence.
//
// The zero value is an empty pool. Pool is safe for concurrent use; it does
// no I/O and draws randomness only from the *rand.Rand it is given.
type Pool struct {
	mu     sync.RWMutex
	all    []Record         // every record, in pool order
	byTask map[string][]int // task ID -> positions in all, ascending
}

// NewPool returns a pool holding rs (see Add).
func NewPool(rs ...Record) (*Pool, error) {
	p := &Pool{}
	if err := p.Add(rs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Add validates every record of rs and adds copies of all of them at the
// end of the pool, or none when any is invalid (an error wrapping
// ErrInvalid).
func (p *Pool) Add(rs ...Record) error {
	for i, r := range rs {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("records: pool add record %d of %d: %w", i, len(rs), err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byTask == nil {
		p.byTask = map[string][]int{}
	}
	for _, r := range rs {
		p.byTask[r.Task.ID] = append(p.byTask[r.Task.ID], len(p.all))
		p.all = append(p.all, cloneRecord(r))
	}
	return nil
}

// Len returns the number of records in the pool.
func (p *Pool) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.all)
}

// Count returns the number of records of task taskID.
func (p *Pool) Count(taskID string) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.byTask[taskID])
}

// Shared returns the records of task taskID in pool order as the pool
// holds them, without copying their parameters, seeds or code: the pool
// never changes a record in place (Add keeps copies, TrimSynthetic builds
// a new list), so a caller that only reads them, such as a snapshot taken
// under a lock and encoded off it, may keep them. The caller must not
// change them.
func (p *Pool) Shared(taskID string) []Record {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]Record, 0, len(p.byTask[taskID]))
	for _, j := range p.byTask[taskID] {
		out = append(out, p.all[j])
	}
	return out
}

// Records returns copies of the records of task taskID in pool order.
func (p *Pool) Records(taskID string) []Record {
	p.mu.RLock()
	defer p.mu.RUnlock()
	var out []Record
	for _, j := range p.byTask[taskID] {
		out = append(out, cloneRecord(p.all[j]))
	}
	return out
}

// Evidence returns the pool's real records, in pool order, as Evidence
// (built by RealOnly): predicted and synthetic records are left out.
func (p *Pool) Evidence() (Evidence, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return RealOnly(p.all)
}

// Sample draws a research state of task (METHOD.md §1 Vocabulary: a task
// and 0–8 earlier records; §1 Synthetic state expansion). Let k be the
// number of pool records of task.ID. The history length L is uniform on
// 0..min(maxHist, k); given L, the L records are a uniformly random subset
// of the k (drawn without replacement, by Floyd's algorithm), listed oldest
// first in pool order. History records may be of any source. The result is
// a deterministic function of the pool and rng's state; it makes L+1
// calls to rng.IntN.
//
// Sample panics if maxHist is outside 0..MaxHistory.
func (p *Pool) Sample(rng *rand.Rand, task Task, maxHist int) State {
	if maxHist < 0 || maxHist > MaxHistory {
		panic(fmt.Sprintf("records: Pool.Sample: maxHist %d outside 0..%d", maxHist, MaxHistory))
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	post := p.byTask[task.ID]
	k := len(post)
	l := rng.IntN(min(maxHist, k) + 1)
	picked := make([]int, 0, l)
	for j := k - l; j < k; j++ {
		t := rng.IntN(j + 1)
		if slices.Contains(picked, t) {
			t = j
		}
		picked = append(picked, t)
	}
	slices.Sort(picked)
	s := State{Task: task}
	for _, t := range picked {
		s.History = append(s.History, cloneRecord(p.all[post[t]]))
	}
	return s
}

// States draws n research states: each picks a task uniformly from tasks
// (with replacement) and then calls Sample. It panics if tasks is empty
// and n > 0, or if maxHist is outside 0..MaxHistory.
func (p *Pool) States(rng *rand.Rand, tasks []Task, n, maxHist int) []State {
	if n > 0 && len(tasks) == 0 {
		panic("records: Pool.States: no tasks")
	}
	out := make([]State, n)
	for i := range out {
		out[i] = p.Sample(rng, tasks[rng.IntN(len(tasks))], maxHist)
	}
	return out
}

// TrimSynthetic keeps at most perTask Synthetic records of each task,
// dropping the oldest of a task beyond that (real and predicted records are
// always kept), and returns how many it dropped. Pool order is otherwise
// kept. A host that adds synthetic records without bound (an environment
// service scoring an outside trainer's rollouts) calls it to bound the
// pool's memory; histories are then drawn from the newest synthetic records
// (METHOD.md §1 Synthetic state expansion). perTask < 0 keeps all.
func (p *Pool) TrimSynthetic(perTask int) int {
	if perTask < 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	drop := map[int]bool{}
	for _, idx := range p.byTask {
		var syn []int
		for _, j := range idx {
			if p.all[j].Source == Synthetic {
				syn = append(syn, j)
			}
		}
		for _, j := range syn[:max(0, len(syn)-perTask)] {
			drop[j] = true
		}
	}
	if len(drop) == 0 {
		return 0
	}
	n := len(p.all) - len(drop)
	all := make([]Record, 0, n+n/4) // room for the adds before the next trim
	byTask := map[string][]int{}
	for j, r := range p.all {
		if drop[j] {
			continue
		}
		byTask[r.Task.ID] = append(byTask[r.Task.ID], len(all))
		all = append(all, r)
	}
	p.all, p.byTask = all, byTask
	return len(drop)
}
