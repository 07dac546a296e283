package rwmtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Options tunes Run for a backend.
type Options struct {
	// Deterministic requires the same query to give the same prediction
	// (ignoring Usage) on repeated and concurrent calls. Set it for
	// deterministic models (the embedded model, a temperature-0 server
	// scripted by a test).
	Deterministic bool
	// SkipContext skips the context-sensitivity check. Only for backends
	// whose answers cannot depend on the records (a scripted test server
	// that answers the same whatever the prompt); a real world model must
	// pass it (METHOD.md §1 Research World Model: records are its only
	// calibration).
	SkipContext bool
	// Parallel is the number of goroutines of the concurrency check;
	// 0 means 8.
	Parallel int
	// Timeout bounds each Predict call of the suite; 0 means 30s. It is a
	// guard against a hung backend, not a speed requirement.
	Timeout time.Duration
}

func (o Options) parallel() int {
	if o.Parallel <= 0 {
		return 8
	}
	return o.Parallel
}

func (o Options) timeout() time.Duration {
	if o.Timeout <= 0 {
		return 30 * time.Second
	}
	return o.Timeout
}

// IgnoreUsage is a cmp option that ignores Prediction.Usage, which records
// cost rather than content (a cache hit and a fresh call differ only there).
var IgnoreUsage = cmpopts.IgnoreFields(rwm.Prediction{}, "Usage")

// Run runs the conformance suite against world models made by newModel,
// each check as a subtest on a fresh model:
//
//   - validity: every prediction is finite and, with an interval,
//     Low ≤ Gain ≤ High (Prediction.Validate); the suite's queries are
//     ordinary proposals, which must come back Valid;
//   - invalid queries: a query failing Query.Validate gives an error
//     wrapping records.ErrInvalid, never a prediction;
//   - cancellation: a done ctx gives an error wrapping context.Canceled
//     (or context.DeadlineExceeded for an expired deadline);
//   - determinism (Options.Deterministic): the same query twice gives the
//     same prediction;
//   - context sensitivity (unless Options.SkipContext): adding strongly
//     informative real records of the same task and proposal moves the
//     prediction toward them, upwards and downwards;
//   - concurrent use: Options.Parallel goroutines share one model (run the
//     suite with -race); with Deterministic they agree with a sequential
//     pass.
func Run(t *testing.T, newModel func(t *testing.T) rwm.WorldModel, opts Options) {
	t.Helper()
	for _, c := range checks(opts) {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newModel(t), opts) })
	}
}

// tb is the part of testing.TB the checks use, so that the suite's own
// tests can run a check against a broken model and see it fail.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	FailNow()
}

type check struct {
	name string
	fn   func(t tb, m rwm.WorldModel, opts Options)
}

// checks lists the checks that opts enables, in order.
func checks(opts Options) []check {
	cs := []check{
		{"Validity", testValidity},
		{"InvalidQuery", testInvalid},
		{"Cancellation", testCancel},
	}
	if opts.Deterministic {
		cs = append(cs, check{"Determinism", testDeterminism})
	}
	if !opts.SkipContext {
		cs = append(cs, check{"ContextSensitivity", testContext})
	}
	return append(cs, check{"Concurrent", testConcurrent})
}

// Task returns a valid training task of the suite, numbered i: tasks share
// the family "fam-a" for even i and "fam-b" for odd i; all are measured in
// bits per byte with σ_e = 0.004.
func Task(i int) records.Task {
	fam := "fam-a"
	if i%2 == 1 {
		fam = "fam-b"
	}
	return records.Task{
		ID: fmt.Sprintf("task-%d", i), Family: fam, Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 1.5 + 0.01*float64(i), SeedNoise: 0.004, Budget: 200,
		Description: "a conformance-suite task",
	}
}

// Proposals returns the suite's ordinary (valid, changing) proposals.
func Proposals() []records.Proposal {
	return []records.Proposal{
		{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}},
		{Mechanism: "lr-scale", Params: map[string]string{"factor": "0.5"}},
		{Mechanism: "warmup", Params: map[string]string{"steps": "50"}},
		{Mechanism: "norm", Params: map[string]string{"kind": "rmsnorm"}},
		{Mechanism: "dropout", Params: map[string]string{"p": "0.1"}, Text: "regularise; ``` ignore this fence"},
	}
}

// Evidence returns n real records spread over the suite's tasks and
// proposals with gains drawn deterministically from [-3σ, +3σ]; record i
// has seed i.
func Evidence(n int) records.Evidence {
	ps := Proposals()
	rs := make([]records.Record, n)
	for i := range rs {
		task := Task(i % 4)
		// A fixed, irregular sequence in [-3, 3] σ units.
		z := 3 * math.Sin(1.7*float64(i)+0.3)
		gain := z * task.SeedNoise
		rs[i] = records.Record{
			Task: task, Proposal: ps[(i/4)%len(ps)], Gain: gain, Loss: task.RefLoss - gain,
			Source: records.Real, Seeds: []uint64{uint64(i)},
		}
	}
	ev, err := records.NewEvidence(rs...)
	if err != nil {
		panic("rwmtest: " + err.Error())
	}
	return ev
}

func predict(t tb, m rwm.WorldModel, opts Options, q rwm.Query) rwm.Prediction {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opts.timeout())
	defer cancel()
	p, err := m.Predict(ctx, q)
	require.NoError(t, err, "Predict(%s, %s, %d records)", q.Task.ID, q.Proposal.Key(), q.Evidence.Len())
	require.NoError(t, p.Validate(), "Predict(%s, %s)", q.Task.ID, q.Proposal.Key())
	return p
}

func testValidity(t tb, m rwm.WorldModel, opts Options) {
	for _, n := range []int{0, 1, 12} {
		ev := Evidence(n)
		for i, p := range Proposals() {
			q := rwm.Query{Task: Task(i), Proposal: p, Evidence: ev}
			pred := predict(t, m, opts, q)
			require.True(t, pred.Valid, "ordinary proposal %s with %d records judged invalid: %s", p.Key(), n, pred.Reason)
			for _, v := range []float64{pred.Gain, pred.Low, pred.High} {
				require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "non-finite number in %+v", pred)
			}
			if pred.HasInterval {
				require.LessOrEqual(t, pred.Low, pred.Gain)
				require.LessOrEqual(t, pred.Gain, pred.High)
			}
		}
	}
}

func testInvalid(t tb, m rwm.WorldModel, opts Options) {
	good := rwm.Query{Task: Task(0), Proposal: Proposals()[0], Evidence: Evidence(3)}
	noID := good
	noID.Task.ID = ""
	noNoise := good
	noNoise.Task.SeedNoise = 0
	nanRef := good
	nanRef.Task.RefLoss = math.NaN()
	noMech := good
	noMech.Proposal = records.Proposal{Params: map[string]string{"factor": "2"}}
	infParam := good
	infParam.Proposal = records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "+Inf"}}
	for name, q := range map[string]rwm.Query{
		"empty task ID": noID, "zero seed noise": noNoise, "NaN reference loss": nanRef,
		"empty mechanism": noMech, "infinite parameter": infParam,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), opts.timeout())
		p, err := m.Predict(ctx, q)
		cancel()
		require.ErrorIs(t, err, records.ErrInvalid, "%s: got prediction %+v", name, p)
	}
}

func testCancel(t tb, m rwm.WorldModel, opts Options) {
	q := rwm.Query{Task: Task(1), Proposal: Proposals()[2], Evidence: Evidence(5)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := m.Predict(ctx, q)
	require.ErrorIs(t, err, context.Canceled)

	dctx, dcancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer dcancel()
	_, err = m.Predict(dctx, q)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// The model still works after cancelled calls.
	predict(t, m, opts, q)
	// And a cancelled call after a successful one still reports the
	// cancellation (a cache must not answer a done ctx).
	_, err = m.Predict(ctx, q)
	require.ErrorIs(t, err, context.Canceled)
}

func testDeterminism(t tb, m rwm.WorldModel, opts Options) {
	ev := Evidence(10)
	for i, p := range Proposals() {
		q := rwm.Query{Task: Task(i), Proposal: p, Evidence: ev}
		a := predict(t, m, opts, q)
		b := predict(t, m, opts, q)
		if diff := cmp.Diff(a, b, IgnoreUsage); diff != "" {
			t.Errorf("same query %s twice gave different predictions (-first +second):\n%s", p.Key(), diff)
		}
	}
}

func testContext(t tb, m rwm.WorldModel, opts Options) {
	task := Task(2)
	prop := Proposals()[3]
	base := Evidence(8)
	q0 := rwm.Query{Task: task, Proposal: prop, Evidence: base}
	p0 := predict(t, m, opts, q0)
	require.True(t, p0.Valid, "baseline prediction invalid: %s", p0.Reason)
	for _, dir := range []float64{+1, -1} {
		// Three seeds of the exact same task and proposal, 10 σ_e away from
		// the baseline prediction.
		target := p0.Gain + dir*10*task.SeedNoise
		var rs []records.Record
		for s := range 3 {
			rs = append(rs, records.Record{
				Task: task, Proposal: prop, Gain: target, Loss: task.RefLoss - target,
				Source: records.Real, Seeds: []uint64{uint64(1000 + s)},
			})
		}
		ev, err := base.Add(rs...)
		require.NoError(t, err)
		p1 := predict(t, m, opts, rwm.Query{Task: task, Proposal: prop, Evidence: ev})
		require.True(t, p1.Valid, "prediction with informative records invalid: %s", p1.Reason)
		require.Less(t, math.Abs(p1.Gain-target), math.Abs(p0.Gain-target),
			"three real records at gain %g did not move the prediction %g toward them (now %g)", target, p0.Gain, p1.Gain)
	}
}

func testConcurrent(t tb, m rwm.WorldModel, opts Options) {
	var queries []rwm.Query
	evs := []records.Evidence{Evidence(0), Evidence(6), Evidence(15)}
	for i, p := range Proposals() {
		for j, ev := range evs {
			queries = append(queries, rwm.Query{Task: Task(i + j), Proposal: p, Evidence: ev})
		}
	}
	var want []rwm.Prediction
	if opts.Deterministic {
		for _, q := range queries {
			want = append(want, predict(t, m, opts, q))
		}
	}
	n := opts.parallel()
	got := make([][]rwm.Prediction, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), opts.timeout())
			defer cancel()
			got[g] = make([]rwm.Prediction, len(queries))
			for k := range queries {
				// Each goroutine walks the queries from a different start,
				// so identical queries overlap in time.
				i := (k + g) % len(queries)
				p, err := m.Predict(ctx, queries[i])
				if err == nil {
					err = p.Validate()
				}
				if err != nil {
					errs[g] = fmt.Errorf("goroutine %d, query %d: %w", g, i, err)
					return
				}
				got[g][i] = p
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	if opts.Deterministic {
		for g := range n {
			if diff := cmp.Diff(want, got[g], IgnoreUsage); diff != "" {
				t.Errorf("goroutine %d disagrees with the sequential pass (-want +got):\n%s", g, diff)
			}
		}
	}
}
