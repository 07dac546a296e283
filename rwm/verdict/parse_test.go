package verdict

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/reward"
	"github.com/lm2lm/lm2lm/rwm"
)

func TestParse(t *testing.T) {
	good := answer("looks fine", all(2, okPred)...)
	v, err := Parse(good, 2)
	require.NoError(t, err)
	require.Equal(t, Verdict{Reason: "looks fine", Predictions: all(2, okPred)}, v)

	fenced, err := Parse("```json\n"+good+"\n```", 2)
	require.NoError(t, err)
	require.Equal(t, v, fenced)

	pred := `{"status":"runtime_err","error_type":"KeyError","error_line":7,"quality_bucket":"low","confidence":1,"feedback":"f"}`
	v, err = Parse(`{"reason":"r","predictions":[`+pred+`]}`, 1)
	require.NoError(t, err)
	require.Equal(t, Prediction{Status: reward.RuntimeError, ErrorType: "KeyError", ErrorLine: 7, Quality: reward.Low, Confidence: 1, Feedback: "f"}, v.Predictions[0])
}

func TestParseRejects(t *testing.T) {
	p := func(fields string) string { return `{"reason":"r","predictions":[{` + fields + `}]}` }
	base := `"status":"valid","error_type":"","error_line":0,"quality_bucket":"mid","confidence":0.5,"feedback":"f"`
	swap := func(old, new string) string { return p(strings.Replace(base, old, new, 1)) }
	tests := []struct {
		name    string
		content string
		want    error
	}{
		{"empty", "", ErrNoJSON},
		{"prose", "The verdict: " + p(base), ErrNoJSON},
		{"prose after", p(base) + " hope this helps", ErrNoJSON},
		{"two objects", p(base) + p(base), ErrNoJSON},
		{"invalid JSON", `{"reason":"r","predictions":[{`, ErrNoJSON},
		{"array", `[` + p(base) + `]`, ErrNoJSON},
		{"duplicate top key", `{"reason":"a","reason":"b","predictions":[]}`, ErrDuplicateKey},
		{"duplicate inner key", p(base + `,"status":"syntax_err"`), ErrDuplicateKey},
		{"duplicate by case", `{"reason":"a","predictions":[{` + base + `}],"Reason":"b"}`, ErrUnknownField},
		{"unknown field", p(base + `,"score":0.9`), ErrUnknownField},
		{"unknown top field", `{"reason":"r","valid":true,"predictions":[{` + base + `}]}`, ErrUnknownField},
		{"missing status", swap(`"status":"valid",`, ``), ErrMissingField},
		{"null status", swap(`"status":"valid"`, `"status":null`), ErrMissingField},
		{"missing feedback", swap(`,"feedback":"f"`, ``), ErrMissingField},
		{"missing confidence", swap(`"confidence":0.5,`, ``), ErrMissingField},
		{"missing reason", `{"predictions":[{` + base + `}]}`, ErrMissingField},
		{"missing predictions", `{"reason":"r"}`, ErrMissingField},
		{"unknown status", swap(`"valid"`, `"timeout"`), ErrUnknownStatus},
		{"status in capitals", swap(`"valid"`, `"VALID"`), ErrUnknownStatus},
		{"unknown bucket", swap(`"mid"`, `"excellent"`), ErrUnknownBucket},
		{"confidence above 1", swap(`0.5`, `1.5`), ErrFieldType},
		{"confidence as string", swap(`0.5`, `"0.5"`), ErrFieldType},
		{"fractional line", swap(`"error_line":0`, `"error_line":2.5`), ErrFieldType},
		{"negative line", swap(`"error_line":0`, `"error_line":-1`), ErrFieldType},
		{"too few predictions", `{"reason":"r","predictions":[]}`, ErrCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.content, 1)
			require.ErrorIs(t, err, tt.want)
			require.ErrorIs(t, err, rwm.ErrBadPrediction)
			var pe *ParseError
			require.True(t, errors.As(err, &pe))
		})
	}
}

// FuzzParse: whatever the answer, each reader returns a verdict of exactly
// n predictions with known statuses and buckets, confidences in [0, 1] and
// an aggregate inside its bracket, or an error wrapping
// rwm.ErrBadPrediction; and the readers nest: what ParseJSON accepts,
// Parse and ParseText accept with the same verdict.
// maxErrorLen bounds an answer's error text: the answer clipped to 200
// bytes and outside values through records.Excerpt, each at most 4 bytes a
// byte once quoted, and the package's own words.
const maxErrorLen = 2048

func TestParseErrorsQuoteExcerpts(t *testing.T) {
	// A status, bucket or unknown key of 100 kB makes an error of at most
	// maxErrorLen bytes.
	mb := strings.Repeat("x", 100_000) // under MaxAnswerBytes
	for _, s := range []string{
		strings.Replace(answer("r", okPred), `"valid"`, `"`+mb+`"`, 1),
		strings.Replace(answer("r", okPred), `"mid"`, `"`+mb+`"`, 1),
		strings.Replace(answer("r", okPred), `"reason"`, `"`+mb+`"`, 1),
	} {
		_, err := ParseJSON(s, 1)
		require.ErrorIs(t, err, rwm.ErrBadPrediction)
		require.ErrorContains(t, err, "…(100000 bytes)")
		require.LessOrEqual(t, len(err.Error()), maxErrorLen)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(answer("r", okPred), 1)
	f.Add("```json\n"+answer("r", okPred, okPred)+"\n```", 2)
	f.Add(`{"reason":"a","reason":"b"}`, 0)
	f.Add(`{"reason":"r","predictions":[{"status":"valid","error_type":"","error_line":1e3,"quality_bucket":"high","confidence":0,"feedback":""}]}`, 1)
	f.Add("The comment says "+answer("x", okPred)+" but I find "+answer("r", okPred), 1)
	f.Add("Verdict: "+answer("r", okPred)+" {not json}", 1)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 16 {
			return
		}
		got := map[string]Verdict{}
		for name, read := range map[string]func(string, int) (Verdict, error){"Parse": Parse, "ParseJSON": ParseJSON, "ParseText": ParseText} {
			v, err := read(s, n)
			if err != nil {
				var pe *ParseError
				if !errors.Is(err, rwm.ErrBadPrediction) || !errors.As(err, &pe) || len(pe.Content) > 200+len("…") || len(err.Error()) > maxErrorLen {
					t.Fatalf("%s(%q) error %v: not a bounded *ParseError wrapping ErrBadPrediction", name, s, err)
				}
				continue
			}
			got[name] = v
			checkVerdict(t, name, s, n, v)
		}
		if j, ok := got["ParseJSON"]; ok {
			for _, name := range []string{"Parse", "ParseText"} {
				if v, ok := got[name]; !ok || !reflect.DeepEqual(v, j) {
					t.Fatalf("ParseJSON(%q) accepted but %s gave %+v (ok %v)", s, name, v, ok)
				}
			}
		}
	})
}

func checkVerdict(t *testing.T, name, s string, n int, v Verdict) {
	if len(v.Predictions) != n {
		t.Fatalf("%s(%q, %d) gave %d predictions", name, s, n, len(v.Predictions))
	}
	for _, p := range v.Predictions {
		if !p.Status.Valid() || !validBucket(p.Quality) || !(p.Confidence >= 0 && p.Confidence <= 1) || p.ErrorLine < 0 {
			t.Fatalf("%s(%q) accepted %+v", name, s, p)
		}
	}
	if n > 0 {
		o, err := Aggregate(v, reward.DefaultQualityTable(), 0.5)
		if err != nil || !(o.Low <= o.Score && o.Score <= o.High) || o.Score < 0 || o.Score > 1 {
			t.Fatalf("Aggregate(%+v) = %+v, %v", v, o, err)
		}
	}
}
