package main

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/grader"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Truth holds the real grade of every (task, solution) pair.
type Truth map[string]grader.Grade

func truthKey(task, solution string) string { return task + "\x00" + solution }

// Score returns the real ladder score of solution on task.
func (t Truth) Score(task, solution string) (float64, bool) {
	g, ok := t[truthKey(task, solution)]
	return g.Score, ok
}

// Distorted is the scripted verdict world model: it knows each solution's
// real ladder score s and answers D(s) = s^Power, a monotone distortion
// (METHOD.md §2 assumes the world model's bias is monotone), which WMRL's
// online debiasing must undo. Safe for concurrent use.
type Distorted struct {
	Truth Truth
	Power float64
}

var _ rwm.WorldModel = Distorted{}

// Predict implements rwm.WorldModel.
func (d Distorted) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	if err := ctx.Err(); err != nil {
		return rwm.Prediction{}, fmt.Errorf("wmrl-verdict: %w", err)
	}
	if err := q.Validate(); err != nil {
		return rwm.Prediction{}, err
	}
	s, ok := d.Truth.Score(q.Task.ID, q.Proposal.Mechanism)
	if !ok {
		return rwm.Prediction{}, fmt.Errorf("%w: unknown solution %q on %s", rwm.ErrBadPrediction, q.Proposal.Mechanism, q.Task.ID)
	}
	return rwm.Prediction{Gain: math.Pow(s, d.Power), Valid: true, Reason: "scripted verdict"}, nil
}

// Memo runs each distinct (task, code) once on the grader and remembers
// the outcome (the solutions are deterministic, so a second run would
// measure the same); it also records which draws (groups) it executed.
// Safe for concurrent use.
type Memo struct {
	Exec builder.Executor

	mu      sync.Mutex
	done    map[string]*memoEntry
	anchors map[string]bool
	runs    int
}

type memoEntry struct {
	once sync.Once
	out  builder.Outcome
	err  error
}

var _ builder.Executor = (*Memo)(nil)

// Execute implements builder.Executor.
func (m *Memo) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	m.mu.Lock()
	if m.done == nil {
		m.done, m.anchors = map[string]*memoEntry{}, map[string]bool{}
	}
	m.anchors[j.Task.ID+"/"+j.Proposal.Params["draw"]] = true
	k := truthKey(j.Task.ID, j.Proposal.Text)
	e, ok := m.done[k]
	if !ok {
		e = &memoEntry{}
		m.done[k] = e
	}
	m.mu.Unlock()
	e.once.Do(func() {
		m.mu.Lock()
		m.runs++
		m.mu.Unlock()
		e.out, e.err = m.Exec.Execute(ctx, j)
	})
	if e.err != nil { // not remembered: a later call runs again
		m.mu.Lock()
		if m.done[k] == e {
			delete(m.done, k)
		}
		m.mu.Unlock()
	}
	out := e.out
	out.Seeds = []uint64{j.Seed}
	return out, e.err
}

// Anchored reports whether the group (task, draw) was executed.
func (m *Memo) Anchored(task, draw string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.anchors[task+"/"+draw]
}

// Runs returns the number of real grader runs made.
func (m *Memo) Runs() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs
}

// taskIDs lists the IDs of ts.
func taskIDs(ts []records.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// TextCache remembers a world model's predictions by task and solution
// code (rwm.Cache keys by the proposal's canonical key, which leaves out
// the text and here includes the draw tag). Errors are not remembered.
// Safe for concurrent use.
type TextCache struct {
	Inner rwm.WorldModel

	mu   sync.Mutex
	seen map[string]*cacheEntry
}

type cacheEntry struct {
	once sync.Once
	p    rwm.Prediction
	err  error
}

// Predict implements rwm.WorldModel.
func (c *TextCache) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	if err := ctx.Err(); err != nil {
		return rwm.Prediction{}, fmt.Errorf("wmrl-verdict: %w", err)
	}
	k := truthKey(q.Task.ID, q.Proposal.Text)
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]*cacheEntry{}
	}
	e, ok := c.seen[k]
	if !ok {
		e = &cacheEntry{}
		c.seen[k] = e
	}
	c.mu.Unlock()
	e.once.Do(func() { e.p, e.err = c.Inner.Predict(ctx, q) })
	if e.err != nil {
		c.mu.Lock()
		if c.seen[k] == e {
			delete(c.seen, k)
		}
		c.mu.Unlock()
	}
	return e.p, e.err
}
