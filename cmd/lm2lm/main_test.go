package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/environment"
	"github.com/lm2lm/lm2lm/records"
)

var trainscript string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lm2lm-cmd")
	if err != nil {
		panic(err)
	}
	trainscript = filepath.Join(dir, "trainscript")
	if out, err := exec.Command("go", "build", "-o", trainscript, "github.com/lm2lm/lm2lm/examples/trainscript").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build trainscript: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// config writes an environment over examples/trainscript (its loss is
// buildertest.Quadratic: b_e + 0.1·Σ(x−1)² − 0.05 + σ_e·noise(seed), from
// the job's task) and returns its path.
func config(t *testing.T) string {
	dir := t.TempDir()
	cfg := fmt.Sprintf(`version: 1
training:
  command: [%q]
executor: {slots: 2}
reference:
  min_seed_noise: 0.01
tasks:
  - {id: prose-a, family: ar-prose, budget: 100, recipe: {lr: 0.003, width: 32}}
  - {id: prose-b, family: ar-prose, seeds: [1, 2]}
  - {id: prose-held, family: ar-prose, split: held-out}
catalogue:
  cards:
    - mechanism: lr-scale
      description: scale the learning rate
      params: [{name: factor, kind: float, choices: ["2", "3", "4"], min: 0.1, max: 10}]
    - mechanism: width
      description: scale the width
      params: [{name: mult, kind: float, choices: ["2", "0.25"]}]
m0: {size: 6, seed: 7}
calibration: {steps: [2], budgets: [2]}
`, trainscript)
	p := filepath.Join(dir, "env.yaml")
	require.NoError(t, os.WriteFile(p, []byte(cfg), 0o600))
	return p
}

func noEnv(string) string { return "" }

func storeCounts(t *testing.T, path string) (ref, real int) {
	s, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	defer s.Close()
	rs, err := s.Scan(context.Background(), records.Filter{})
	require.NoError(t, err)
	for _, r := range rs {
		switch r.Source {
		case records.Reference:
			ref++
		case records.Real:
			real++
		}
	}
	return ref, real
}

// TestReferenceM0ReferencePaysNothingTwice runs reference, m0, then
// reference and m0 again on trainscript: the first two pay every run once
// (3+2+3 reference seeds, M_0's 6 draws), the repeats pay nothing.
func TestReferenceM0ReferencePaysNothingTwice(t *testing.T) {
	ctx := context.Background()
	p := config(t)
	var out, errb bytes.Buffer
	require.NoError(t, run(ctx, []string{"-config", p, "-progress", "lines", "reference"}, noEnv, &out, &errb), errb.String())
	require.Contains(t, out.String(), "reference: 8 runs paid now, 0 reused")
	store := filepath.Join(filepath.Dir(p), "lm2lm-out", "records.jsonl")
	ref, real := storeCounts(t, store)
	require.Equal(t, [2]int{8, 0}, [2]int{ref, real})

	var refs []environment.RefTask
	b, err := os.ReadFile(filepath.Join(filepath.Dir(p), "lm2lm-out", "reference.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &refs))
	require.Len(t, refs, 3)
	for _, r := range refs {
		require.Empty(t, r.LeftOut)
		// trainscript's reference loss is 0 for every seed (b_e unknown in
		// the job): b_e 0, σ_e the file's floor.
		require.Equal(t, 0.0, r.Task.RefLoss)
		require.Equal(t, 0.01, r.Task.SeedNoise)
		require.Len(t, r.Losses, len(r.Seeds))
	}

	out.Reset()
	require.NoError(t, run(ctx, []string{"-config", p, "-progress", "lines", "m0"}, noEnv, &out, &errb), errb.String())
	require.Contains(t, out.String(), "reference: 0 runs paid now, 8 reused")
	require.Contains(t, out.String(), "M_0: 6 records (0 infeasible, 0 failed): 6 runs paid now, 0 reused")
	ref, real = storeCounts(t, store)
	require.Equal(t, [2]int{8, 6}, [2]int{ref, real})

	// The M_0 records are trainscript's quadratic on the measured task.
	s, err := records.OpenFile(store, records.FileConfig{ReadOnly: true})
	require.NoError(t, err)
	rs, err := s.Scan(ctx, records.Filter{Source: records.Real})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for _, r := range rs {
		require.Equal(t, 0.01, r.Task.SeedNoise)
		require.InDelta(t, r.Task.RefLoss-r.Loss, r.Gain, 1e-12)
		require.Less(t, r.Gain, 0.0, "every catalogue value is away from 1, so every change costs loss")
	}

	out.Reset()
	require.NoError(t, run(ctx, []string{"-config", p, "reference"}, noEnv, &out, &errb))
	require.Contains(t, out.String(), "reference: 0 runs paid now, 8 reused")
	out.Reset()
	require.NoError(t, run(ctx, []string{"-config", p, "m0"}, noEnv, &out, &errb))
	require.Contains(t, out.String(), "M_0: 6 records (0 infeasible, 0 failed): 0 runs paid now, 6 reused")
	ref, real = storeCounts(t, store)
	require.Equal(t, [2]int{8, 6}, [2]int{ref, real}, "nothing paid twice")
}

func TestServeAnswersHealth(t *testing.T) {
	p := config(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"-config", p, "-progress", "lines", "serve", "-addr", "127.0.0.1:0"}, noEnv, pw, io.Discard)
		pw.CloseWithError(fmt.Errorf("run returned: %v", err))
		done <- err
	}()
	re := regexp.MustCompile(`serving \S+ on (http://\S+) \((\d+) training and (\d+) held-out tasks`)
	sc := bufio.NewScanner(pr)
	var url string
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
			require.Equal(t, []string{"2", "1"}, m[2:4])
			break
		}
	}
	require.NotEmpty(t, url, "no serving line: %v", sc.Err())
	go io.Copy(io.Discard, pr)
	resp, err := http.Get(url + "/v1/health")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "lm2lm-serve/v1")
	// The service's states come from the file's tasks.
	resp, err = http.Post(url+"/v1/states", "application/json", strings.NewReader(`{"request_id": "s1", "n": 2}`))
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), "prose-")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	p := config(t)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, append(b, "executor_kind: slurm\n"...), 0o600))
	err = run(context.Background(), []string{"-config", p, "reference"}, noEnv, io.Discard, io.Discard)
	require.ErrorIs(t, err, envconfig.ErrUnknownKey)
	require.Contains(t, err.Error(), "executor_kind")
	err = run(context.Background(), []string{"-config", p, "frobnicate"}, noEnv, io.Discard, io.Discard)
	require.Error(t, err)
}

func TestPrintConfigParsesBack(t *testing.T) {
	p := config(t)
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-config", p, "print-config"}, noEnv, &out, io.Discard))
	require.Contains(t, out.String(), "max_attempts: 3")
	c, err := envconfig.Parse(out.Bytes(), filepath.Dir(p))
	require.NoError(t, err)
	require.NoError(t, c.Resolve().Validate())
}
