package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/envconfig"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// errServer: an LLM server the config names does not answer as an
// OpenAI-compatible server serving the model.
var errServer = errors.New("server check failed")

// checkServer asks the OpenAI-compatible server at baseURL which models it
// serves (GET <base_url>/models), before anything is paid for: an
// unreachable server, a refused key or any other status is an error
// wrapping errServer that names the URL; a server that does not list model
// is a warning on w (some servers answer under another name).
func checkServer(ctx context.Context, what, baseURL, apiKey, model string, w io.Writer) error {
	url := strings.TrimRight(baseURL, "/") + "/models"
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("%s: %w: %w", what, errServer, err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w: GET %s: %w", what, errServer, url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %w: GET %s: %s: %s", what, errServer, url, resp.Status, records.Excerpt(strings.TrimSpace(string(body))))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("%s: %w: GET %s: not an OpenAI model list: %w", what, errServer, url, err)
	}
	var ids []string
	for _, m := range list.Data {
		if m.ID == model {
			return nil
		}
		ids = append(ids, records.Excerpt(m.ID))
	}
	fmt.Fprintf(w, "lm2lm: warning: %s: %s does not list model %q (it lists %s); asking for it all the same\n",
		what, url, model, strings.Join(ids, ", "))
	return nil
}

// checkWorldServer checks the world model's server when the file names
// one.
func checkWorldServer(ctx context.Context, cfg envconfig.Config, getenv func(string) string, w io.Writer) error {
	if cfg.WorldModel.Kind != envconfig.OpenAI {
		return nil
	}
	o := cfg.WorldModel.OpenAI
	return checkServer(ctx, "world_model.openai", o.BaseURL, keyOf(o.APIKeyEnv, getenv), o.Model, w)
}

// keyOf returns the API key the variable name holds ("" for none).
func keyOf(name string, getenv func(string) string) string {
	if name == "" {
		return ""
	}
	return getenv(name)
}

// probeWorld asks the world model for one prediction, of the first
// training task and the first card at its first choices over M_0, before
// the service starts: a world model whose answers cannot be read fails here,
// at start, not in the trainer's groups. It returns the prediction.
func probeWorld(ctx context.Context, world rwm.WorldModel, task records.Task, cards []records.Card, m0 records.Evidence) (rwm.Prediction, error) {
	if len(cards) == 0 {
		return rwm.Prediction{}, errors.New("world model check: no catalogue card")
	}
	c := cards[0]
	p := records.Proposal{Mechanism: c.Mechanism, Params: map[string]string{}}
	for _, ps := range c.Params {
		if len(ps.Choices) > 0 {
			p.Params[ps.Name] = ps.Choices[0]
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pred, err := world.Predict(ctx, rwm.Query{Task: task, Proposal: p, Evidence: m0})
	if err != nil {
		return pred, fmt.Errorf("world model check: %s on %s: %w", p.Key(), task.ID, err)
	}
	return pred, nil
}
