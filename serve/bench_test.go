package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// BenchmarkScore256x8 scores trainer-sized rollouts, 256 states × 8
// completions, over HTTP against the embedded world model, with
// Parallel = GOMAXPROCS world-model calls. It reports latency percentiles
// and completions per second.
func BenchmarkScore256x8(b *testing.B) {
	cfg := servetest.Config(b.TempDir())
	cfg.Parallel = runtime.GOMAXPROCS(0)
	cfg.Loop.Schedule.Steps, cfg.Loop.Schedule.Budgets = []int{1 << 30}, []int{1} // no calibration inside the benchmark
	c, _, err := servetest.Components(servetest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := serve.New(cfg, c)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv := &http.Server{Handler: s.Handler()}
	url := startBench(b, srv)
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
	bodies := make([][]byte, 16)
	for k := range bodies {
		q := serve.ScoreRequest{}
		for i, st := range sr.States {
			q.Groups = append(q.Groups, serve.ScoreGroup{StateID: st.StateID, Completions: servetest.Completions(i+k, 8)})
		}
		bodies[k], _ = json.Marshal(q)
	}
	var lat []time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var q map[string]any
		_ = json.Unmarshal(bodies[i%len(bodies)], &q)
		q["request_id"] = fmt.Sprintf("bench-%d", i)
		body, _ := json.Marshal(q)
		start := time.Now()
		resp, err := http.Post(url+"/v1/score", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var out serve.ScoreResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			b.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		resp.Body.Close()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return lat[int(p*float64(len(lat)-1))].Seconds() * 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.9), "p90-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	var total time.Duration
	for _, d := range lat {
		total += d
	}
	b.ReportMetric(float64(len(lat)*256*8)/total.Seconds(), "completions/s")
}

func startBench(b *testing.B, srv *http.Server) string {
	ln, err := netListen()
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
