package verdict

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

// Errors of answer parsing. Each wraps rwm.ErrBadPrediction.
var (
	// ErrNoJSON: the answer is not exactly one JSON object (in a JSON mode:
	// anything around it; in text mode: no object, or two), or is invalid
	// JSON, empty or longer than MaxAnswerBytes.
	ErrNoJSON = fmt.Errorf("rwm/verdict: answer is not one JSON object: %w", rwm.ErrBadPrediction)
	// ErrDuplicateKey: an object repeats a key.
	ErrDuplicateKey = fmt.Errorf("rwm/verdict: duplicate key: %w", rwm.ErrBadPrediction)
	// ErrUnknownField: a field the schema does not have.
	ErrUnknownField = fmt.Errorf("rwm/verdict: unknown field: %w", rwm.ErrBadPrediction)
	// ErrMissingField: a required field is absent or null.
	ErrMissingField = fmt.Errorf("rwm/verdict: missing field: %w", rwm.ErrBadPrediction)
	// ErrFieldType: a field has the wrong type or is out of range.
	ErrFieldType = fmt.Errorf("rwm/verdict: bad field: %w", rwm.ErrBadPrediction)
	// ErrUnknownStatus: a status that is not a rung of the ladder.
	ErrUnknownStatus = fmt.Errorf("rwm/verdict: unknown status: %w", rwm.ErrBadPrediction)
	// ErrUnknownBucket: a quality bucket other than low, fair, mid, high.
	ErrUnknownBucket = fmt.Errorf("rwm/verdict: unknown quality bucket: %w", rwm.ErrBadPrediction)
	// ErrCount: not exactly one prediction per check.
	ErrCount = fmt.Errorf("rwm/verdict: wrong number of predictions: %w", rwm.ErrBadPrediction)
	// ErrRefused: the model refused (message.refusal or a content filter).
	ErrRefused = fmt.Errorf("rwm/verdict: refusal: %w", rwm.ErrBadPrediction)
)

// ParseError is an unusable answer; Err is one of the package's sentinels.
type ParseError struct {
	Field   string // e.g. "predictions[2].status"; "" for the whole answer
	Detail  string
	Content string // the answer, clipped to 200 bytes
	Err     error
}

// Error implements error.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if e.Content != "" {
		fmt.Fprintf(&b, " (answer %q)", e.Content)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *ParseError) Unwrap() error { return e.Err }

// MaxAnswerBytes bounds the answer Parse reads.
const MaxAnswerBytes = 1 << 20

// wire types: pointers tell a missing field from a zero one.
type wireVerdict struct {
	Reason      *string           `json:"reason"`
	Predictions *[]wirePrediction `json:"predictions"`
}

type wirePrediction struct {
	Status     *string  `json:"status"`
	ErrorType  *string  `json:"error_type"`
	ErrorLine  *float64 `json:"error_line"`
	Quality    *string  `json:"quality_bucket"`
	Confidence *float64 `json:"confidence"`
	Feedback   *string  `json:"feedback"`
}

// Parse reads an answer strictly: the whole content (after trimming white
// space and at most one surrounding Markdown code fence) is exactly one
// JSON object (oaichat.OnlyJSONObject) of ResponseSchema's shape, with no
// duplicate keys at any depth (nor two keys equal but for case), no
// unknown fields and every field present and non-null: reason (string),
// predictions (array of exactly checks objects, in battery order) each
// with status (a reward.Status), error_type (string), error_line (an
// integer ≥ 0; 0 = none), quality_bucket (a reward.Bucket), confidence (a
// number in [0, 1]) and feedback (string). Strings are clipped (reason
// and feedback 500 bytes, error_type 100). Every failure is a *ParseError
// wrapping rwm.ErrBadPrediction; the answer is quoted up to 200 bytes.
func Parse(content string, checks int) (Verdict, error) {
	return parse(content, unfence(strings.TrimSpace(content)), oaichat.OnlyJSONObject, checks)
}

// ParseJSON reads the answer to a JSON-schema request as Parse does, but
// the content, without surrounding white space, must be exactly one JSON
// object: a code fence, prose or a second object is ErrNoJSON. Model reads
// its answers in JSON-schema mode with it.
func ParseJSON(content string, checks int) (Verdict, error) {
	return parse(content, content, oaichat.OnlyJSONObject, checks)
}

// ParseText reads a free-text answer (Model's mode after a server rejected
// the schema): exactly one balanced, valid JSON object may appear in it
// (oaichat.OneJSONObject; prose and code fences around it are ignored) and
// is read as Parse reads it. No object is ErrNoJSON; a second one (an echo
// of an object from the solution's comments, an example) is ErrNoJSON too,
// since the text does not say which is the answer; a repeated key is
// ErrDuplicateKey.
func ParseText(content string, checks int) (Verdict, error) {
	return parse(content, content, oaichat.OneJSONObject, checks)
}

// parse extracts the object of body with extract and reads it strictly;
// content is the whole answer, quoted in errors.
func parse(content, body string, extract func(string) (string, error), checks int) (Verdict, error) {
	bad := func(field, detail string, err error) (Verdict, error) {
		return Verdict{}, &ParseError{Field: field, Detail: detail, Content: oaichat.Truncate(content, 200), Err: err}
	}
	if len(body) > MaxAnswerBytes {
		return bad("", fmt.Sprintf("%d bytes, max %d", len(body), MaxAnswerBytes), ErrNoJSON)
	}
	obj, err := extract(body)
	switch {
	case errors.Is(err, oaichat.ErrDuplicateKey):
		return bad("", err.Error(), ErrDuplicateKey)
	case err != nil:
		return bad("", err.Error(), ErrNoJSON)
	}
	if err := oneValue(obj); err != nil {
		switch {
		case errors.Is(err, errDup):
			return bad("", err.Error(), ErrDuplicateKey)
		case errors.Is(err, errKey):
			return bad("", err.Error(), ErrUnknownField)
		}
		return bad("", err.Error(), ErrNoJSON)
	}
	var w wireVerdict
	dec := json.NewDecoder(strings.NewReader(obj))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return bad("", err.Error(), ErrUnknownField)
		}
		return bad("", err.Error(), ErrFieldType)
	}
	return verdictOf(w, checks, bad)
}

// verdictOf checks the decoded fields of w.
func verdictOf(w wireVerdict, checks int, bad func(field, detail string, err error) (Verdict, error)) (Verdict, error) {
	if w.Reason == nil {
		return bad("reason", "", ErrMissingField)
	}
	if w.Predictions == nil {
		return bad("predictions", "", ErrMissingField)
	}
	if len(*w.Predictions) != checks {
		return bad("predictions", fmt.Sprintf("%d predictions for %d checks", len(*w.Predictions), checks), ErrCount)
	}
	v := Verdict{Reason: oaichat.Truncate(*w.Reason, 500), Predictions: make([]Prediction, checks)}
	for i, wp := range *w.Predictions {
		p, field, detail, err := wp.prediction()
		if err != nil {
			return bad(fmt.Sprintf("predictions[%d].%s", i, field), detail, err)
		}
		v.Predictions[i] = p
	}
	return v, nil
}

func (wp wirePrediction) prediction() (p Prediction, field, detail string, err error) {
	switch {
	case wp.Status == nil:
		return p, "status", "", ErrMissingField
	case wp.ErrorType == nil:
		return p, "error_type", "", ErrMissingField
	case wp.ErrorLine == nil:
		return p, "error_line", "", ErrMissingField
	case wp.Quality == nil:
		return p, "quality_bucket", "", ErrMissingField
	case wp.Confidence == nil:
		return p, "confidence", "", ErrMissingField
	case wp.Feedback == nil:
		return p, "feedback", "", ErrMissingField
	}
	p.Status, p.Quality = reward.Status(*wp.Status), reward.Bucket(*wp.Quality)
	switch line, c := *wp.ErrorLine, *wp.Confidence; {
	case !p.Status.Valid():
		return p, "status", fmt.Sprintf("%q", records.Excerpt(*wp.Status)), ErrUnknownStatus
	case !validBucket(p.Quality):
		return p, "quality_bucket", fmt.Sprintf("%q", records.Excerpt(*wp.Quality)), ErrUnknownBucket
	case line < 0 || line != math.Trunc(line) || line > 1e9:
		return p, "error_line", fmt.Sprintf("%g, want an integer ≥ 0", line), ErrFieldType
	case !(c >= 0 && c <= 1):
		return p, "confidence", fmt.Sprintf("%g, want in [0, 1]", c), ErrFieldType
	default:
		p.ErrorLine, p.Confidence = int(line), c
	}
	p.ErrorType = oaichat.Truncate(*wp.ErrorType, 100)
	p.Feedback = oaichat.Truncate(*wp.Feedback, 500)
	return p, "", "", nil
}

func validBucket(b reward.Bucket) bool {
	for _, x := range reward.Buckets() {
		if b == x {
			return true
		}
	}
	return false
}

// unfence removes one surrounding Markdown code fence (```json … ```).
func unfence(s string) string {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	inner := s[3 : len(s)-3]
	nl := strings.IndexByte(inner, '\n')
	if nl < 0 {
		return s
	}
	if lang := strings.TrimSpace(inner[:nl]); lang != "" && lang != "json" {
		return s
	}
	return strings.TrimSpace(inner[nl+1:])
}

// oneValue checks that s is exactly one JSON value with no duplicate keys
// in any object and nothing after it.
func oneValue(s string) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := walk(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value, or text after the object")
	}
	return nil
}

var (
	errDup = errors.New("key repeated:")
	errKey = errors.New("key not in the schema:")
	// schemaKeys are the only object keys of an answer, spelled exactly.
	schemaKeys = map[string]bool{"reason": true, "predictions": true, "status": true, "error_type": true,
		"error_line": true, "quality_bucket": true, "confidence": true, "feedback": true}
)

// maxDepth bounds nesting (the schema needs 3).
const maxDepth = 16

func walk(dec *json.Decoder, depth int) error {
	if depth > maxDepth {
		return errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			if !schemaKeys[key] {
				return fmt.Errorf("%w %q", errKey, records.Excerpt(key))
			}
			// encoding/json matches names without regard to case, so
			// "Status" beside "status" would be a silent duplicate.
			if seen[strings.ToLower(key)] {
				return fmt.Errorf("%w %q", errDup, key)
			}
			seen[strings.ToLower(key)] = true
			if err := walk(dec, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := walk(dec, depth+1); err != nil {
				return err
			}
		}
	}
	_, err = dec.Token() // the closing delimiter
	return err
}
