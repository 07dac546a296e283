package openai

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// bpbTask has b_e = 1.5 BPB and σ_e = 0.004, so the absurdity bound
// MaxAbsGainSigmas·σ_e is 0.2.
var bpbTask = records.Task{ID: "t", Family: "f", Split: records.Train, Metric: records.BitsPerByte, RefLoss: 1.5, SeedNoise: 0.004, Budget: 200}

func TestParsePrediction(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    rwm.Prediction
		wantErr error
	}{
		{"schema answer", `{"gain": 0.012, "q10": -0.002, "q90": 0.02, "valid": true, "reason": "warmup helps"}`,
			rwm.Prediction{Gain: 0.012, Low: -0.002, High: 0.02, HasInterval: true, Valid: true, Reason: "warmup helps"}, nil},
		{"prose and code fence", "I think so.\n```json\n{\"gain\": -0.01, \"q10\": -0.02, \"q90\": 0, \"valid\": true, \"reason\": \"{braces} in text\"}\n```",
			rwm.Prediction{Gain: -0.01, Low: -0.02, High: 0, HasInterval: true, Valid: true, Reason: "{braces} in text"}, nil},
		{"valid as string", `{"gain": 0.004, "q10": 0, "q90": 1e-2, "valid": "true"}`,
			rwm.Prediction{Gain: 0.004, Low: 0, High: 0.01, HasInterval: true, Valid: true}, nil},
		{"gain as numeric string", `{"gain": "0.004", "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"q10 as numeric string", `{"gain": 0.004, "q10": "0", "q90": 0.01, "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"q90 as numeric string", `{"gain": 0.004, "q10": 0, "q90": "1e-2", "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"hex float string", `{"gain": "0x1p-8", "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"padded numeric string", `{"gain": " 0.004 ", "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"no interval", `{"gain": 0.001, "valid": true, "reason": "r"}`,
			rwm.Prediction{Gain: 0.001, Valid: true, Reason: "r"}, nil},
		{"invalid needs no numbers", `{"valid": false, "reason": "cannot build"}`,
			rwm.Prediction{Valid: false, Reason: "cannot build"}, nil},
		{"invalid ignores junk numbers", `{"valid": false, "gain": "NaN", "reason": "x"}`,
			rwm.Prediction{Valid: false, Reason: "x"}, nil},
		{"edge of the bound", `{"gain": 0.2, "valid": true}`, rwm.Prediction{Gain: 0.2, Valid: true}, nil},
		{"empty", "   ", rwm.Prediction{}, ErrNoJSON},
		{"prose only", "I cannot predict this.", rwm.Prediction{}, ErrNoJSON},
		{"NaN literal is not JSON", `{"gain": NaN, "valid": true}`, rwm.Prediction{}, ErrNoJSON},
		{"truncated", `{"gain": 0.01, "q10": 0.0, "q9`, rwm.Prediction{}, ErrNoJSON},
		{"missing gain", `{"valid": true, "reason": "r"}`, rwm.Prediction{}, ErrMissingField},
		{"null gain", `{"gain": null, "valid": true}`, rwm.Prediction{}, ErrMissingField},
		{"missing valid", `{"gain": 0.01}`, rwm.Prediction{}, ErrMissingField},
		{"lone q10", `{"gain": 0.01, "q10": 0, "valid": true}`, rwm.Prediction{}, ErrMissingField},
		{"NaN string", `{"gain": "NaN", "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"infinity string", `{"gain": "-Inf", "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"overflow", `{"gain": 1e999, "valid": true}`, rwm.Prediction{}, ErrNotFinite},
		// 0.25 > 50·0.004 = 0.2
		{"beyond 50 sigma", `{"gain": 0.25, "valid": true}`, rwm.Prediction{}, ErrAbsurd},
		{"q90 beyond 50 sigma", `{"gain": 0.1, "q10": 0, "q90": 0.3, "valid": true}`, rwm.Prediction{}, ErrAbsurd},
		{"unit mistake", `{"gain": 12, "valid": true}`, rwm.Prediction{}, ErrAbsurd},
		{"interval order", `{"gain": 0.01, "q10": 0.02, "q90": 0.03, "valid": true}`, rwm.Prediction{}, ErrInterval},
		{"gain as bool", `{"gain": true, "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"gain as word", `{"gain": "large", "valid": true}`, rwm.Prediction{}, ErrFieldType},
		{"valid as number", `{"gain": 0.01, "valid": 1}`, rwm.Prediction{}, ErrFieldType},
		{"reason as number", `{"gain": 0.01, "valid": true, "reason": 3}`, rwm.Prediction{}, ErrFieldType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePrediction(tt.content, bpbTask)
			if tt.wantErr != nil {
				requireAnswerError(t, err, tt.wantErr)
				var pe *PredictionError
				require.ErrorAs(t, err, &pe)
				require.Equal(t, rwm.Prediction{}, got, "an error never comes with a silent zero prediction")
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParsePrediction mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePredictionGainAboveRefLoss(t *testing.T) {
	// b_e = 0.05 with σ_e = 0.01: the 50σ bound is 0.5, but a gain of 0.06
	// would mean a loss of −0.01.
	task := bpbTask
	task.RefLoss, task.SeedNoise = 0.05, 0.01
	_, err := ParsePrediction(`{"gain": 0.06, "valid": true}`, task)
	require.ErrorIs(t, err, ErrAbsurd)
	p, err := ParsePrediction(`{"gain": -0.3, "valid": true}`, task)
	require.NoError(t, err, "a large loss increase is believable")
	require.Equal(t, -0.3, p.Gain)
}

// maxErrorLen bounds an answer's error text: the answer clipped to 200
// bytes and a detail clipped as much, each at most 4 bytes a byte once
// quoted, and the package's own words.
const maxErrorLen = 2048

func FuzzParsePrediction(f *testing.F) {
	for _, s := range []string{
		`{"gain": 0.012, "q10": -0.002, "q90": 0.02, "valid": true, "reason": "ok"}`,
		`text {"gain": "0.01", "valid": "true"} more`,
		`{"valid": false, "reason": "no"}`,
		`{"gain": NaN, "valid": true}`,
		`{"gain": "Infinity", "valid": true}`,
		`{"gain": 1e400, "valid": true}`,
		`{"gain": 0.01, "q10": 0.02, "q90": 0.0, "valid": true}`,
		`{{{"gain":`,
		`{"gain": -0, "q10": -0, "q90": 0, "valid": true}`,
		`{"gain": "0x1p-8", "valid": true}`,
		`{"gain": 0.01, "q10": "-0x1.8p-7", "q90": 0.02, "valid": true}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrediction(s, bpbTask)
		if err != nil {
			if errors.Is(err, rwm.ErrBadPrediction) == errors.Is(err, ErrUnreadable) {
				t.Fatalf("ParsePrediction(%q) error %v wraps not exactly one of rwm.ErrBadPrediction and ErrUnreadable", s, err)
			}
			if n := len(err.Error()); n > maxErrorLen {
				t.Fatalf("ParsePrediction of %d bytes: error of %d bytes, want ≤ %d", len(s), n, maxErrorLen)
			}
			return
		}
		if p.Valid {
			// Every number read was written as a JSON number.
			obj, err := oaichat.OneJSONObject(s)
			if err != nil {
				t.Fatalf("ParsePrediction(%q) accepted an answer without one object: %v", s, err)
			}
			var fields map[string]any
			dec := json.NewDecoder(strings.NewReader(obj))
			dec.UseNumber()
			if err := dec.Decode(&fields); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"gain", "q10", "q90"} {
				if v, ok := fields[name]; ok && v != nil {
					if _, num := v.(json.Number); !num {
						t.Fatalf("ParsePrediction(%q) read %s = %#v, not a JSON number", s, name, v)
					}
				}
			}
		}
		if verr := p.Validate(); verr != nil {
			t.Fatalf("ParsePrediction(%q) = %+v fails Validate: %v", s, p, verr)
		}
		limit := MaxAbsGainSigmas * bpbTask.SeedNoise
		for _, v := range []float64{p.Gain, p.Low, p.High} {
			if math.IsNaN(v) || math.Abs(v) > limit {
				t.Fatalf("ParsePrediction(%q) accepted %g", s, v)
			}
		}
		if !p.Valid && (p.Gain != 0 || p.HasInterval) {
			t.Fatalf("ParsePrediction(%q) invalid prediction with numbers %+v", s, p)
		}
	})
}
