package rwmtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/rwm"
)

// fakeT records failures; FailNow stops the check by panicking.
type fakeT struct{ msgs []string }

type failNow struct{}

func (f *fakeT) Helper() {}
func (f *fakeT) Errorf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}
func (f *fakeT) FailNow() { panic(failNow{}) }

// runCheck runs the named check against m and returns its failure
// messages (none = passed).
func runCheck(t *testing.T, name string, m rwm.WorldModel, opts Options) (msgs []string) {
	t.Helper()
	for _, c := range checks(opts) {
		if c.name != name {
			continue
		}
		f := &fakeT{}
		func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(failNow); !ok {
						panic(r)
					}
				}
			}()
			c.fn(f, m, opts)
		}()
		return f.msgs
	}
	t.Fatalf("no check %q enabled by %+v", name, opts)
	return nil
}

// embedded returns the default embedded model, a valid config's.
func embedded() rwm.WorldModel {
	m, err := rwm.NewEmbedded(rwm.DefaultEmbeddedConfig())
	if err != nil {
		panic(err)
	}
	return m
}

// edit wraps m, editing its predictions.
func edit(m rwm.WorldModel, f func(p *rwm.Prediction)) rwm.WorldModel {
	return rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
		p, err := m.Predict(ctx, q)
		f(&p)
		return p, err
	})
}

func TestChecksPassOnEmbedded(t *testing.T) {
	opts := Options{Deterministic: true}
	for _, c := range checks(opts) {
		require.Empty(t, runCheck(t, c.name, embedded(), opts), c.name)
	}
}

func TestChecksCatchBrokenModels(t *testing.T) {
	// Each broken model must fail the check that targets its defect.
	var calls atomic.Int64
	var inFlight atomic.Int64
	tests := []struct {
		check string
		model rwm.WorldModel
	}{
		{"Validity", edit(embedded(), func(p *rwm.Prediction) { p.Gain = math.NaN() })},
		{"Validity", edit(embedded(), func(p *rwm.Prediction) { p.Low = p.High + 1 })},
		{"Validity", edit(embedded(), func(p *rwm.Prediction) { p.Valid = false })},
		{"InvalidQuery", rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
			return rwm.Prediction{Valid: true}, nil // never validates
		})},
		{"Cancellation", rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
			if err := q.Validate(); err != nil {
				return rwm.Prediction{}, err
			}
			return rwm.Prediction{Valid: true}, nil // ignores ctx
		})},
		{"Cancellation", rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
			if ctx.Err() != nil {
				return rwm.Prediction{}, errors.New("cancelled") // does not wrap ctx.Err()
			}
			return rwm.Prediction{Valid: true}, nil
		})},
		{"Determinism", edit(embedded(), func(p *rwm.Prediction) { p.Gain += float64(calls.Add(1)) * 1e-9 })},
		{"ContextSensitivity", &Fixed{Default: rwm.Prediction{Valid: true}}},
		{"ContextSensitivity", edit(embedded(), func(p *rwm.Prediction) { p.Gain = -p.Gain })},
		{"Concurrent", rwm.Func(func(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
			if inFlight.Add(1) > 1 {
				inFlight.Add(-1)
				return rwm.Prediction{}, errors.New("not safe for concurrent use")
			}
			time.Sleep(100 * time.Microsecond)
			inFlight.Add(-1)
			return rwm.Prediction{Valid: true}, nil
		})},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.check, i), func(t *testing.T) {
			msgs := runCheck(t, tt.check, tt.model, Options{Deterministic: true})
			require.NotEmpty(t, msgs, "check %s passed a broken model", tt.check)
			t.Log(strings.Join(msgs, "\n")[:min(200, len(strings.Join(msgs, "\n")))])
		})
	}
}
