package records_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/records"
)

// TestFailedRecordValidate: a failed record needs its failure, only a
// failed record has one, and the log fields are bounded.
func TestFailedRecordValidate(t *testing.T) {
	f := validRecord()
	f.Source, f.Failure, f.Log, f.LogFile = records.Failed, "exit code 1", "Traceback…", "/logs/x.log"
	require.NoError(t, f.Validate())
	for name, mod := range map[string]func(*records.Record){
		"failed without failure": func(r *records.Record) { r.Failure = "" },
		"real with failure":      func(r *records.Record) { r.Source = records.Real },
		"log too long":           func(r *records.Record) { r.Log = strings.Repeat("x", records.MaxLog+1) },
		"log file too long":      func(r *records.Record) { r.LogFile = strings.Repeat("x", records.MaxLogFile+1) },
		"version too long":       func(r *records.Record) { r.Version = strings.Repeat("x", records.MaxVersion+1) },
	} {
		r := f
		mod(&r)
		require.ErrorIs(t, r.Validate(), records.ErrInvalid, name)
	}
}

// TestFailedRecordRoundTrips: a failed record with its log comes back
// from a file store as it went in, and is no evidence.
func TestFailedRecordRoundTrips(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "s.jsonl")
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err)
	f := validRecord()
	f.Source, f.Failure, f.Log, f.LogFile, f.Version = records.Failed, "exit code 1", "line\nValueError: x\n", "/l.log", "v2"
	require.NoError(t, s.Append(ctx, f))
	require.NoError(t, s.Close())
	s, err = records.OpenFile(path, records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	defer s.Close()
	rs, err := s.Scan(ctx, records.Filter{Source: records.Failed})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, f.Failure+f.Log+f.LogFile+f.Version, rs[0].Failure+rs[0].Log+rs[0].LogFile+rs[0].Version)
	_, err = records.NewEvidence(rs...)
	require.Error(t, err, "a failed record is not evidence")
}

// TestLogTail: the tail is at most MaxLog bytes of valid UTF-8, ends as
// the log ends, and is the log itself when it fits.
func TestLogTail(t *testing.T) {
	require.Equal(t, "short", records.LogTail("short"))
	rapid.Check(t, func(t *rapid.T) {
		log := rapid.StringN(0, 3*records.MaxLog, -1).Draw(t, "log")
		tail := records.LogTail(log)
		if len(log) <= records.MaxLog {
			require.Equal(t, log, tail)
			return
		}
		require.LessOrEqual(t, len(tail), records.MaxLog)
		require.True(t, strings.HasPrefix(tail, "…"))
		require.True(t, strings.HasSuffix(log, strings.TrimPrefix(tail, "…")))
		if utf8.ValidString(log) {
			require.True(t, utf8.ValidString(tail))
		}
		require.GreaterOrEqual(t, len(tail), records.MaxLog-3)
	})
}

// TestErrorExcerpt: the first line is kept whole up to MaxErrorExcerpt
// bytes (a URL and its cause with it), further lines are counted.
func TestErrorExcerpt(t *testing.T) {
	url := "rwm/openai: my-world-model: 4 attempts failed: Post \"http://127.0.0.1:8000/v1/chat/completions\": dial tcp 127.0.0.1:8000: connect: connection refused"
	long := strings.Repeat("é", records.MaxErrorExcerpt)
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New(url), url},
		{errors.New(url + "\nsecond\nthird"), url + " (+2 more lines)"},
		{errors.New(long), long[:records.MaxErrorExcerpt] + fmt.Sprintf("…(%d bytes)", len(long))},
	} {
		require.Equal(t, tt.want, records.ErrorExcerpt(tt.err))
	}
}
