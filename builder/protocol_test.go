package builder_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

func TestParseResult(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	for _, c := range []struct {
		name, in string
		want     builder.Result
		bad      bool
	}{
		{"loss", `{"loss": 1.25}`, builder.Result{Loss: f(1.25)}, false},
		{"all", `{"loss": 1, "gain": 0.5, "seeds": [1, 2], "cost": {"device_seconds": 2, "wall_seconds": 1, "money": 0.1}}`,
			builder.Result{Loss: f(1), Gain: f(0.5), Seeds: []uint64{1, 2}, Cost: records.Cost{DeviceSeconds: 2, WallSeconds: 1, Money: 0.1}}, false},
		{"infeasible", `{"infeasible": " diverged "}`, builder.Result{Infeasible: "diverged"}, false},
		{"missing loss", `{"gain": 1}`, builder.Result{}, true},
		{"NaN literal", `{"loss": NaN}`, builder.Result{}, true},
		{"NaN string", `{"loss": "NaN"}`, builder.Result{}, true},
		{"Inf", `{"loss": 1e999}`, builder.Result{}, true},
		{"null loss", `{"loss": null}`, builder.Result{}, true},
		{"unknown field", `{"loss": 1, "los": 2}`, builder.Result{}, true},
		{"trailing", `{"loss": 1} {"loss": 2}`, builder.Result{}, true},
		{"trailing brace", `{"loss": 1}}`, builder.Result{}, true},
		{"trailing bracket", "{\"loss\": 1}\n]\n", builder.Result{}, true},
		{"trailing newline", "{\"loss\": 1}\n", builder.Result{Loss: f(1)}, false},
		{"garbage", `loss=1`, builder.Result{}, true},
		{"empty", ` `, builder.Result{}, true},
		{"negative cost", `{"loss": 1, "cost": {"wall_seconds": -1}}`, builder.Result{}, true},
		{"negative seed", `{"loss": 1, "seeds": [-1]}`, builder.Result{}, true},
		{"array", `[1]`, builder.Result{}, true},
		{"repeated loss", `{"loss": 1.9, "loss": 1.2}`, builder.Result{}, true},
		{"repeated loss, other case", `{"loss": 1.9, "LOSS": 1.2}`, builder.Result{}, true},
		{"repeated seeds, folded s", "{\"loss\": 1, \"seeds\": [1], \"\u017feeds\": [2]}", builder.Result{}, true},
		{"repeated infeasible", `{"infeasible": "x", "infeasible": ""}`, builder.Result{}, true},
		{"repeated cost key", `{"loss": 1, "cost": {"money": 5, "money": 0}}`, builder.Result{}, true},
		{"repeated cost", `{"loss": 1, "cost": {"money": 5}, "cost": {}}`, builder.Result{}, true},
		{"keys after a nested object", `{"loss": 1, "cost": {"money": 1, "flops": 2}, "gain": 0.5, "seeds": []}`,
			builder.Result{Loss: f(1), Gain: f(0.5), Seeds: []uint64{}, Cost: records.Cost{Money: 1, FLOPs: 2}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := builder.ParseResult([]byte(c.in))
			if c.bad {
				require.ErrorIs(t, err, builder.ErrBadResult)
				require.Equal(t, builder.Result{}, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func FuzzParseResult(f *testing.F) {
	for _, s := range []string{`{"loss": 1.25}`, `{"infeasible": "x"}`, `{"loss": NaN}`, `{"loss": 1e308, "gain": -1e308}`, `{"loss": -1e300}`, `{"loss": 1, "gain": 1000}`, `{"loss": 1.4, "gain": 0.1}`,
		`{"loss": 1, "seeds": [18446744073709551615], "cost": {"flops": 1e20}}`, `{"loss": 1}garbage`, `{"loss": 1}}`, `{}`, ``,
		`{"loss": 1.9, "loss": 1.2}`, `{"loss": 1, "Loss": 2}`, `{"loss": 1, "cost": {"flops": 1, "FLOPS": 2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := builder.ParseResult(b)
		if err != nil {
			if !errors.Is(err, builder.ErrBadResult) {
				t.Fatalf("error %v does not wrap ErrBadResult", err)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted %q, which is not one JSON value", b)
		}
		if k, ok := repeatedKey(b); ok {
			t.Fatalf("accepted %q, which repeats key %q", b, k)
		}
		if r.Infeasible == "" && r.Loss == nil {
			t.Fatal("accepted a feasible result without a loss")
		}
		for _, v := range []*float64{r.Loss, r.Gain, &r.Cost.DeviceSeconds, &r.Cost.WallSeconds, &r.Cost.FLOPs, &r.Cost.Money} {
			if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
				t.Fatalf("accepted non-finite %g", *v)
			}
		}
		j := buildertest.Job(buildertest.Spec{})
		o, err := r.Outcome(j, records.Cost{WallSeconds: 1}, "")
		if r.Infeasible != "" {
			if !errors.Is(err, builder.ErrInfeasible) || o.Infeasible == "" {
				t.Fatalf("infeasible result gave %v, %q", err, o.Infeasible)
			}
			return
		}
		if err != nil {
			// Only an implausible measurement is refused, as ErrFailed.
			if !errors.Is(err, records.ErrImplausible) || !errors.Is(err, builder.ErrFailed) || errors.Is(err, builder.ErrTransient) {
				t.Fatalf("result %q: %v", b, err)
			}
			return
		}
		if rec := o.Record(j); rec.Validate() != nil || records.Plausible(rec) != nil {
			t.Fatalf("record of an accepted result is invalid or implausible: %v, %v", rec.Validate(), records.Plausible(rec))
		}
		if lo, hi := j.Task.Metric.Range(); !(o.Loss >= lo && o.Loss <= hi) {
			t.Fatalf("accepted loss %g outside [%g, %g]", o.Loss, lo, hi)
		}
	})
}

func TestResultOutcomeDefaults(t *testing.T) {
	j := buildertest.Job(buildertest.Spec{})
	j.Slots = 2
	loss := 1.25
	o, err := builder.Result{Loss: &loss}.Outcome(j, records.Cost{WallSeconds: 3}, "log")
	require.NoError(t, err)
	// METHOD.md §1 Vocabulary: g = b_e − ℓ = 1.5 − 1.25.
	require.Equal(t, 0.25, o.Gain)
	require.Equal(t, []uint64{j.Seed}, o.Seeds)
	require.Equal(t, records.Cost{WallSeconds: 3, DeviceSeconds: 6}, o.Cost)
	require.Equal(t, "log", o.Log)
}

func TestExitError(t *testing.T) {
	for _, c := range []struct {
		code  int
		class error
	}{{3, builder.ErrInfeasible}, {75, builder.ErrTransient}, {1, builder.ErrFailed}, {2, builder.ErrFailed}, {137, builder.ErrFailed}} {
		e := builder.ExitError(c.code, "", "")
		require.Equal(t, c.class, builder.Class(e), "exit %d", c.code)
	}
	require.Equal(t, "why", builder.ExitError(3, "why", "").Reason)
}

func TestClassAndDoneError(t *testing.T) {
	require.Nil(t, builder.Class(nil))
	require.Equal(t, builder.ErrFailed, builder.Class(errors.New("other")))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := builder.DoneError(ctx, "")
	require.ErrorIs(t, err, builder.ErrCancelled)
	require.ErrorIs(t, err, context.Canceled)
	ctx, cancel = builder.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	err = builder.DoneError(ctx, "")
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorIs(t, err, builder.ErrTimedOut)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, builder.ErrInfeasible, builder.Class(err))
}

// repeatedKey returns a key that an object of the valid JSON text b gives
// twice, compared case-insensitively (strings.EqualFold, as encoding/json
// matches keys to fields), decoding each object into its raw key-value
// pairs: an independent reference for the fuzz target.
func repeatedKey(b []byte) (string, bool) {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return "", false
	}
	var walk func(raw json.RawMessage) (string, bool)
	walk = func(raw json.RawMessage) (string, bool) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch tok {
		case json.Delim('{'):
			var keys []string
			for dec.More() {
				kt, _ := dec.Token()
				k := kt.(string)
				for _, o := range keys {
					if strings.EqualFold(o, k) {
						return k, true
					}
				}
				keys = append(keys, k)
				var sub json.RawMessage
				if dec.Decode(&sub) != nil {
					return "", false
				}
				if r, ok := walk(sub); ok {
					return r, true
				}
			}
		case json.Delim('['):
			for dec.More() {
				var sub json.RawMessage
				if dec.Decode(&sub) != nil {
					return "", false
				}
				if r, ok := walk(sub); ok {
					return r, true
				}
			}
		}
		return "", false
	}
	return walk(b)
}
