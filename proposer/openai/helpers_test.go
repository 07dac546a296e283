package openai

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
)

// testCatalogue is a small catalogue of cards as data.
var testCatalogue = []records.Card{
	{Mechanism: "lr-scale", Description: "scale the peak learning rate", Params: []records.ParamSpec{
		{Name: "factor", Kind: "float", Choices: []string{"0.5", "2"}, Min: 0.1, Max: 10}}},
	{Mechanism: "warmup", Description: "change the warmup length", Params: []records.ParamSpec{
		{Name: "steps", Kind: "int", Choices: []string{"50", "100", "200"}, Min: 0, Max: 1000}}},
	{Mechanism: "qk-norm", Description: "normalise queries and keys"},
}

// fakePolicy is a deterministic "LLM" that proposes from the CARD lines
// of the prompt (or from the test catalogue when there are none): choice i
// of a request picks a card and choices from a hash of (seed, i, prompt),
// and wraps the JSON in a little prose.
func fakePolicy(r oaitest.Request) oaitest.Reply {
	n := max(r.N, 1)
	var seed int64
	if r.Seed != nil {
		seed = *r.Seed
	}
	var reply oaitest.Reply
	for i := range n {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%d/%s", seed, i, r.Text("user"))
		x := h.Sum64()
		card := testCatalogue[x%uint64(len(testCatalogue))]
		params := map[string]string{}
		for k, ps := range card.Params {
			params[ps.Name] = ps.Choices[(x>>(8*(k+1)))%uint64(len(ps.Choices))]
		}
		js, _ := json.Marshal(map[string]any{"mechanism": card.Mechanism, "params": params, "rationale": "it helped similar tasks"})
		reply.Choices = append(reply.Choices, oaitest.Choice{Content: "My proposal:\n```json\n" + string(js) + "\n```"})
	}
	return reply
}

// sleeps records injected sleeps.
type sleeps = oaitest.Sleeps

// testConfig points at srv with the test catalogue and fast, recorded
// retries.
func testConfig(srv *oaitest.Server, sl *sleeps) Config { return urlConfig(srv.URL(), sl) }

// urlConfig is testConfig for the server at url (an oaitest.Server's URL(),
// or an httptest.Server's URL such as oaitest.HugeBody's), with no
// environment.
func urlConfig(url string, sl *sleeps) Config {
	cfg := DefaultConfig()
	cfg.BaseURL, cfg.Model = url, "fake-policy"
	cfg.Timeout = 10 * time.Second
	cfg.Sleep = sl.Sleep
	cfg.Getenv = func(string) string { return "" }
	cfg.Catalogue = testCatalogue
	return cfg
}
