package serve_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// verlStep is one trainer step as verl's Reward Loop calls the service:
// callers concurrent callers each post one sample at a time, a prompt's G
// samples adjacent (verl's batch layout), every group named uid-<step>-<g>.
// It returns, per group, the time from its last sample being sent to its
// answer, and the samples answered without a reward (or with an error).
func verlStep(client *http.Client, url string, sr serve.StatesResponse, step, G, callers int) (lat []time.Duration, failed int) {
	type job struct{ g, i int }
	jobs := make(chan job)
	sent := make([][]time.Time, len(sr.States))
	got := make([][]time.Time, len(sr.States))
	for g := range sent {
		sent[g], got[g] = make([]time.Time, G), make([]time.Time, G)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for j := range jobs {
				idx, st := j.i, step
				q := serve.ScoreRequest{Step: &st, Samples: []serve.SampleCompletion{{Group: fmt.Sprintf("uid-%d-%d", step, j.g),
					StateID: sr.States[j.g].StateID, GroupSize: G, Index: &idx, Completion: servetest.Completions(j.g+step, G)[j.i]}}}
				body, _ := json.Marshal(q)
				sent[j.g][j.i] = time.Now()
				ok := false
				if resp, err := client.Post(url+"/v1/score", "application/json", bytes.NewReader(body)); err == nil {
					var out serve.ScoreResponse
					err = json.NewDecoder(resp.Body).Decode(&out)
					resp.Body.Close()
					ok = err == nil && resp.StatusCode == http.StatusOK && len(out.Samples) == 1 && out.Samples[0].Reward != nil
				}
				got[j.g][j.i] = time.Now()
				if !ok {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	for g := range sr.States {
		for i := range G {
			jobs <- job{g, i}
		}
	}
	close(jobs)
	wg.Wait()
	later := func(a, b time.Time) int { return a.Compare(b) }
	for g := range sent {
		lat = append(lat, slices.MaxFunc(got[g], later).Sub(slices.MaxFunc(sent[g], later)))
	}
	return lat, failed
}
