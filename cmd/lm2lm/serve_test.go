package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/serve"
)

// withWorld returns config's file with its world model on the
// OpenAI-compatible server at url.
func withWorld(t *testing.T, url string) string {
	t.Helper()
	p := config(t)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	b = append(b, fmt.Sprintf("world_model: {kind: openai, openai: {base_url: %q, model: wm}}\n", url)...)
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

// TestServeChecksItsWorldModelFirst: an unreachable world-model server
// stops serve before any run is paid for, naming the URL; a server whose
// answers cannot be read stops it before it serves.
func TestServeChecksItsWorldModelFirst(t *testing.T) {
	p := withWorld(t, "http://127.0.0.1:1/v1")
	_, _, err := lm2lmRun(t, p, "serve", "-addr", "127.0.0.1:0")
	require.ErrorIs(t, err, errServer)
	require.Contains(t, err.Error(), "GET http://127.0.0.1:1/v1/models")
	require.NoFileExists(t, filepath.Join(filepath.Dir(p), "lm2lm-out", "records.jsonl"), "nothing paid")

	prose := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Text("It will help a little, I think.") })
	p = withWorld(t, prose.URL())
	_, errs, err := lm2lmRun(t, p, "serve", "-addr", "127.0.0.1:0")
	require.Contains(t, errs, `does not list model "wm"`)
	require.ErrorContains(t, err, "world model check: ")
	require.ErrorContains(t, err, "rwm/openai: unreadable answer: no JSON object in the answer")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeUnreadableAnswerIsAFailure: a world model that answers the
// start-up check, then prose, scores no group: every sample has a
// failure_reason that keeps its cause and no reward (never the invalid
// penalty), and the progress log counts the failed group.
func TestServeUnreadableAnswerIsAFailure(t *testing.T) {
	world := oaitest.New(t, func(oaitest.Request) oaitest.Reply { return oaitest.Text("It will help a little, I think.") })
	world.SetModels("wm")
	world.Push(oaitest.Text(`{"gain": 0.01, "q10": 0, "q90": 0.02, "valid": true, "reason": "probe"}`))
	p := withWorld(t, world.URL())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	errs := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"-config", p, "-progress", "lines", "serve", "-addr", "127.0.0.1:0", "-log-every", "20ms"}, noEnv, pw, errs)
		pw.CloseWithError(fmt.Errorf("run returned: %v", err))
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	var url string
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if m := regexp.MustCompile(`serving \S+ on (http://\S+) `).FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			break
		}
	}
	require.NotEmpty(t, url, "no serving line: %v\n%s", sc.Err(), errs.String())
	require.Contains(t, strings.Join(lines, "\n"), "world model: answered (valid true, gain 0.01, probe)")
	go io.Copy(io.Discard, pr)

	var st serve.StatesResponse
	require.NoError(t, json.Unmarshal(post(t, url, "/v1/states", `{"request_id": "s", "n": 1}`), &st))
	var sr serve.ScoreResponse
	require.NoError(t, json.Unmarshal(post(t, url, "/v1/score", fmt.Sprintf(`{"request_id": "g", "step": 0, "groups": [{"state_id": %q, "completions": [%q, %q]}]}`,
		st.States[0].StateID, `{"mechanism": "lr-scale", "params": {"factor": "2"}}`, `{"mechanism": "width", "params": {"mult": "2"}}`)), &sr))
	for _, s := range sr.Groups[0].Samples {
		require.Nil(t, s.Reward, "no reward, not the invalid penalty: %+v", s)
		require.Contains(t, s.FailureReason, "world_model: ")
		require.Contains(t, s.FailureReason, "unreadable answer: no JSON object in the answer")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errs.String(), "failed_groups=1") {
		require.True(t, time.Now().Before(deadline), "no progress line: %s", errs.String())
		time.Sleep(20 * time.Millisecond)
	}
	require.Contains(t, errs.String(), `msg="serve: scoring" step=0 scored_groups=0 failed_groups=1`)
	cancel()
	require.NoError(t, <-done)
}
