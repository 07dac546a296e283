package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"sync"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// A group of four completions sent as verl's Reward Loop sends it: one
// concurrent call per sample. The service assembles the group, scores it
// once and answers every sample from the same group result.
func Example() {
	dir, err := os.MkdirTemp("", "lm2lm-serve-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, _, err := servetest.Components(servetest.Options{}) // or serve/servelab over the embedded lab, or your own
	if err != nil {
		log.Fatal(err)
	}
	s, err := serve.New(servetest.Config(dir), c)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	b, err := s.States("example", 1, serve.SplitTrain)
	if err != nil {
		log.Fatal(err)
	}
	var sr serve.StatesResponse
	if err := json.Unmarshal(b, &sr); err != nil {
		log.Fatal(err)
	}
	texts := servetest.Completions(0, 4)
	answers := make([]serve.SampleScore, len(texts))
	var wg sync.WaitGroup
	for i, text := range texts {
		wg.Go(func() {
			step := 0
			r, err := s.Score(context.Background(), "", "", serve.ScoreRequest{Step: &step, Samples: []serve.SampleCompletion{
				{Group: "uid-1", StateID: sr.States[0].StateID, GroupSize: len(texts), Index: &i, Completion: text}}})
			if err != nil {
				log.Fatal(err)
			}
			answers[i] = r.Samples[0]
		})
	}
	wg.Wait()
	for _, a := range answers {
		fmt.Printf("sample %d: %s, valid %v, %d of %d received, kept %v, reward set %v\n", a.Index, a.Mechanism, a.Valid, a.Received, a.GroupSize, a.Kept, a.Reward != nil)
	}
	fmt.Println("groups scored:", s.Info().Scored)
	// Output:
	// sample 0: lr-scale, valid true, 4 of 4 received, kept true, reward set true
	// sample 1: none, valid true, 4 of 4 received, kept true, reward set true
	// sample 2: warmup, valid true, 4 of 4 received, kept true, reward set true
	// sample 3: warmup, valid true, 4 of 4 received, kept true, reward set true
	// groups scored: 1
}
