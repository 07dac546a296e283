package serve_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"runtime"
	"slices"
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
	c, _, err := servetest.Components(servetest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := serve.New(cfg, c)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	url := startBench(b, s)
	js, _ := json.Marshal(serve.StatesRequest{RequestID: "st", N: 256})
	resp, err := http.Post(url+"/v1/states", "application/json", bytes.NewReader(js))
	if err != nil {
		b.Fatal(err)
	}
	var sr serve.StatesResponse
	if err := json.NewDecoder(resp.Body).Decode(&sr); err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
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

func startBench(b *testing.B, s *serve.Service) string {
	ln, err := s.Listen("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := s.Server()
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
