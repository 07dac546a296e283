package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/lm2lm/lm2lm/records"
)

// Tasks are the fixture tasks that Record draws from.
var Tasks = []records.Task{
	{ID: "ar-prose/0", Family: "ar-prose", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 2.125, SeedNoise: 0.0125, Budget: 400, Description: "tiny AR model on prose"},
	{ID: "ar-code/1", Family: "ar-code", Split: records.Train, Metric: records.BitsPerByte,
		RefLoss: 1.75, SeedNoise: 0.02, Budget: 400, Description: "tiny AR model on code"},
	{ID: "mdm/0", Family: "mdm", Split: records.HeldOut, Metric: records.NatsPerToken,
		RefLoss: 3.5, SeedNoise: 0.05, Budget: 600, Description: "masked diffusion, «held out»"},
}

var (
	mechanisms = []string{"lr-scale", "warmup", "weight-decay", "activation", records.NoChange}
	sources    = []records.Source{records.Real, records.Predicted, records.Synthetic}
	epoch      = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

// Record returns a valid record numbered i (i ≥ 0). Records are varied in
// task, mechanism, parameters, source, seeds, cost and time, and a given i
// always gives the same record; records with different i differ.
func Record(i int) records.Record {
	t := Tasks[i%len(Tasks)]
	m := mechanisms[i%len(mechanisms)]
	p := records.Proposal{Mechanism: m, Text: fmt.Sprintf("try %s, variant %d", m, i)}
	if m != records.NoChange {
		p.Params = map[string]string{"value": strconv.FormatFloat(0.5+float64(i%7)/4, 'g', -1, 64)}
		if i%2 == 0 {
			p.Params["schedule"] = []string{"cosine", "linear", "constant"}[i%3]
		}
	}
	r := records.Record{
		Task:     t,
		Proposal: p,
		Gain:     float64(i%11-5) / 256,
		Source:   sources[i%len(sources)],
		Seeds:    []uint64{uint64(i), uint64(i) * 1_000_003},
		Cost:     records.Cost{DeviceSeconds: float64(i) + 0.5, WallSeconds: 30},
		Time:     epoch.Add(time.Duration(i) * time.Second),
	}
	r.Loss = t.RefLoss - r.Gain
	if i%13 == 12 {
		r.Infeasible = "diverged: loss is NaN at step 17"
		r.Gain, r.Loss = 0, 0
	}
	return r
}

// Run checks the store returned by open against the records.Store
// contract. open is called once per subtest and must return a new, empty
// store; Run closes it at the end of the subtest when it implements
// io.Closer (and expects a nil error).
//
// Records are compared with go-cmp, with empty and nil maps and slices
// treated as equal and times compared by time.Time.Equal, so a store may
// strip monotonic clock readings and change a time's location.
func Run(t *testing.T, open func(t *testing.T) records.Store) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, records.Store)
	}{
		{"Empty", testEmpty},
		{"RoundTrip", testRoundTrip},
		{"Order", testOrder},
		{"Filter", testFilter},
		{"Copies", testCopies},
		{"AllOrNone", testAllOrNone},
		{"Validation", testValidation},
		{"Plausibility", testPlausibility},
		{"EmptyAppend", testEmptyAppend},
		{"Cancelled", testCancelled},
		{"Concurrent", testConcurrent},
		{"Close", testClose},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := open(t)
			if s == nil {
				t.Fatal("storetest: open returned a nil store")
			}
			if cl, ok := s.(io.Closer); ok && c.name != "Close" {
				t.Cleanup(func() {
					if err := cl.Close(); err != nil {
						t.Errorf("Close() = %v, want nil", err)
					}
				})
			}
			c.fn(t, s)
		})
	}
}

// cmpOpts compare records as a store may return them.
var cmpOpts = []cmp.Option{cmpopts.EquateEmpty()}

func scanAll(t *testing.T, s records.Store, f records.Filter) []records.Record {
	t.Helper()
	got, err := s.Scan(context.Background(), f)
	if err != nil {
		t.Fatalf("Scan(%+v) = %v", f, err)
	}
	return got
}

func mustAppend(t *testing.T, s records.Store, rs ...records.Record) {
	t.Helper()
	if err := s.Append(context.Background(), rs...); err != nil {
		t.Fatalf("Append(%d records) = %v", len(rs), err)
	}
}

func wantRecords(t *testing.T, what string, want, got []records.Record) {
	t.Helper()
	if diff := cmp.Diff(want, got, cmpOpts...); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", what, diff)
	}
}

func testEmpty(t *testing.T, s records.Store) {
	if got := scanAll(t, s, records.Filter{}); len(got) != 0 {
		t.Errorf("Scan of a new store = %d records, want 0", len(got))
	}
}

// edgeRecords are valid records at the edges of what a store must keep.
func edgeRecords() []records.Record {
	base := Record(0)
	var out []records.Record
	add := func(f func(r *records.Record)) {
		r := Record(len(out) + 1)
		r.Task = base.Task
		f(&r)
		out = append(out, r)
	}
	add(func(r *records.Record) { r.Time = time.Now() }) // carries a monotonic reading
	add(func(r *records.Record) {
		r.Time = time.Date(2025, 12, 31, 23, 59, 59, 123456789, time.FixedZone("X", -(3*3600+30*60)))
	})
	add(func(r *records.Record) { r.Time = time.Time{} })
	add(func(r *records.Record) {
		r.Proposal = records.Proposal{Mechanism: "Act\tFn", Text: "line one\nline \"two\"\r\n\x00 <b>&</b> ✓ 🙂 \u2028",
			Params: map[string]string{"a,b": "c=d", "{x}": "\"q\"", "ü": "1e-3"}}
		r.Task.Description = "multi\nline"
	})
	add(func(r *records.Record) {
		r.Proposal.Params = map[string]string{}
		r.Seeds = []uint64{}
	})
	add(func(r *records.Record) {
		r.Seeds = []uint64{0, math.MaxUint64, 1 << 63}
		// Extreme numbers round-trip; as a prediction, since no real run
		// measures them (a store refuses an implausible real record).
		r.Source = records.Predicted
		r.Gain, r.Loss = math.MaxFloat64, -math.MaxFloat64
		r.Cost = records.Cost{DeviceSeconds: math.SmallestNonzeroFloat64, WallSeconds: 1e300, FLOPs: 6.02e23, Money: 0.1}
	})
	add(func(r *records.Record) { r.Gain, r.Loss = math.Copysign(0, -1), 1.0/3 })
	add(func(r *records.Record) { r.Infeasible = "build failed: «patch» rejected"; r.Gain, r.Loss = 0, 0 })
	return out
}

func testRoundTrip(t *testing.T, s records.Store) {
	edge := edgeRecords()
	var want []records.Record
	for i := range 10 {
		want = append(want, Record(i))
	}
	want = append(want, edge...)
	mustAppend(t, s, want[:10]...)
	mustAppend(t, s, want[10:]...)
	wantRecords(t, "Scan(Filter{})", want, scanAll(t, s, records.Filter{}))
}

func testOrder(t *testing.T, s records.Store) {
	var want []records.Record
	for i := range 20 {
		r := Record(19 - i)
		mustAppend(t, s, r)
		want = append(want, r)
	}
	for b := range 3 {
		var batch []records.Record
		for j := range b + 2 {
			batch = append(batch, Record(100+10*b+j))
		}
		mustAppend(t, s, batch...)
		want = append(want, batch...)
	}
	wantRecords(t, "Scan(Filter{}) order", want, scanAll(t, s, records.Filter{}))
}

func testFilter(t *testing.T, s records.Store) {
	var all []records.Record
	for i := range 60 {
		all = append(all, Record(i))
	}
	mustAppend(t, s, all[:25]...)
	mustAppend(t, s, all[25:]...)
	// A reformatted proposal has the stored key (records.Proposal.Key).
	key := records.Proposal{Mechanism: " LR-Scale ", Params: map[string]string{"VALUE": "0.50", "Schedule": " Cosine"}}.Key()
	if key != all[0].Proposal.Key() {
		t.Fatalf("fixture: reformatted key %q != %q", key, all[0].Proposal.Key())
	}
	tid := Tasks[0].ID
	for _, f := range []records.Filter{
		{},
		{TaskID: tid},
		{TaskID: Tasks[2].ID},
		{Key: key},
		{Key: records.Proposal{Mechanism: records.NoChange}.Key()},
		{Source: records.Real},
		{Source: records.Synthetic},
		{TaskID: tid, Key: key},
		{TaskID: tid, Source: records.Predicted},
		{TaskID: tid, Key: key, Source: records.Real},
		{TaskID: Tasks[1].ID, Key: key},
		{TaskID: "no-such-task"},
		{Key: "no-such-key{}"},
		{Source: "no-such-source"},
	} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			var want []records.Record
			for _, r := range all {
				if f.Match(r) {
					want = append(want, r)
				}
			}
			if f == (records.Filter{TaskID: tid, Key: key}) && len(want) == 0 {
				t.Fatal("fixture: filter by task and key matches nothing")
			}
			wantRecords(t, fmt.Sprintf("Scan(%+v)", f), want, scanAll(t, s, f))
		})
	}
}

func testCopies(t *testing.T, s records.Store) {
	in := Record(2)
	want := Record(2)
	mustAppend(t, s, in)
	// The store must not alias the caller's maps and slices…
	in.Proposal.Params["value"] = "99"
	in.Seeds[0] = 99
	wantRecords(t, "Scan after mutating the appended record", []records.Record{want}, scanAll(t, s, records.Filter{}))
	// …nor hand out its own.
	got := scanAll(t, s, records.Filter{})
	got[0].Proposal.Params["value"] = "98"
	got[0].Seeds[0] = 98
	got[0] = Record(3)
	wantRecords(t, "Scan after mutating a scanned record", []records.Record{want}, scanAll(t, s, records.Filter{}))
}

func invalidRecords() []struct {
	name string
	r    records.Record
} {
	mod := func(f func(r *records.Record)) records.Record {
		r := Record(4)
		f(&r)
		return r
	}
	return []struct {
		name string
		r    records.Record
	}{
		{"NaN gain", mod(func(r *records.Record) { r.Gain = math.NaN() })},
		{"+Inf loss", mod(func(r *records.Record) { r.Loss = math.Inf(1) })},
		{"-Inf cost", mod(func(r *records.Record) { r.Cost.FLOPs = math.Inf(-1) })},
		{"negative cost", mod(func(r *records.Record) { r.Cost.Money = -1 })},
		{"NaN parameter", mod(func(r *records.Record) { r.Proposal.Params = map[string]string{"lr": "NaN"} })},
		{"empty mechanism", mod(func(r *records.Record) { r.Proposal.Mechanism = " \t" })},
		{"empty parameter name", mod(func(r *records.Record) { r.Proposal.Params = map[string]string{" ": "1"} })},
		{"empty task ID", mod(func(r *records.Record) { r.Task.ID = "" })},
		{"unknown split", mod(func(r *records.Record) { r.Task.Split = "validation" })},
		{"unknown metric", mod(func(r *records.Record) { r.Task.Metric = "accuracy" })},
		{"zero seed noise", mod(func(r *records.Record) { r.Task.SeedNoise = 0 })},
		{"NaN reference loss", mod(func(r *records.Record) { r.Task.RefLoss = math.NaN() })},
		{"unknown source", mod(func(r *records.Record) { r.Source = "imagined" })},
		{"empty source", mod(func(r *records.Record) { r.Source = "" })},
	}
}

func testAllOrNone(t *testing.T, s records.Store) {
	first := Record(0)
	mustAppend(t, s, first)
	for _, c := range invalidRecords() {
		batch := []records.Record{Record(1), Record(2), c.r, Record(3)}
		if err := s.Append(context.Background(), batch...); !errors.Is(err, records.ErrInvalid) {
			t.Errorf("Append(valid, valid, %s, valid) = %v, want an error wrapping records.ErrInvalid", c.name, err)
		}
	}
	wantRecords(t, "Scan after rejected batches", []records.Record{first}, scanAll(t, s, records.Filter{}))
}

func testValidation(t *testing.T, s records.Store) {
	for _, c := range invalidRecords() {
		t.Run(c.name, func(t *testing.T) {
			if err := c.r.Validate(); !errors.Is(err, records.ErrInvalid) {
				t.Fatalf("fixture: Validate() = %v, want ErrInvalid", err)
			}
			if err := s.Append(context.Background(), c.r); !errors.Is(err, records.ErrInvalid) {
				t.Errorf("Append(%s) = %v, want an error wrapping records.ErrInvalid", c.name, err)
			}
		})
	}
	if got := scanAll(t, s, records.Filter{}); len(got) != 0 {
		t.Errorf("store holds %d records after invalid appends, want 0", len(got))
	}
}

// implausibleRecords are valid real records that records.Plausible (and
// so records.NewEvidence) refuses: a Store must refuse them at Append.
func implausibleRecords() []struct {
	name string
	r    records.Record
} {
	mod := func(f func(r *records.Record)) records.Record {
		r := Record(4)
		r.Source = records.Real
		f(&r)
		return r
	}
	return []struct {
		name string
		r    records.Record
	}{
		{"negative loss", mod(func(r *records.Record) { r.Loss, r.Gain = -0.5, r.Task.RefLoss+0.5 })},
		{"loss beyond MaxPlausibleLoss", mod(func(r *records.Record) {
			r.Loss, r.Gain = records.MaxPlausibleLoss+1, r.Task.RefLoss-records.MaxPlausibleLoss-1
		})},
		{"gain far from b_e - loss", mod(func(r *records.Record) { r.Gain = r.Task.RefLoss - r.Loss + 1 })},
	}
}

func testPlausibility(t *testing.T, s records.Store) {
	first := Record(0)
	mustAppend(t, s, first)
	for _, c := range implausibleRecords() {
		t.Run(c.name, func(t *testing.T) {
			if err := c.r.Validate(); err != nil {
				t.Fatalf("fixture: Validate() = %v, want nil", err)
			}
			if _, err := records.NewEvidence(c.r); !errors.Is(err, records.ErrImplausible) {
				t.Fatalf("fixture: NewEvidence = %v, want ErrImplausible", err)
			}
			if err := s.Append(context.Background(), c.r); !errors.Is(err, records.ErrImplausible) {
				t.Errorf("Append(%s) = %v, want an error wrapping records.ErrImplausible", c.name, err)
			}
			if err := s.Append(context.Background(), Record(1), c.r); !errors.Is(err, records.ErrImplausible) {
				t.Errorf("Append(valid, %s) = %v, want an error wrapping records.ErrImplausible", c.name, err)
			}
		})
	}
	// The same records, infeasible or synthetic, carry no measurement and
	// are stored.
	inf := implausibleRecords()[0].r
	inf.Infeasible = "diverged"
	syn := implausibleRecords()[0].r
	syn.Source = records.Synthetic
	mustAppend(t, s, inf, syn)
	wantRecords(t, "Scan after refused implausible records", []records.Record{first, inf, syn}, scanAll(t, s, records.Filter{}))
}

func testEmptyAppend(t *testing.T, s records.Store) {
	if err := s.Append(context.Background()); err != nil {
		t.Errorf("Append() with no records = %v, want nil", err)
	}
	if err := s.Append(context.Background(), []records.Record{}...); err != nil {
		t.Errorf("Append(empty slice...) = %v, want nil", err)
	}
	if got := scanAll(t, s, records.Filter{}); len(got) != 0 {
		t.Errorf("store holds %d records after empty appends, want 0", len(got))
	}
}

func testCancelled(t *testing.T, s records.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Append(ctx, Record(0)); !errors.Is(err, context.Canceled) {
		t.Errorf("Append(cancelled ctx) = %v, want an error wrapping context.Canceled", err)
	}
	if _, err := s.Scan(ctx, records.Filter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Scan(cancelled ctx) = %v, want an error wrapping context.Canceled", err)
	}
	dctx, dcancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer dcancel()
	if err := s.Append(dctx, Record(1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Append(expired ctx) = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if got := scanAll(t, s, records.Filter{}); len(got) != 0 {
		t.Errorf("store holds %d records after cancelled appends, want 0", len(got))
	}
}

func testConcurrent(t *testing.T, s records.Store) {
	const writers, appends = 6, 20
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for a := range appends {
				n := 1 + (w+a)%3
				batch := make([]records.Record, n)
				for j := range batch {
					r := Record(w*1000 + a*10 + j)
					r.Proposal.Params = map[string]string{"writer": strconv.Itoa(w), "append": strconv.Itoa(a),
						"part": strconv.Itoa(j), "size": strconv.Itoa(n)}
					batch[j] = r
				}
				if err := s.Append(ctx, batch...); err != nil {
					errs <- fmt.Errorf("writer %d append %d: %w", w, a, err)
					return
				}
			}
		})
	}
	var scanners sync.WaitGroup
	for range 2 {
		scanners.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Scan(ctx, records.Filter{TaskID: Tasks[1].ID}); err != nil {
					errs <- fmt.Errorf("concurrent scan: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	scanners.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got := scanAll(t, s, records.Filter{})
	next := make([]int, writers) // next append expected from each writer
	for i := 0; i < len(got); {
		p := got[i].Proposal.Params
		w, _ := strconv.Atoi(p["writer"])
		a, _ := strconv.Atoi(p["append"])
		n, _ := strconv.Atoi(p["size"])
		if w < 0 || w >= writers || a != next[w] {
			t.Fatalf("record %d is writer %s append %s, want append %d of that writer (order lost)", i, p["writer"], p["append"], next[w])
		}
		// A batch is contiguous and complete.
		for j := range n {
			if i+j >= len(got) {
				t.Fatalf("batch of writer %d append %d cut short at the end", w, a)
			}
			q := got[i+j].Proposal.Params
			if q["writer"] != p["writer"] || q["append"] != p["append"] || q["part"] != strconv.Itoa(j) {
				t.Fatalf("record %d = %v, want part %d of writer %d append %d (batch interleaved)", i+j, q, j, w, a)
			}
		}
		next[w]++
		i += n
	}
	for w, a := range next {
		if a != appends {
			t.Errorf("writer %d: %d appends stored, want %d", w, a, appends)
		}
	}
}

func testClose(t *testing.T, s records.Store) {
	c, ok := s.(io.Closer)
	if !ok {
		t.Skip("store does not implement io.Closer")
	}
	mustAppend(t, s, Record(0))
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if err := s.Append(context.Background(), Record(1)); !errors.Is(err, records.ErrClosed) {
		t.Errorf("Append after Close = %v, want an error wrapping records.ErrClosed", err)
	}
	if _, err := s.Scan(context.Background(), records.Filter{}); !errors.Is(err, records.ErrClosed) {
		t.Errorf("Scan after Close = %v, want an error wrapping records.ErrClosed", err)
	}
}
