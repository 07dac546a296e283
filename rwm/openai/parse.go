package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// MaxAbsGainSigmas bounds a believable gain: |gain| (and |q10|, |q90|) above
// MaxAbsGainSigmas·σ_e is absurd. Library choice: the paper's best
// proposals gained about 7σ_e on average (METHOD.md §1 Headline results);
// 50σ_e leaves ample room for real surprises and rejects unit mistakes
// (an answer in 10⁻³ BPB instead of BPB is 1000× too large).
const MaxAbsGainSigmas = 50

// Errors of the package. An answer that cannot be read as a prediction
// (no JSON object, an ambiguous one, a missing field or one of the wrong
// type) wraps ErrUnreadable; an answer that reads but whose prediction is
// unusable (a refusal, a non-finite or absurd number, an inconsistent
// interval) wraps rwm.ErrBadPrediction.
var (
	// ErrNotConfigured: no server or no model name is known.
	ErrNotConfigured = oaichat.ErrNotConfigured
	// ErrUnreadable: the answer cannot be read as a prediction. It is a
	// failure of the world model, not a judgement of the proposal, so it
	// does not wrap rwm.ErrBadPrediction: a caller that scores a bad
	// prediction as an invalid proposal (the loop, the service) gives it
	// no reward instead (the service answers a failure_reason), and a
	// server that answers prose is seen at once instead of training a
	// policy on the invalid penalty.
	ErrUnreadable = errors.New("rwm/openai: unreadable answer")
	// ErrRefused: the model refused (message.refusal or a content filter).
	ErrRefused = fmt.Errorf("rwm/openai: refusal: %w", rwm.ErrBadPrediction)
	// ErrNoJSON: the answer holds no valid JSON object.
	ErrNoJSON = fmt.Errorf("%w: no JSON object in the answer", ErrUnreadable)
	// ErrAmbiguous: the answer is not exactly one JSON object (a JSON-mode
	// answer with anything around its object, a text answer with a second
	// object, such as an echo of injected data), or an object repeats a key.
	ErrAmbiguous = fmt.Errorf("%w: ambiguous answer", ErrUnreadable)
	// ErrMissingField: a required field is absent or null.
	ErrMissingField = fmt.Errorf("%w: missing field", ErrUnreadable)
	// ErrFieldType: a field has the wrong JSON type.
	ErrFieldType = fmt.Errorf("%w: wrong field type", ErrUnreadable)
	// ErrNotFinite: a number is NaN or infinite.
	ErrNotFinite = fmt.Errorf("rwm/openai: non-finite number: %w", rwm.ErrBadPrediction)
	// ErrAbsurd: a number is beyond MaxAbsGainSigmas·σ_e, or a gain above
	// b_e (it would mean a negative loss).
	ErrAbsurd = fmt.Errorf("rwm/openai: absurd magnitude: %w", rwm.ErrBadPrediction)
	// ErrInterval: q10 ≤ gain ≤ q90 does not hold.
	ErrInterval = fmt.Errorf("rwm/openai: inconsistent interval: %w", rwm.ErrBadPrediction)
)

// PredictionError is an unusable answer. Err is one of the package's
// sentinels (so errors.Is(err, ErrUnreadable) or errors.Is(err,
// rwm.ErrBadPrediction) holds).
type PredictionError struct {
	Field   string // the offending field; "" for the whole answer
	Detail  string // what was wrong, for people
	Content string // the answer, clipped to 200 bytes
	Err     error
}

// Error implements error.
func (e *PredictionError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Content != "" {
		fmt.Fprintf(&b, " (answer %q)", e.Content)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *PredictionError) Unwrap() error { return e.Err }

func clip(s string) string { return oaichat.Truncate(s, 200) }

// ParsePrediction reads a free-text answer in the format of UserTemplate:
// the one balanced JSON object of content (inside prose or a code fence;
// a second object, or a repeated key, is ErrAmbiguous: see
// oaichat.OneJSONObject) with
//
//   - "valid": required, a boolean (the strings "true" and "false" are
//     accepted);
//   - "gain": required when valid; a JSON number (a number written as a
//     string, such as "0.01" or "0x1p-3", is ErrFieldType);
//   - "q10" and "q90": both or neither (then HasInterval is false); when
//     present, JSON numbers with q10 ≤ gain ≤ q90;
//   - "reason": optional string, clipped to 500 bytes.
//
// Every number must be finite, within MaxAbsGainSigmas·σ_e of zero, and no
// larger than b_e (a larger gain means a negative loss; checked when
// b_e > 0). An invalid answer (valid false) needs no numbers and returns
// Prediction{Valid: false, Reason}. Other fields are ignored. Every failure
// is a *PredictionError wrapping ErrUnreadable (no object, ambiguous, a
// missing field or one of the wrong type) or rwm.ErrBadPrediction (a
// non-finite or absurd number, an inconsistent interval).
func ParsePrediction(content string, task records.Task) (rwm.Prediction, error) {
	obj, err := oaichat.OneJSONObject(content)
	if err != nil {
		return rwm.Prediction{}, answerError(content, err)
	}
	return parseObject(obj, task)
}

// ParsePredictionJSON reads the answer of a server asked for a JSON format
// (FormatJSONSchema, FormatJSONObject): content must be exactly one JSON
// object, with no repeated key (ErrAmbiguous otherwise; see
// oaichat.OnlyJSONObject); its fields are read as ParsePrediction reads
// them.
func ParsePredictionJSON(content string, task records.Task) (rwm.Prediction, error) {
	obj, err := oaichat.OnlyJSONObject(content)
	if err != nil {
		return rwm.Prediction{}, answerError(content, err)
	}
	return parseObject(obj, task)
}

func answerError(content string, err error) error {
	sentinel, detail := ErrAmbiguous, err.Error()
	if errors.Is(err, oaichat.ErrNoObject) {
		sentinel, detail = ErrNoJSON, "no balanced, valid JSON object"
	}
	if strings.TrimSpace(content) == "" {
		detail = "empty answer"
	}
	return &PredictionError{Detail: detail, Content: clip(content), Err: sentinel}
}

// parseObject reads the fields of an answer's JSON object.
func parseObject(obj string, task records.Task) (rwm.Prediction, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader([]byte(obj)))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return rwm.Prediction{}, &PredictionError{Detail: err.Error(), Content: clip(obj), Err: ErrNoJSON}
	}
	bad := func(field, detail string, err error) (rwm.Prediction, error) {
		return rwm.Prediction{}, &PredictionError{Field: field, Detail: detail, Content: clip(obj), Err: err}
	}
	var p rwm.Prediction
	if raw, ok := present(fields, "reason"); ok {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return bad("reason", "want a string", ErrFieldType)
		}
		p.Reason = oaichat.Truncate(strings.TrimSpace(s), 500)
	}
	raw, ok := present(fields, "valid")
	if !ok {
		return bad("valid", "", ErrMissingField)
	}
	switch strings.ToLower(strings.Trim(string(raw), `"`)) {
	case "true":
		p.Valid = true
	case "false":
		p.Valid = false
		return p, nil
	default:
		return bad("valid", "want true or false, got "+clip(string(raw)), ErrFieldType)
	}
	limit := MaxAbsGainSigmas * task.SeedNoise
	number := func(name string) (float64, bool, error) {
		raw, ok := present(fields, name)
		if !ok {
			return 0, false, nil
		}
		// raw is one valid JSON value; it is a number exactly when it
		// starts with a minus sign or a digit (JSON has no hex, NaN or
		// infinity, and a number in a string is a string).
		text := string(bytes.TrimSpace(raw))
		if text == "" || (text[0] != '-' && (text[0] < '0' || text[0] > '9')) {
			return 0, false, &PredictionError{Field: name, Detail: "want a JSON number, got " + clip(text), Content: clip(obj), Err: ErrFieldType}
		}
		v, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false, &PredictionError{Field: name, Detail: "want a number, got " + clip(text), Content: clip(obj), Err: ErrFieldType}
		}
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			return 0, false, &PredictionError{Field: name, Detail: clip(text), Content: clip(obj), Err: ErrNotFinite}
		case math.Abs(v) > limit:
			return 0, false, &PredictionError{Field: name, Content: clip(obj), Err: ErrAbsurd,
				Detail: fmt.Sprintf("|%g| > %d·σ_e = %g", v, MaxAbsGainSigmas, limit)}
		case task.RefLoss > 0 && v > task.RefLoss:
			return 0, false, &PredictionError{Field: name, Content: clip(obj), Err: ErrAbsurd,
				Detail: fmt.Sprintf("%g > b_e = %g would mean a negative loss", v, task.RefLoss)}
		}
		return v, true, nil
	}
	gain, ok, err := number("gain")
	if err != nil {
		return rwm.Prediction{}, err
	}
	if !ok {
		return bad("gain", "", ErrMissingField)
	}
	lo, hasLo, err := number("q10")
	if err != nil {
		return rwm.Prediction{}, err
	}
	hi, hasHi, err := number("q90")
	if err != nil {
		return rwm.Prediction{}, err
	}
	switch {
	case hasLo != hasHi:
		missing := "q90"
		if !hasLo {
			missing = "q10"
		}
		return bad(missing, "q10 and q90 come together", ErrMissingField)
	case hasLo && !(lo <= gain && gain <= hi):
		return bad("", fmt.Sprintf("q10 %g ≤ gain %g ≤ q90 %g does not hold", lo, gain, hi), ErrInterval)
	}
	p.Gain, p.Low, p.High, p.HasInterval = gain, lo, hi, hasLo
	return p, nil
}

// present returns fields[name] unless it is absent or null.
func present(fields map[string]json.RawMessage, name string) (json.RawMessage, bool) {
	raw, ok := fields[name]
	if !ok || string(bytes.TrimSpace(raw)) == "null" {
		return nil, false
	}
	return raw, true
}
