package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// BenchmarkPerSample256 is verl's Reward Loop pattern: 256 concurrent
// callers each post one sample at a time, over HTTP, against the embedded
// world model with Parallel = GOMAXPROCS world-model calls. One iteration
// is one trainer step: 256 groups × G = 8 samples, whose groups the
// service assembles across requests. It reports samples per second and the
// percentiles of the time from a group's last sample being sent to its
// answer.
func BenchmarkPerSample256(b *testing.B) {
	cfg := servetest.Config(b.TempDir())
	cfg.Parallel = runtime.GOMAXPROCS(0)
	cfg.Schedule.Steps, cfg.Schedule.Budgets = []int{1 << 30}, []int{1} // no calibration inside the benchmark
	_, url := startBench(b, cfg)
	var sr serve.StatesResponse
	benchPost(b, url+"/v1/states", serve.StatesRequest{RequestID: "st", N: 256}, &sr)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	const G, callers = 8, 256
	var lat []time.Duration
	var samples int
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for it := 0; it < b.N; it++ {
		l, failed := verlStep(client, url, sr, it, G, callers)
		if failed > 0 {
			b.Fatalf("step %d: %d samples without a reward", it, failed)
		}
		lat = append(lat, l...)
		samples += len(sr.States) * G
	}
	wall := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return lat[int(p*float64(len(lat)-1))].Seconds() * 1000 }
	b.ReportMetric(pct(0.5), "group-p50-ms")
	b.ReportMetric(pct(0.99), "group-p99-ms")
	b.ReportMetric(float64(samples)/wall.Seconds(), "samples/s")
}

// startBench starts a service on cfg with the test fakes, serving on a
// free port of 127.0.0.1 until the benchmark ends.
func startBench(b *testing.B, cfg serve.Config) (*serve.Service, string) {
	c, _, err := servetest.Components(servetest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := serve.New(cfg, c)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := s.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := s.Server()
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close(); _ = s.Close() })
	return s, "http://" + ln.Addr().String()
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// BenchmarkCalibrationPoint measures how long a calibration point holds
// scoring up in the state a long run reaches: 8,192 issued states, the
// answers of 8,192 groups kept, 4,096 candidates, the pool at its bound.
// One iteration is a point: the advance to its step (the pick), once its
// runs are done the advance to the next step (its records join M, and a
// checkpoint is taken and written), then 4,096 groups scored, the next
// point's candidates. Every scoring request needs the service's lock, and
// Health takes it too: a caller of Health back to back through the point,
// from the first advance until the checkpoint is on disk, waits at most
// the longest pause (pause-max-ms). It also reports the longest of each
// advance (which holds the lock throughout), the longest checkpoint copy
// (lm2lm_serve_checkpoint_copy_max_seconds) and the longest a caller of
// Health waited while the state digest was computed.
func BenchmarkCalibrationPoint(b *testing.B) {
	const first, every = 40, 4
	dir := b.TempDir()
	cfg := servetest.Config(dir)
	cfg.Parallel = runtime.GOMAXPROCS(0)
	cfg.Schedule.Steps, cfg.Schedule.Budgets = nil, nil
	for u := range 1000 {
		cfg.Schedule.Steps, cfg.Schedule.Budgets = append(cfg.Schedule.Steps, first+every*u), append(cfg.Schedule.Budgets, 4)
	}
	s, url := startBench(b, cfg)
	var sts []serve.StateRow
	for k := range 16 {
		var sr serve.StatesResponse
		benchPost(b, url+"/v1/states", serve.StatesRequest{RequestID: fmt.Sprint("st-", k), N: 512}, &sr)
		sts = append(sts, sr.States...)
	}
	scoreAll := func(step int, sts []serve.StateRow) {
		for lo := 0; lo < len(sts); lo += 256 {
			q := serve.ScoreRequest{Step: &step}
			for i, st := range sts[lo:min(lo+256, len(sts))] {
				q.Groups = append(q.Groups, serve.GroupCompletions{StateID: st.StateID, Group: fmt.Sprintf("b%d-%d", step, lo+i),
					Completions: servetest.Completions(lo+i+step, 8)})
			}
			benchPost(b, url+"/v1/score", q, nil)
		}
	}
	ckpt := func() time.Time {
		fi, err := os.Stat(filepath.Join(dir, "checkpoint.json"))
		if err != nil {
			return time.Time{}
		}
		return fi.ModTime()
	}
	written := func(since time.Time) bool {
		_, err := os.Stat(filepath.Join(dir, "journal.log.aside"))
		return ckpt().After(since) && os.IsNotExist(err)
	}
	scoreAll(0, sts)
	var pick, apply, pause, digest time.Duration
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		p := first + every*it
		pause = max(pause, waitDuring(s, func() {
			t0 := time.Now()
			if _, err := s.Advance(p); err != nil {
				b.Fatal(err)
			}
			pick = max(pick, time.Since(t0))
			for running(s) {
				time.Sleep(time.Millisecond)
			}
			before := ckpt()
			t0 = time.Now()
			if _, err := s.Advance(p + 1); err != nil {
				b.Fatal(err)
			}
			apply = max(apply, time.Since(t0))
			for !written(before) {
				time.Sleep(time.Millisecond)
			}
		}))
		digest = max(digest, waitDuring(s, func() { s.InfoDigest() }))
		scoreAll(p+1, sts[:4096])
	}
	b.StopTimer()
	if in := s.Info(); in.Calibrations != b.N || in.Issued != 8192 {
		b.Fatalf("%d calibrations applied, %d states issued", in.Calibrations, in.Issued)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(pause), "pause-max-ms")
	b.ReportMetric(ms(pick), "pick-max-ms")
	b.ReportMetric(ms(apply), "apply-max-ms")
	b.ReportMetric(ms(digest), "digest-wait-max-ms")
	if v, ok, err := readMetric(url, copyMetric); err != nil {
		b.Fatal(err)
	} else if ok {
		b.ReportMetric(v*1000, "copy-max-ms")
	}
	if fi, err := os.Stat(filepath.Join(dir, "checkpoint.json")); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "checkpoint-MB")
	}
}

// readMetric reads an unlabelled metric of the service's /metrics; ok is
// false when it has none.
func readMetric(url, name string) (v float64, ok bool, err error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if x, found := strings.CutPrefix(l, name+" "); found {
			v, err := strconv.ParseFloat(x, 64)
			return v, err == nil, err
		}
	}
	return 0, false, nil
}

// waitDuring returns the longest a caller of Health waited while f ran.
func waitDuring(s *serve.Service, f func()) time.Duration {
	done := make(chan struct{})
	longest := make(chan time.Duration)
	go func() {
		var w time.Duration
		for {
			select {
			case <-done:
				longest <- w
				return
			default:
			}
			t0 := time.Now()
			s.Health()
			w = max(w, time.Since(t0))
		}
	}()
	f()
	close(done)
	return <-longest
}

func benchPost(b *testing.B, url string, body, out any) {
	js, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(js))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		b.Fatalf("%s: %d %s", url, resp.StatusCode, msg)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			b.Fatal(err)
		}
	}
}
