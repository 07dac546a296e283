package serve_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// TestSoak runs the service in a child process for LM2LM_SOAK (a
// duration, e.g. 30m) under verl's pattern: 256 concurrent callers, one
// sample per request, groups of 8 adjacent, a new step every 256 groups,
// new states every 10 steps, a calibration point of 4 real runs every
// LM2LM_SOAK_CAL_EVERY steps (default 20) running beside scoring. A probe
// asks /v1/health (which takes the service's lock, as scoring does) back
// to back, so that the longest time the lock was held, and so scoring
// stopped, is seen step by step: the steps where a calibration point
// starts (its picks) or applies (the step after) apart from the others.
// It writes a report of throughput, group latency, the longest scoring
// pause, the child's RSS, the checkpoint and journal sizes and the cost of
// /v1/info to LM2LM_SOAK_REPORT (default soak-report.txt in the test's
// temporary directory, printed to the log). It is a measurement, not a
// check of timings: it asserts only that every sample got a reward.
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("LM2LM_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("the soak runs only with LM2LM_SOAK=<duration>")
	}
	every := 20
	if e := os.Getenv("LM2LM_SOAK_CAL_EVERY"); e != "" {
		every, err = strconv.Atoi(e)
		require.NoError(t, err)
	}
	dir := t.TempDir()
	cmd, url := child(t, dir, fmt.Sprint("LM2LM_CAL_EVERY=", every))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	const G, callers, nStates = 8, 256, 256
	var sr serve.StatesResponse
	newStates := func(step int) {
		code, b := post(t, url+"/v1/states", "", serve.StatesRequest{RequestID: fmt.Sprint("soak-", step), N: nStates})
		require.Equal(t, http.StatusOK, code, string(b))
		require.NoError(t, json.Unmarshal(b, &sr))
	}
	rss := func() int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		require.NoError(t, err)
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
		return 0
	}
	size := func(name string) int64 {
		fi, err := os.Stat(filepath.Join(servetest.StateDir(dir), name))
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	var report strings.Builder
	logf := func(format string, args ...any) {
		fmt.Fprintf(&report, format+"\n", args...)
		t.Logf(format, args...)
	}
	var lat []time.Duration
	var samples, failed int
	var maxRSS, maxCkpt, maxJournal int64
	var infoLat []time.Duration
	probe := startProbe(url)
	start, lastLog := time.Now(), time.Now()
	step := 0
	for ; time.Since(start) < d; step++ {
		probe.step.Store(int64(step))
		if step%10 == 0 {
			newStates(step)
		}
		l, f := verlStep(client, url, sr, step, G, callers)
		lat, failed = append(lat, l...), failed+f
		samples += nStates * G
		t0 := time.Now()
		resp, err := http.Get(url + "/v1/info")
		require.NoError(t, err)
		var in serve.Info
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&in))
		resp.Body.Close()
		infoLat = append(infoLat, time.Since(t0))
		maxRSS, maxCkpt, maxJournal = max(maxRSS, rss()), max(maxCkpt, size("checkpoint.json")), max(maxJournal, size("journal.log"))
		if time.Since(lastLog) > time.Minute {
			lastLog = time.Now()
			logf("%6.0f s: step %d, %d samples, %.0f samples/s, RSS %d MB (max %d), checkpoint %d MB, journal %d MB, calibrations %d, M %d, candidates %d, pool %d, issued %d",
				time.Since(start).Seconds(), step, samples, float64(samples)/time.Since(start).Seconds(), rss()>>20, maxRSS>>20,
				size("checkpoint.json")>>20, size("journal.log")>>20, in.Calibrations, in.Evidence, in.Candidates, in.Pool, in.Issued)
		}
	}
	wall := time.Since(start)
	calPause, calStep, otherPause, otherStep := probe.stop(every)
	slices.Sort(lat)
	slices.Sort(infoLat)
	pct := func(xs []time.Duration, p float64) time.Duration { return xs[int(p*float64(len(xs)-1))] }
	logf("soak %s: %d steps, %d samples (%d without a reward), %.0f samples/s", wall.Round(time.Second), step, samples, failed, float64(samples)/wall.Seconds())
	logf("group latency (last sample sent → answer): p50 %s, p99 %s, max %s", pct(lat, 0.5), pct(lat, 0.99), lat[len(lat)-1])
	logf("child RSS: max %d MB, at the end %d MB; checkpoint max %d MB; journal max %d MB", maxRSS>>20, rss()>>20, maxCkpt>>20, maxJournal>>20)
	logf("/v1/info: p50 %s, p99 %s", pct(infoLat, 0.5), pct(infoLat, 0.99))
	logf("longest scoring pause (a /v1/health probe waiting on the lock), calibration every %d steps: %s at a calibration point (step %d), %s elsewhere (step %d)",
		every, calPause.Round(time.Millisecond), calStep, otherPause.Round(time.Millisecond), otherStep)
	ckptCopy, _, err := readMetric(url, copyMetric)
	require.NoError(t, err)
	logf("longest checkpoint copy under the lock (%s): %.1f ms", copyMetric, 1000*ckptCopy)
	time.Sleep(30 * time.Second)
	logf("child RSS after 30 s idle: %d MB", rss()>>20)
	out := os.Getenv("LM2LM_SOAK_REPORT")
	if out == "" {
		out = filepath.Join(dir, "soak-report.txt")
	}
	require.NoError(t, os.WriteFile(out, []byte(report.String()), 0o644))
	require.Zero(t, failed, "every sample got a reward")
}

// probe asks /v1/health back to back and keeps each step's longest wait.
type probe struct {
	step    atomic.Int64
	done    chan struct{}
	stopped chan struct{}
	longest map[int64]time.Duration
}

func startProbe(url string) *probe {
	p := &probe{done: make(chan struct{}), stopped: make(chan struct{}), longest: map[int64]time.Duration{}}
	go func() {
		defer close(p.stopped)
		for {
			select {
			case <-p.done:
				return
			default:
			}
			step := p.step.Load()
			t0 := time.Now()
			resp, err := http.Get(url + "/v1/health")
			d := time.Since(t0)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			// A wait that spans a step is counted in the step it began in.
			p.longest[step] = max(p.longest[step], d)
			time.Sleep(time.Millisecond)
		}
	}()
	return p
}

// stop ends the probe and returns the longest wait in a step where a
// calibration point starts or applies (a multiple of every, or the step
// after) and the longest in any other step, with their steps.
func (p *probe) stop(every int) (cal time.Duration, calStep int, other time.Duration, otherStep int) {
	close(p.done)
	<-p.stopped
	for step, d := range p.longest {
		if s := int(step); s > 0 && (s%every == 0 || s%every == 1) {
			if d > cal {
				cal, calStep = d, s
			}
		} else if d > other {
			other, otherStep = d, s
		}
	}
	return cal, calStep, other, otherStep
}

const copyMetric = "lm2lm_serve_checkpoint_copy_max_seconds"
