package serve_test

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// TestCalibrationPause measures how long scoring stops when a calibration
// point is reached with a large state (8,192 issued states, the answers
// cache full): one client scores whole groups back to back while the
// trainer advances to the point, and the longest answer around it is the
// pause. The checkpoint the point writes must not hold scoring up: the
// longest answer stays under 100 ms. Slow: skipped under -short.
func TestCalibrationPause(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a large state; skipped under -short")
	}
	dir := t.TempDir()
	s, srv, _ := newService(t, dir, func(c *serve.Config) {
		c.Schedule.Steps, c.Schedule.Budgets = []int{2}, []int{3}
	}, servetest.Options{})
	var ids []string
	for k := range 16 {
		code, b := post(t, srv.URL+"/v1/states", "", serve.StatesRequest{RequestID: fmt.Sprintf("big-%d", k), N: 512})
		require.Equal(t, http.StatusOK, code, string(b))
		if k == 15 {
			sr := states(t, srv.URL, 1, "")
			ids = append(ids, sr.States[0].StateID)
		}
	}
	score(t, srv.URL, "warm", 1, states(t, srv.URL, 4, ""), 4)

	var mu sync.Mutex
	var lat []time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 4 { // four clients, so that one is always waiting on the service
		wg.Go(func() { scoreLoop(t, srv.URL, ids[0], c, stop, &mu, &lat) })
	}
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	code, b := post(t, srv.URL+"/v1/advance", "", serve.AdvanceRequest{Step: 2})
	advance := time.Since(t0)
	require.Equal(t, http.StatusOK, code, string(b))
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, lat)
	slices.Sort(lat)
	pause := metric(t, srv.URL, "lm2lm_serve_checkpoint_pause_max_seconds")
	t.Logf("calibration point with %d issued states: advance answered in %s; %d score requests around it from 4 clients, p50 %s, max %s; the checkpoint held scoring up for at most %.1f ms",
		s.Info().Issued, advance.Round(time.Millisecond), len(lat), lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)-1].Round(time.Millisecond), 1000*pause)
	require.Positive(t, pause)
	require.Less(t, pause, 0.1, "the checkpoint held scoring up")

	// Scoring went on while the checkpoint was written: the journal kept
	// the entries after it, and a restart restores every scored group.
	want := s.InfoDigest()
	srv.Close()
	require.NoError(t, s.Close())
	s2, _, _ := newService(t, dir, nil, servetest.Options{})
	got := s2.InfoDigest()
	require.Equal(t, want.Scored, got.Scored)
	require.Equal(t, want.Digest, got.Digest)
}

// metric reads one gauge of the service's /metrics.
func metric(t *testing.T, url, name string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	require.NotNil(t, m, "%s is not in /metrics", name)
	v, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return v
}

// scoreLoop scores whole groups one after the other until stop, recording
// each answer's latency.
func scoreLoop(t *testing.T, url, id string, c int, stop chan struct{}, mu *sync.Mutex, lat *[]time.Duration) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		q := serve.ScoreRequest{Step: ip(1), Groups: []serve.GroupCompletions{{StateID: id, Group: fmt.Sprintf("p-%d-%d", c, i),
			Completions: servetest.Completions(i, 4)}}}
		t0 := time.Now()
		code, _ := post(t, url+"/v1/score", "", q)
		d := time.Since(t0)
		if code == http.StatusOK {
			mu.Lock()
			*lat = append(*lat, d)
			mu.Unlock()
		}
	}
}
