package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// dataBlock is the decoded data block of a user message.
type dataBlock struct {
	Task     oaichat.TaskLine
	Records  []recordLine
	Proposal proposalLine
	Fence    string
}

// parseDataBlock reads the fenced block of a user message as the prompt
// documents it; it fails when the block is not exactly TASK, RECORD…,
// PROPOSAL lines of JSON.
func parseDataBlock(user string) (dataBlock, error) {
	var d dataBlock
	lines := strings.Split(user, "\n")
	start := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "<<<DATA-") {
			start = i
			d.Fence = strings.TrimPrefix(l, "<<<")
			break
		}
	}
	if start < 0 {
		return d, fmt.Errorf("no opening fence")
	}
	end := -1
	for i := start + 1; i < len(lines); i++ {
		if lines[i] == d.Fence+">>>" {
			end = i
			break
		}
	}
	if end < 0 {
		return d, fmt.Errorf("no closing fence")
	}
	if n := strings.Count(user, d.Fence); n != 4 {
		// fence lines plus the two mentions in the instructions
		return d, fmt.Errorf("fence token occurs %d times, want 4", n)
	}
	body := lines[start+1 : end]
	for i, l := range body {
		kind, js, _ := strings.Cut(l, " ")
		var err error
		switch {
		case kind == "TASK" && i == 0:
			err = json.Unmarshal([]byte(js), &d.Task)
		case kind == "RECORD" && i > 0 && i < len(body)-1:
			var r recordLine
			err = json.Unmarshal([]byte(js), &r)
			d.Records = append(d.Records, r)
		case kind == "PROPOSAL" && i == len(body)-1:
			err = json.Unmarshal([]byte(js), &d.Proposal)
		default:
			return d, fmt.Errorf("unexpected data line %d: %q", i, l)
		}
		if err != nil {
			return d, fmt.Errorf("data line %d: %w", i, err)
		}
	}
	return d, nil
}

// fakeWorld is a deterministic in-context "LLM": it reads the data block and
// predicts the shrunken mean of the records of the same task and proposal
// key, ĝ = Σg/(n+1), or a tenth of the mean of same-mechanism records of the
// task when there is none; q10/q90 = ĝ ∓ σ_e. Its answer depends on the
// context, as the conformance suite demands.
func fakeWorld(r oaitest.Request) oaitest.Reply {
	d, err := parseDataBlock(r.Text("user"))
	if err != nil {
		return oaitest.Text("I could not read the data: " + err.Error())
	}
	key := records.Proposal{Mechanism: d.Proposal.Mechanism, Params: d.Proposal.Params}.Key()
	var sum, mechSum float64
	var n, mechN int
	for _, rec := range d.Records {
		if rec.Task != d.Task.ID || rec.Gain == nil {
			continue
		}
		if (records.Proposal{Mechanism: rec.Mechanism, Params: rec.Params}).Key() == key {
			sum += *rec.Gain
			n++
		} else if rec.Mechanism == d.Proposal.Mechanism {
			mechSum += *rec.Gain
			mechN++
		}
	}
	var g float64
	switch {
	case n > 0:
		g = sum / float64(n+1)
	case mechN > 0:
		g = 0.1 * mechSum / float64(mechN)
	}
	s := d.Task.SeedNoise
	return oaitest.Text(fmt.Sprintf(`{"gain": %g, "q10": %g, "q90": %g, "valid": true, "reason": "%d matching records"}`, g, g-s, g+s, n))
}

// sleeps records injected sleeps.
type sleeps = oaitest.Sleeps

// testConfig points at srv with fast, recorded retries.
func testConfig(srv *oaitest.Server, sl *sleeps) Config { return urlConfig(srv.URL(), sl) }

// urlConfig points at the server at url (an oaitest.Server's URL(), or an
// httptest.Server's URL such as oaitest.HugeBody's) with fast, recorded
// retries and no environment.
func urlConfig(url string, sl *sleeps) Config {
	cfg := DefaultConfig()
	cfg.BaseURL, cfg.Model, cfg.APIKey = url, "fake-model", "test-key"
	cfg.Timeout = 10 * time.Second
	cfg.Sleep = sl.Sleep
	cfg.Getenv = func(string) string { return "" }
	return cfg
}

// Answers shared by the tests of parsing and of Predict: the model's own
// prediction, and a different one that an answer may echo from the data
// block (a prompt injection) before or after its own.
const (
	ownAnswer      = `{"gain": 0.001, "q10": 0, "q90": 0.002, "valid": true, "reason": "mine"}`
	injectedAnswer = `{"gain": 0.05, "q10": 0.04, "q90": 0.06, "valid": true, "reason": "x"}`
)

// requireAnswerError checks that err is the answer error want, of its one
// class: an unreadable answer (ErrUnreadable, a failure of the world
// model) or an unusable prediction (rwm.ErrBadPrediction), never both.
func requireAnswerError(t testing.TB, err, want error, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, want, msgAndArgs...)
	unreadable := errors.Is(want, ErrUnreadable)
	require.Equal(t, unreadable, errors.Is(err, ErrUnreadable), msgAndArgs...)
	require.Equal(t, !unreadable, errors.Is(err, rwm.ErrBadPrediction), msgAndArgs...)
}
