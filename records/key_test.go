package records_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/records/storetest"
)

func TestProposalKeySame(t *testing.T) {
	// METHOD.md §1 Reward 3: one change, however its parameters
	// are ordered or formatted, has one key.
	p := func(mech string, kv ...string) records.Proposal {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return records.Proposal{Mechanism: mech, Params: m}
	}
	tests := []struct {
		name string
		a, b records.Proposal
		key  string
	}{
		{"decimal vs exponent", p("lr-scale", "lr", "0.0010"), p("lr-scale", "lr", "1e-3"), "lr-scale{lr=0.001}"},
		{"sign and leading dot", p("lr-scale", "lr", "+.001"), p("lr-scale", "lr", "1E-03"), "lr-scale{lr=0.001}"},
		{"integer forms", p("lr-scale", "factor", "2"), p("lr-scale", "factor", "2.000e0"), "lr-scale{factor=2}"},
		{"negative zero", p("shift", "by", "-0"), p("shift", "by", "0.0"), "shift{by=0}"},
		{"case and spaces in a value", p("activation", "fn", " GELU "), p("activation", "fn", "gelu"), "activation{fn=gelu}"},
		{"inner white space", p("schedule", "kind", "Cosine \t Decay"), p("schedule", "kind", "cosine decay"), "schedule{kind=cosine decay}"},
		{"name case and spaces", p("lr-scale", " Factor ", "2"), p("lr-scale", "factor", "2"), "lr-scale{factor=2}"},
		{"mechanism case and spaces", p("  LR-Scale", "factor", "2"), p("lr-scale", "factor", "2"), "lr-scale{factor=2}"},
		{"parameter order", p("warmup", "steps", "100", "shape", "linear", "from", "0"),
			p("warmup", "from", "0.0", "shape", "Linear", "steps", "1e2"), "warmup{from=0,shape=linear,steps=100}"},
		{"text is ignored", records.Proposal{Mechanism: "none", Text: "keep it"}, records.Proposal{Mechanism: "None", Text: "other words"}, "none{}"},
		{"nil and empty params", records.Proposal{Mechanism: "none"}, records.Proposal{Mechanism: "none", Params: map[string]string{}}, "none{}"},
		{"delimiter in a value", p("m", "a", "1,b=2"), p("m", "a", " 1,B=2 "), `m{a="1,b=2"}`},
		{"delimiter in a mechanism", p("m{a=1}"), p(" M{A=1} "), `"m{a=1}"{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.key, tt.a.Key())
			require.Equal(t, tt.key, tt.b.Key())
		})
	}
}

// TestProposalKeyMapOrder builds the same parameters in many insertion
// orders (and Go randomises map iteration): the key never changes.
func TestProposalKeyMapOrder(t *testing.T) {
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	rng := rand.New(rand.NewPCG(3, 4))
	want := ""
	for range 200 {
		m := map[string]string{}
		for _, i := range rng.Perm(len(names)) {
			m[names[i]] = names[(i+3)%len(names)]
		}
		k := records.Proposal{Mechanism: "m", Params: m}.Key()
		if want == "" {
			want = k
		}
		require.Equal(t, want, k)
	}
	require.Equal(t, "m{a=d,b=e,c=f,d=g,e=h,f=a,g=b,h=c}", want)
}

func TestProposalKeyDifferent(t *testing.T) {
	// Different changes have different keys, including when a value or name
	// holds the key's own delimiters.
	p := func(mech string, kv ...string) records.Proposal {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return records.Proposal{Mechanism: mech, Params: m}
	}
	tests := []struct {
		name string
		a, b records.Proposal
	}{
		{"value", p("lr-scale", "lr", "0.001"), p("lr-scale", "lr", "0.002")},
		{"word value", p("activation", "fn", "gelu"), p("activation", "fn", "relu")},
		{"mechanism", p("lr-scale", "lr", "2"), p("warmup", "lr", "2")},
		{"name", p("m", "a", "1"), p("m", "b", "1")},
		{"extra parameter", p("m", "a", "1"), p("m", "a", "1", "b", "1")},
		{"empty value vs none", p("m"), p("m", "a", "")},
		{"number vs number-like word", p("m", "a", "1e-3"), p("m", "a", "1e-3x")},
		{"comma injection", p("m", "a", "1,b=2"), p("m", "a", "1", "b", "2")},
		{"equals injection", p("m", "a", "b=c"), p("m", "a=b", "c")},
		{"brace injection", p("m", "a", "1}"), p("m", "a", "1")},
		{"mechanism brace injection", p("m{a=1}"), p("m", "a", "1")},
		{"mechanism prefix injection", p("m{a=1,b"), p("m", "a", "1,b")},
		{"quote injection", p("m", "a", `"1"`), p("m", "a", "1")},
		{"quoted twin", p("m", "a", `"x,y"`), p("m", "a", "x,y")},
		{"backslash", p("m", "a", `x\`), p("m", "a", `x\\`)},
		{"zero vs empty", p("m", "a", "0"), p("m", "a", "")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NotEqual(t, tt.a.Key(), tt.b.Key(), "keys of %+v and %+v", tt.a.Params, tt.b.Params)
		})
	}
}

func validRecord() records.Record {
	r := storetest.Record(0)
	r.Source = records.Real
	return r
}

func TestValidate(t *testing.T) {
	mod := func(f func(r *records.Record)) func() error {
		return func() error {
			r := validRecord()
			f(&r)
			return r.Validate()
		}
	}
	state := func(n int, f func(s *records.State)) func() error {
		return func() error {
			s := records.State{Task: validRecord().Task}
			for range n {
				s.History = append(s.History, validRecord())
			}
			if f != nil {
				f(&s)
			}
			return s.Validate()
		}
	}
	tests := []struct {
		name  string
		check func() error
		also  error // a second sentinel the error wraps, if any
	}{
		{"NaN gain", mod(func(r *records.Record) { r.Gain = math.NaN() }), nil},
		{"+Inf gain", mod(func(r *records.Record) { r.Gain = math.Inf(1) }), nil},
		{"-Inf loss", mod(func(r *records.Record) { r.Loss = math.Inf(-1) }), nil},
		{"NaN wall seconds", mod(func(r *records.Record) { r.Cost.WallSeconds = math.NaN() }), nil},
		{"negative FLOPs", mod(func(r *records.Record) { r.Cost.FLOPs = -1 }), nil},
		{"NaN reference loss", mod(func(r *records.Record) { r.Task.RefLoss = math.NaN() }), nil},
		{"Inf seed noise", mod(func(r *records.Record) { r.Task.SeedNoise = math.Inf(1) }), nil},
		{"negative seed noise", mod(func(r *records.Record) { r.Task.SeedNoise = -0.1 }), nil},
		{"negative budget", mod(func(r *records.Record) { r.Task.Budget = -1 }), nil},
		{"empty mechanism", mod(func(r *records.Record) { r.Proposal.Mechanism = "" }), nil},
		{"blank mechanism", mod(func(r *records.Record) { r.Proposal.Mechanism = " \n\t" }), nil},
		{"blank parameter name", mod(func(r *records.Record) { r.Proposal.Params = map[string]string{"  ": "1"} }), nil},
		{"Inf parameter", mod(func(r *records.Record) { r.Proposal.Params = map[string]string{"lr": " -Inf"} }), nil},
		{"NaN parameter", mod(func(r *records.Record) { r.Proposal.Params = map[string]string{"lr": "nan"} }), nil},
		{"colliding parameter names", mod(func(r *records.Record) { r.Proposal.Params = map[string]string{"LR": "1", " lr": "2"} }), nil},
		{"unknown split", mod(func(r *records.Record) { r.Task.Split = "test" }), nil},
		{"empty split", mod(func(r *records.Record) { r.Task.Split = "" }), nil},
		{"unknown metric", mod(func(r *records.Record) { r.Task.Metric = "perplexity" }), nil},
		{"empty task ID", mod(func(r *records.Record) { r.Task.ID = "" }), nil},
		{"unknown source", mod(func(r *records.Record) { r.Source = "guessed" }), nil},
		{"history of 9", state(9, nil), records.ErrHistoryTooBig},
		{"history of 100", state(100, nil), records.ErrHistoryTooBig},
		{"history of another task", state(2, func(s *records.State) { s.History[1].Task.ID = "other" }), nil},
		{"invalid history record", state(3, func(s *records.State) { s.History[2].Gain = math.NaN() }), nil},
		{"state with unknown split", state(0, func(s *records.State) { s.Task.Split = "dev" }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check()
			require.ErrorIs(t, err, records.ErrInvalid)
			require.Contains(t, err.Error(), "records: invalid")
			if tt.also != nil {
				require.ErrorIs(t, err, tt.also)
			}
		})
	}
	// And the edges that are valid.
	for n := 0; n <= records.MaxHistory; n++ {
		require.NoError(t, state(n, nil)(), "history of %d (METHOD.md §1 Vocabulary: 0-8)", n)
	}
	require.NoError(t, mod(func(r *records.Record) { r.Gain, r.Loss = -math.MaxFloat64, 0 })())
	require.NoError(t, mod(func(r *records.Record) { r.Task.Split = records.HeldOut })())
}

func TestEvidence(t *testing.T) {
	real1, real2 := validRecord(), storetest.Record(3)
	real2.Source = records.Real
	pred, syn := storetest.Record(1), storetest.Record(2)
	require.Equal(t, records.Predicted, pred.Source)
	require.Equal(t, records.Synthetic, syn.Source)

	for _, r := range []records.Record{pred, syn} {
		_, err := records.NewEvidence(real1, r)
		require.ErrorIs(t, err, records.ErrNotEvidence)
		_, err = records.Evidence{}.Add(r)
		require.ErrorIs(t, err, records.ErrNotEvidence)
	}
	bad := real1
	bad.Gain = math.Inf(1)
	_, err := records.NewEvidence(bad)
	require.ErrorIs(t, err, records.ErrInvalid)

	ev, err := records.RealOnly([]records.Record{pred, real1, syn, real2})
	require.NoError(t, err)
	require.Equal(t, 2, ev.Len())
	for i := range ev.Len() {
		require.Equal(t, records.Real, ev.At(i).Source)
	}
	_, err = records.RealOnly([]records.Record{bad})
	require.ErrorIs(t, err, records.ErrInvalid)

	// AddReal appends the real records after e's and drops the rest; with
	// none it is e itself; an invalid real record is refused.
	more, err := ev.AddReal(syn, real2, pred, real1)
	require.NoError(t, err)
	require.Equal(t, []records.Record{ev.At(0), ev.At(1), real2, real1}, more.Records())
	same, err := ev.AddReal(pred, syn)
	require.NoError(t, err)
	require.Equal(t, ev.Records(), same.Records())
	_, err = ev.AddReal(syn, bad)
	require.ErrorIs(t, err, records.ErrInvalid)

	// WithoutTask drops exactly the task's records, keeping the others'
	// order; without any it is e itself, and e is left as it was.
	require.Equal(t, real1.Task.ID, real2.Task.ID)
	other, other2 := real1, real2
	other.Task.ID, other2.Task.ID = real1.Task.ID+"-other", real1.Task.ID+"-other"
	mixed, err := records.NewEvidence(real1, other, real2, other2)
	require.NoError(t, err)
	rest := mixed.WithoutTask(real1.Task.ID)
	require.Equal(t, []records.Record{mixed.At(1), mixed.At(3)}, rest.Records())
	require.Equal(t, 4, mixed.Len())
	require.Equal(t, mixed.Fingerprint(), mixed.WithoutTask("no-such-task").Fingerprint())
	want, err := records.NewEvidence(other, other2)
	require.NoError(t, err)
	require.Equal(t, want.Fingerprint(), rest.Fingerprint(), "a fresh fingerprint, not the whole's")
}

func TestEvidenceFingerprint(t *testing.T) {
	var rs []records.Record
	for i := range 12 {
		r := storetest.Record(i)
		r.Source = records.Real
		r.Loss = r.Task.RefLoss - r.Gain // plausible evidence
		rs = append(rs, r)
	}
	fp := func(rs ...records.Record) string {
		t.Helper()
		e, err := records.NewEvidence(rs...)
		require.NoError(t, err)
		return e.Fingerprint()
	}
	base := fp(rs...)
	require.Len(t, base, 32)
	require.Equal(t, base, fp(rs...), "deterministic")

	// Order-independent.
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20 {
		perm := make([]records.Record, len(rs))
		for i, j := range rng.Perm(len(rs)) {
			perm[i] = rs[j]
		}
		require.Equal(t, base, fp(perm...))
	}
	// Text, cost and time are not content; reformatting keeps the key.
	same := append([]records.Record(nil), rs...)
	same[0].Proposal.Text = "other words"
	same[1].Cost.WallSeconds++
	same[2].Time = same[2].Time.Add(1)
	same[3].Proposal.Params = map[string]string{" VALUE": "+1.250"}
	require.Equal(t, rs[3].Proposal.Key(), same[3].Proposal.Key(), "fixture")
	require.Equal(t, base, fp(same...))

	// Content-sensitive.
	for name, f := range map[string]func(r *records.Record){
		"gain by one ulp": func(r *records.Record) { r.Gain = math.Nextafter(r.Gain, 1) },
		"loss":            func(r *records.Record) { r.Loss += 1e-9 },
		"seed":            func(r *records.Record) { r.Seeds = []uint64{r.Seeds[0] + 1} },
		"extra seed":      func(r *records.Record) { r.Seeds = append(r.Seeds, 1) },
		"task":            func(r *records.Record) { r.Task.ID = "other" },
		"reference loss":  func(r *records.Record) { r.Task.RefLoss += 0.01 },
		"seed noise":      func(r *records.Record) { r.Task.SeedNoise *= 2 },
		"proposal":        func(r *records.Record) { r.Proposal.Params = map[string]string{"value": "9"} },
		"infeasible":      func(r *records.Record) { r.Infeasible = "diverged" },
	} {
		changed := append([]records.Record(nil), rs...)
		changed[4].Seeds = append([]uint64(nil), rs[4].Seeds...)
		f(&changed[4])
		require.NotEqual(t, base, fp(changed...), name)
	}
	require.NotEqual(t, base, fp(rs[1:]...), "a record fewer")
	require.NotEqual(t, base, fp(append(rs, rs[0])...), "a duplicate more")
	require.NotEqual(t, fp(), base)
}

// The fingerprint is computed once per evidence and shared by its copies;
// a caller that changes its records after Add changes neither the
// evidence nor its fingerprint; an evidence built anew from the changed
// records has the changed fingerprint; concurrent readers agree (under
// -race).
func TestEvidenceFingerprintMemo(t *testing.T) {
	var rs []records.Record
	for i := range 6 {
		r := storetest.Record(i)
		r.Source = records.Real
		r.Loss = r.Task.RefLoss - r.Gain
		r.Proposal.Params = map[string]string{"value": fmt.Sprint(i)}
		r.Task.Descriptors = map[string]float64{"log_params": float64(i)}
		rs = append(rs, r)
	}
	ev, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	want := ev.Fingerprint()
	cp := ev
	var wg sync.WaitGroup
	got := make([]string, 8)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = cp.Fingerprint() }()
	}
	wg.Wait()
	for _, g := range got {
		require.Equal(t, want, g)
	}
	rs[0].Proposal.Params["value"] = "changed"
	rs[0].Seeds[0]++
	rs[0].Task.Descriptors["log_params"] = 99
	require.Equal(t, want, ev.Fingerprint())
	require.Equal(t, "0", ev.At(0).Proposal.Params["value"], "the evidence holds its own copy")
	require.Equal(t, 0.0, ev.At(0).Task.Descriptors["log_params"])
	other, err := records.NewEvidence(rs...)
	require.NoError(t, err)
	require.NotEqual(t, want, other.Fingerprint())
	more, err := ev.Add(rs[1])
	require.NoError(t, err)
	require.NotEqual(t, want, more.Fingerprint(), "Add's result has a fingerprint of its own")
	require.Equal(t, want, ev.Fingerprint())
}

func BenchmarkEvidenceFingerprint(b *testing.B) {
	var rs []records.Record
	for i := range 300 {
		r := storetest.Record(i)
		r.Source = records.Real
		r.Loss = r.Task.RefLoss - r.Gain
		rs = append(rs, r)
	}
	ev, err := records.NewEvidence(rs...)
	require.NoError(b, err)
	b.Run("first", func(b *testing.B) {
		for b.Loop() {
			fresh, _ := records.NewEvidence(rs...)
			_ = fresh.Fingerprint()
		}
	})
	b.Run("again", func(b *testing.B) {
		for b.Loop() {
			_ = ev.Fingerprint()
		}
	})
}

func TestSimilarity(t *testing.T) {
	type Task = records.Task
	Similarity := records.Similarity
	a := Task{ID: "a", Family: "f"}
	for _, c := range []struct {
		b    Task
		want float64
	}{
		{Task{ID: "a", Family: "f"}, 1},
		{Task{ID: "b", Family: "f"}, 0.5},
		{Task{ID: "c", Family: "g"}, 0},
		{Task{ID: "d"}, 0},
	} {
		if got := Similarity(a, c.b); got != c.want {
			t.Errorf("Similarity(a, %s) = %g, want %g", c.b.ID, got, c.want)
		}
		if Similarity(a, c.b) != Similarity(c.b, a) {
			t.Errorf("Similarity(a, %s) is not symmetric", c.b.ID)
		}
	}
	if Similarity(Task{ID: "x"}, Task{ID: "y"}) != 0 {
		t.Error("two tasks without a family are alike")
	}
}

// A free-form proposal is keyed by its normalised text: rewrapped or
// recased texts are one change, different texts are different changes, and
// its text without parameters is the only valid form.
func TestFreeFormKey(t *testing.T) {
	a := records.Proposal{Mechanism: records.FreeForm, Text: "Add  label smoothing\nof 0.1."}
	b := records.Proposal{Mechanism: " Free_Form ", Text: "add label SMOOTHING of 0.1."}
	c := records.Proposal{Mechanism: records.FreeForm, Text: "Add label smoothing of 0.2."}
	require.True(t, a.IsFreeForm())
	require.Equal(t, a.Key(), b.Key())
	require.NotEqual(t, a.Key(), c.Key())
	require.Regexp(t, `^free_form\{text=sha256:[0-9a-f]{16}\}$`, a.Key())
	require.NoError(t, a.Validate())
	require.ErrorIs(t, records.Proposal{Mechanism: records.FreeForm, Text: "  "}.Validate(), records.ErrInvalid)
	require.ErrorIs(t, records.Proposal{Mechanism: records.FreeForm, Text: "x", Params: map[string]string{"p": "1"}}.Validate(), records.ErrInvalid)
	// Text still plays no part in a catalogue proposal's key.
	require.Equal(t, records.Proposal{Mechanism: "lr-scale", Text: "a"}.Key(), records.Proposal{Mechanism: "lr-scale", Text: "b"}.Key())
}

// Records without Code read as before, and Code survives a round trip
// through JSON.
func TestRecordCodeJSON(t *testing.T) {
	var r records.Record
	require.NoError(t, json.Unmarshal([]byte(`{"task":{"id":"t"},"proposal":{"mechanism":"m"},"gain":1,"loss":2,"source":"real","cost":{},"time":"2026-01-01T00:00:00Z"}`), &r))
	require.Nil(t, r.Code)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.NotContains(t, string(b), `"code"`)
	r.Code = &records.Code{Digest: "sha256:ab", Overlay: "sha256:cd", Diff: "--- a/x\n", Builder: "m"}
	b, err = json.Marshal(r)
	require.NoError(t, err)
	var back records.Record
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, r.Code, back.Code)
	require.ErrorIs(t, records.Code{Digest: "x"}.Validate(), records.ErrInvalid)
}
