package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// The kill-and-resume tests run the service in a child process (this test
// binary, in TestServeChild), SIGKILL it in the middle of a score request
// or of a calibration, restart it on the same state directory and records
// store, replay the client's requests with the same ids, and compare with
// an uninterrupted run: the same answers, the same state, the same runs
// paid.

const childEnv = "LM2LM_SERVE_CHILD"

// TestServeChild is the child process; it runs only when childEnv names
// its directory.
func TestServeChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		t.Skip("the kill-and-resume tests' child process")
	}
	env := func(k string) time.Duration {
		ms, _ := strconv.Atoi(os.Getenv(k))
		return time.Duration(ms) * time.Millisecond
	}
	after, _ := strconv.Atoi(os.Getenv("LM2LM_DELAY_AFTER"))
	store, err := records.OpenFile(filepath.Join(dir, "records.jsonl"), records.DefaultFileConfig())
	require.NoError(t, err)
	c, _, err := servetest.Components(servetest.Options{Store: store, RunLog: filepath.Join(dir, "runs.log"),
		RunDelay: env("LM2LM_RUN_DELAY_MS"), DelayAfter: int64(after), ArmFile: filepath.Join(dir, "run-armed"),
		PredictDelay: env("LM2LM_PREDICT_DELAY_MS"), PredictArm: filepath.Join(dir, "predict-armed")})
	require.NoError(t, err)
	if point := os.Getenv("LM2LM_CRASH_AT"); point != "" {
		// A checkpoint is written beside a calibration's runs: the crash
		// stops the process between two runs, never inside one (a run
		// stopped between its end and its record's append is paid again,
		// whatever the service does; TestKillDuringCalibration kills one
		// on purpose after its record).
		ex := &betweenRuns{Executor: c.Executor}
		c.Executor = ex
		nth, _ := strconv.Atoi(os.Getenv("LM2LM_CRASH_NTH"))
		var seen atomic.Int64
		serve.SetCrashHook(func(p string) {
			if p == point && seen.Add(1) >= int64(nth) {
				ex.mu.Lock()
				os.Exit(3) // as a SIGKILL would leave it: nothing flushed, nothing closed
			}
		})
	}
	cfg := servetest.Config(servetest.StateDir(dir))
	if every, _ := strconv.Atoi(os.Getenv("LM2LM_CAL_EVERY")); every > 0 {
		// The soak's schedule: a point of 4 runs every `every` steps.
		cfg.Schedule.Steps, cfg.Schedule.Budgets = nil, nil
		for u := 1; u <= 1000; u++ {
			cfg.Schedule.Steps, cfg.Schedule.Budgets = append(cfg.Schedule.Steps, u*every), append(cfg.Schedule.Budgets, 4)
		}
	}
	s, err := serve.New(cfg, c)
	require.NoError(t, err)
	ln, err := s.Listen("127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "addr.tmp"), []byte(ln.Addr().String()), 0o600))
	require.NoError(t, os.Rename(filepath.Join(dir, "addr.tmp"), filepath.Join(dir, "addr")))
	_ = s.Server().Serve(ln)
}

// betweenRuns is an executor whose runs, each with its record's append,
// hold mu's read lock.
type betweenRuns struct {
	builder.Executor
	mu sync.RWMutex
}

func (b *betweenRuns) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.Executor.Execute(ctx, j)
}

// child starts the service in a child process on dir.
func child(t *testing.T, dir string, env ...string) (*exec.Cmd, string) {
	t.Helper()
	_ = os.Remove(filepath.Join(dir, "addr"))
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"="+dir), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(filepath.Join(dir, "addr")); err == nil {
			return cmd, "http://" + string(b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the child service did not start")
	return nil, ""
}

func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
}

// clientOps are the client's requests: states, then six score requests
// at steps 0..5 (calibration points start at steps 2 and 4). Before each
// step the client waits until no calibration's runs are going, so that a
// calibration applies at the step after it started, whatever the timing.
func clientOps(t *testing.T, url string, from, to int) map[int]string {
	out, err := tryOps(url, from, to)
	require.NoError(t, err)
	return out
}

// tryOps is clientOps stopping at the first failed request.
func tryOps(url string, from, to int) (map[int]string, error) {
	out := map[int]string{}
	code, b, err := tryPost(url+"/v1/states", serve.StatesRequest{RequestID: "st", N: 4})
	if err != nil || code != http.StatusOK {
		return out, fmt.Errorf("states: %d %s %v", code, b, err)
	}
	if from == 0 {
		out[0] = string(b)
	}
	var sr serve.StatesResponse
	if err := json.Unmarshal(b, &sr); err != nil {
		return out, err
	}
	for k := max(from, 1); k < to; k++ {
		if err := waitRuns(url); err != nil {
			return out, err
		}
		code, b, err := tryPost(url+"/v1/score", scoreOp(sr, k))
		if err != nil || code != http.StatusOK {
			return out, fmt.Errorf("score %d: %d %s %v", k, code, b, err)
		}
		out[k] = string(b)
	}
	return out, nil
}

func tryPost(url string, body any) (int, []byte, error) {
	js, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(js)))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitRuns waits until no calibration's runs are going.
func waitRuns(url string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url + "/v1/calibrations")
		if err != nil {
			return err
		}
		var ar serve.AdvanceResponse
		err = json.NewDecoder(resp.Body).Decode(&ar)
		resp.Body.Close()
		if err != nil {
			return err
		}
		busy := false
		for _, c := range ar.Calibrations {
			busy = busy || c.State == serve.CalRunning
		}
		if !busy {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("a calibration never finished")
}

func scoreOp(sr serve.StatesResponse, k int) serve.ScoreRequest {
	q := serve.ScoreRequest{RequestID: fmt.Sprintf("sc-%d", k), Step: ip(k - 1)}
	for i, st := range sr.States {
		q.Groups = append(q.Groups, serve.GroupCompletions{StateID: st.StateID, Completions: servetest.Completions(i+k, 8)})
	}
	return q
}

const nOps = 7

func info(t *testing.T, url string) serve.Info {
	resp, err := http.Get(url + "/v1/info?digest=1")
	require.NoError(t, err)
	defer resp.Body.Close()
	var in serve.Info
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&in))
	in.RealRuns, in.Reused = 0, 0 // what this process paid; runs.log counts across processes
	return in
}

func paidRuns(t *testing.T, dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "runs.log"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	return strings.Fields(strings.ReplaceAll(string(b), " ", "|"))
}

func waitFor(t *testing.T, ok func() bool) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the condition never held")
}

func waitFile(t *testing.T, path string) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

// uninterrupted runs the client's requests on a fresh child.
func uninterrupted(t *testing.T) (map[int]string, serve.Info, []string) {
	dir := t.TempDir()
	cmd, url := child(t, dir)
	ops := clientOps(t, url, 0, nOps)
	in := info(t, url)
	kill(t, cmd)
	return ops, in, paidRuns(t, dir)
}

func TestKillDuringScoring(t *testing.T) {
	wantOps, wantInfo, wantRuns := uninterrupted(t)
	require.Equal(t, 2, wantInfo.Calibrations)
	require.Len(t, wantRuns, 6)

	dir := t.TempDir()
	cmd, url := child(t, dir, "LM2LM_PREDICT_DELAY_MS=20")
	got := clientOps(t, url, 0, 4)
	// Request 4 is in its world-model calls when the service is killed.
	arm := filepath.Join(dir, "predict-armed")
	require.NoError(t, os.Remove(arm))
	sr := serve.StatesResponse{}
	require.NoError(t, json.Unmarshal([]byte(got[0]), &sr))
	done := make(chan struct{})
	go func() {
		defer close(done)
		js, _ := json.Marshal(scoreOp(sr, 4))
		resp, err := http.Post(url+"/v1/score", "application/json", strings.NewReader(string(js)))
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFile(t, arm)
	kill(t, cmd)
	<-done

	_, url = child(t, dir)
	for k, v := range clientOps(t, url, 0, nOps) {
		got[k] = v
	}
	require.Equal(t, wantOps, got, "the answers")
	require.Equal(t, wantInfo, info(t, url), "the state")
	require.ElementsMatch(t, wantRuns, paidRuns(t, dir), "the runs paid")
}

func TestKillDuringCalibration(t *testing.T) {
	wantOps, wantInfo, wantRuns := uninterrupted(t)

	dir := t.TempDir()
	cmd, url := child(t, dir, "LM2LM_RUN_DELAY_MS=60000", "LM2LM_DELAY_AFTER=1")
	got := clientOps(t, url, 0, 3)
	sr := serve.StatesResponse{}
	require.NoError(t, json.Unmarshal([]byte(got[0]), &sr))
	// Request 3 is at step 2: calibration point 0 starts in the
	// background; the first run finishes, the others hang until the kill.
	done := make(chan struct{})
	go func() {
		defer close(done)
		js, _ := json.Marshal(scoreOp(sr, 3))
		resp, err := http.Post(url+"/v1/score", "application/json", strings.NewReader(string(js)))
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFile(t, filepath.Join(dir, "run-armed"))
	// The first run's record is in the store (a run killed between its
	// end and its record's append would run again: its outcome was only
	// in memory).
	waitFor(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "records.jsonl"))
		return strings.Count(string(b), "\n") >= 1
	})
	kill(t, cmd)
	<-done
	require.Len(t, paidRuns(t, dir), 1, "one run was paid before the kill")

	// The restarted service resumes the calibration: the finished run is
	// served from the store, the two others run.
	_, url = child(t, dir)
	require.NoError(t, waitRuns(url))
	require.Equal(t, 0, info(t, url).Calibrations, "its records apply at the next step")
	for k, v := range clientOps(t, url, 0, nOps) {
		got[k] = v
	}
	require.Equal(t, wantOps, got, "the answers")
	require.Equal(t, wantInfo, info(t, url), "the state")
	require.ElementsMatch(t, wantRuns, paidRuns(t, dir), "the runs paid, none twice")
}

// TestCrashBetweenTheStepsOfAWrite stops the service between the steps of
// a journal write and of a checkpoint (as a SIGKILL there would), restarts
// it and replays the client: the same answers and state as without the
// crash, no entry applied twice, no run paid twice.
func TestCrashBetweenTheStepsOfAWrite(t *testing.T) {
	wantOps, wantInfo, wantRuns := uninterrupted(t)
	for _, c := range []struct {
		point string
		nth   int
	}{
		{"journal-mid-write", 1}, {"journal-mid-write", 6},
		{"journal-set-aside", 1}, {"journal-set-aside", 2},
		{"checkpoint-before-rename", 1}, {"checkpoint-before-drop", 1}, {"checkpoint-before-drop", 2},
	} {
		t.Run(fmt.Sprintf("%s-%d", c.point, c.nth), func(t *testing.T) {
			dir := t.TempDir()
			cmd, url := child(t, dir, "LM2LM_CRASH_AT="+c.point, fmt.Sprintf("LM2LM_CRASH_NTH=%d", c.nth))
			// A checkpoint is written off the scoring path: the crash may
			// come after the client's last answer.
			got, _ := tryOps(url, 0, nOps)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				var ee *exec.ExitError
				require.ErrorAs(t, err, &ee)
				require.Equal(t, 3, ee.ExitCode(), "the service stopped at the crash point")
			case <-time.After(time.Minute):
				t.Fatal("the service never reached the crash point")
			}
			_, url = child(t, dir)
			for k, v := range clientOps(t, url, 0, nOps) {
				if _, ok := got[k]; ok {
					require.Equal(t, got[k], v, "an answer given before the crash is given again")
				}
				got[k] = v
			}
			require.Equal(t, wantOps, got, "the answers")
			require.Equal(t, wantInfo, info(t, url), "the state")
			require.ElementsMatch(t, wantRuns, paidRuns(t, dir), "the runs paid, none twice")
		})
	}
}
