package buildertest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
)

// Func adapts a function to builder.Executor, for one-off fakes.
type Func func(ctx context.Context, j builder.Job) (builder.Outcome, error)

// Execute calls f.
func (f Func) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) { return f(ctx, j) }

// Scripted is a fake Executor for other packages' tests: it runs each job
// in process as its Spec asks, with the loss of Quadratic, and classifies
// failures exactly as the subprocess protocol does. It counts its calls. It
// is safe for concurrent use; the zero value is ready.
type Scripted struct {
	mu    sync.Mutex
	calls int
	seen  map[string]int
}

var _ builder.Executor = (*Scripted)(nil)

// Calls returns how many times Execute was called.
func (s *Scripted) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// CallsFor returns how many times Execute was called for j's (task, key,
// seed).
func (s *Scripted) CallsFor(j builder.Job) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id(j)]
}

func id(j builder.Job) string {
	return fmt.Sprintf("%s\x00%s\x00%d", j.Task.ID, j.Proposal.Key(), j.Seed)
}

// Execute implements builder.Executor.
func (s *Scripted) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	s.mu.Lock()
	s.calls++
	if s.seen == nil {
		s.seen = make(map[string]int)
	}
	s.seen[id(j)]++
	n := s.seen[id(j)]
	s.mu.Unlock()

	if ctx.Err() != nil {
		return builder.DoneOutcome(ctx, j, records.Cost{}, "")
	}
	spec, err := ParseSpec(j.Spec)
	if err != nil {
		return builder.Outcome{}, &builder.RunError{Class: builder.ErrFailed, Reason: "bad spec", Err: err}
	}
	if spec.Times > 0 && n > spec.Times {
		spec.Behaviour = OK
	}
	log := "scripted: " + j.Proposal.Key() + "\n" + TextLine(j.Proposal.Text) + "\n"
	start := time.Now()
	measured := func() records.Cost {
		w := time.Since(start).Seconds()
		return records.Cost{WallSeconds: w, DeviceSeconds: w * float64(max(j.Slots, 1))}
	}
	switch spec.Behaviour {
	case "", OK:
		if spec.SleepMS > 0 {
			t := time.NewTimer(time.Duration(spec.SleepMS) * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return builder.DoneOutcome(ctx, j, measured(), log)
			}
		}
		loss := Quadratic(j.Task, j.Proposal, j.Seed)
		return builder.Result{Loss: &loss, Seeds: []uint64{j.Seed}}.Outcome(j, measured(), log)
	case Hang:
		<-ctx.Done()
		return builder.DoneOutcome(ctx, j, measured(), log)
	case Crash:
		return builder.Outcome{Cost: measured(), Log: log}, builder.ExitError(1, "", log)
	case Transient:
		return builder.Outcome{Cost: measured(), Log: log}, builder.ExitError(builder.ExitTransient, "", log)
	case Infeasible:
		e := builder.ExitError(builder.ExitInfeasible, spec.Reason, log)
		return builder.Outcome{Infeasible: e.Reason, Seeds: []uint64{j.Seed}, Cost: measured(), Log: log}, e
	case Garbage, NaN:
		body := "this is not JSON {"
		if spec.Behaviour == NaN {
			body = `{"loss": NaN}`
		}
		_, perr := builder.ParseResult([]byte(body))
		return builder.Outcome{Cost: measured(), Log: log},
			&builder.RunError{Class: builder.ErrFailed, Reason: "parse result", Log: log, Err: perr}
	}
	panic("buildertest: unreachable behaviour " + spec.Behaviour)
}
