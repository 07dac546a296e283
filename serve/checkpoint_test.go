package serve_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// TestCheckpointFailureKeepsTheJournal: a checkpoint that cannot be
// written (its temporary file's path is taken by a directory) fails off
// the scoring path: scoring goes on, /v1/health reports the problem and
// stays ok, the journal's entries set aside stay, and a restart replays
// them to the same state. Once the checkpoint can be written it is, and
// the entries aside are removed.
func TestCheckpointFailureKeepsTheJournal(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "checkpoint.json.tmp")
	require.NoError(t, os.MkdirAll(blocker, 0o700))
	s, srv, _ := newService(t, dir, nil, servetest.Options{})
	sr := states(t, srv.URL, 4, "")
	// Points at steps 2 and 4; each applies at the step after, with the
	// checkpoint that compacts the journal.
	scoreSteps := func(s *serve.Service, url string, from, to int) {
		for step := from; step < to; step++ {
			waitFor(t, func() bool { return !running(s) })
			score(t, url, fmt.Sprint("c", step), step, sr, 4)
		}
	}
	scoreSteps(s, srv.URL, 0, 4)
	waitFor(t, func() bool { return s.Health().Problem != "" })
	h := s.Health()
	require.True(t, h.OK, "the journal keeps every entry")
	require.Contains(t, h.Problem, "checkpoint")
	require.FileExists(t, filepath.Join(dir, "journal.log.aside"))
	require.NoFileExists(t, filepath.Join(dir, "checkpoint.json"))
	want := s.InfoDigest()
	require.Equal(t, 1, want.Calibrations)
	srv.Close()
	require.NoError(t, s.Close())

	s, srv, _ = newService(t, dir, nil, servetest.Options{})
	require.Equal(t, want, s.InfoDigest(), "the restart replays the entries aside and the journal")
	require.NoError(t, os.Remove(blocker))
	scoreSteps(s, srv.URL, 4, 6)
	waitFor(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "journal.log.aside"))
		return os.IsNotExist(err) && s.Health().Problem == ""
	})
	require.FileExists(t, filepath.Join(dir, "checkpoint.json"))
	want = s.InfoDigest()
	require.Equal(t, 2, want.Calibrations)
	srv.Close()
	require.NoError(t, s.Close())
	s, _, _ = newService(t, dir, nil, servetest.Options{})
	require.Equal(t, want, s.InfoDigest(), "the checkpoint and the journal after it")
}

// running reports whether a calibration's runs are going.
func running(s *serve.Service) bool {
	for _, c := range s.Calibrations().Calibrations {
		if c.State == serve.CalRunning {
			return true
		}
	}
	return false
}
