package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// StateID returns the id of the n-th issued state st: "s-" and the first
// 16 hex digits of the SHA-256 of its JSON encoding and n. Every issued
// row has its own id, even when the pool draws the same state twice, so
// that the rows of a dataset never merge into one group.
func StateID(st records.State, n int) string {
	b, _ := json.Marshal(st)
	h := sha256.New()
	h.Write(b)
	h.Write([]byte("#" + strconv.Itoa(n)))
	return "s-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// addState remembers an issued state, forgetting the oldest of its split
// beyond MaxIssued of that split: the training states a long run keeps
// asking for never push out the held-out states it evaluates at the end.
// The caller holds mu.
func (s *Service) addState(e stateEntry) {
	order := s.order[e.Split]
	if _, ok := s.states[e.ID]; !ok { // an id (its issue number in it) names one state of one split
		order = append(order, e.ID)
	}
	s.states[e.ID] = e
	for len(order) > s.cfg.MaxIssued {
		delete(s.states, order[0])
		order = order[1:]
	}
	s.order[e.Split] = order
}

// StateRow is one research state as handed out: its id, task, split and
// the chat prompt (proposer/openai's prompt format, PromptVersion).
type StateRow struct {
	StateID string           `json:"state_id"`
	Task    string           `json:"task"`
	Split   string           `json:"split"`
	Prompt  []openai.Message `json:"prompt"`
}

// StatesResponse answers a states request.
type StatesResponse struct {
	API           string     `json:"api"`
	PromptVersion string     `json:"prompt_version"`
	Step          int        `json:"step"`
	States        []StateRow `json:"states"`
}

// issuedStates is what a states request issued: the step and the ids, in
// order. The prompts are made again from the issued states when asked.
type issuedStates struct {
	Step int      `json:"step"`
	IDs  []string `json:"ids"`
}

// applyStates draws and remembers the states of a states op. The caller
// holds mu.
func (s *Service) applyStates(o op) issuedStates {
	var sts []records.State
	if o.Split == SplitTest {
		sts = s.drawTest(o.N)
	} else {
		sts = s.loop.Draw(o.N)
	}
	out := issuedStates{Step: s.loop.Status().Step, IDs: make([]string, 0, len(sts))}
	for _, st := range sts {
		id := StateID(st, s.issued)
		s.issued++
		s.addState(stateEntry{ID: id, State: st, Split: o.Split})
		out.IDs = append(out.IDs, id)
	}
	return out
}

// renderStates answers a states request from what it issued. The caller
// holds mu.
func (s *Service) renderStates(b json.RawMessage) (json.RawMessage, error) {
	var is issuedStates
	if err := json.Unmarshal(b, &is); err != nil {
		return nil, err
	}
	resp := StatesResponse{API: APIVersion, PromptVersion: openai.PromptVersion, Step: is.Step, States: make([]StateRow, 0, len(is.IDs))}
	for _, id := range is.IDs {
		e, ok := s.states[id]
		if !ok {
			return nil, &RequestError{Status: http.StatusGone, Code: "states_forgotten",
				Message: fmt.Sprintf("state %s of this request was forgotten (more than %d issued since): ask with a new request_id", id, s.cfg.MaxIssued)}
		}
		msgs, err := openai.Messages(e.State, s.c.Catalogue, s.cfg.AllowNoChange, 0)
		if err != nil {
			// A state of a valid task renders; a failure is a broken
			// catalogue, reported in the prompt's place.
			msgs = []openai.Message{{Role: "system", Content: "prompt unavailable: " + records.Excerpt(err.Error())}}
		}
		resp.States = append(resp.States, StateRow{StateID: id, Task: e.State.Task.ID, Split: e.Split, Prompt: msgs})
	}
	return json.Marshal(resp)
}

// drawTest draws n held-out states: a task uniformly and a history from
// Components.Histories, from a source derived from the seed and the number
// of held-out draws so far.
func (s *Service) drawTest(n int) []records.State {
	if len(s.c.HeldOut) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0x74657374+uint64(s.testDraw)))
	s.testDraw++
	pool := s.c.Histories
	if pool == nil {
		pool = &records.Pool{}
	}
	return pool.States(rng, s.c.HeldOut, n, s.cfg.MaxHistory)
}

// once answers key from the cache, or computes it with f while other
// requests with the same key wait for its result.
func (s *Service) once(key string, f func() (json.RawMessage, error)) (json.RawMessage, error) {
	for {
		s.mu.Lock()
		if b, ok := s.cache.get(key); ok {
			s.mu.Unlock()
			s.met.repeats.Inc()
			return b, nil
		}
		ch, busy := s.pending[key]
		if !busy {
			s.pending[key] = make(chan struct{})
			s.mu.Unlock()
			break
		}
		s.mu.Unlock()
		<-ch
	}
	b, err := f()
	s.mu.Lock()
	if ch, ok := s.pending[key]; ok {
		delete(s.pending, key)
		close(ch)
	}
	s.mu.Unlock()
	return b, err
}

// States draws n new states of split (SplitTrain or SplitTest) and
// returns them with their prompts; key makes a repeated request return
// the same states (while they are remembered: MaxIssued).
func (s *Service) States(key string, n int, split string) (json.RawMessage, error) {
	if split == "" {
		split = SplitTrain
	}
	if split != SplitTrain && split != SplitTest {
		return nil, badRequest("bad_split", "split %q: want %q or %q", records.Excerpt(split), SplitTrain, SplitTest)
	}
	if n < 1 || n > s.cfg.MaxStates {
		return nil, badRequest("bad_count", "n = %d, want 1..%d", n, s.cfg.MaxStates)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.cache.get(key)
	if ok {
		if err := s.sameStatesRequest(key, b, n, split); err != nil {
			return nil, err
		}
		s.met.repeats.Inc()
	} else {
		var err error
		if b, err = s.commit(op{Kind: "states", Key: key, N: n, Split: split}); err != nil {
			return nil, err
		}
	}
	return s.renderStates(b)
}

// sameStatesRequest refuses a request_id used before for another count
// or split: the same key with another body is a conflict, not the first
// answer. The caller holds mu.
func (s *Service) sameStatesRequest(key string, b json.RawMessage, n int, split string) error {
	var is issuedStates
	if err := json.Unmarshal(b, &is); err != nil {
		return err
	}
	was := split
	if len(is.IDs) > 0 {
		if e, ok := s.states[is.IDs[0]]; ok {
			was = e.Split
		}
	}
	if len(is.IDs) != n || was != split {
		return conflict("request_id_reused", "%s was used before for %d %s states, not %d %s",
			records.Excerpt(key), len(is.IDs), was, n, split)
	}
	return nil
}

// Dataset writes n new states of split as JSON Lines dataset rows (see
// DatasetRow); key makes a repeated request return the same rows.
func (s *Service) Dataset(key string, n int, split string) ([]byte, error) {
	b, err := s.States(key, n, split)
	if err != nil {
		return nil, err
	}
	var sr StatesResponse
	if err := json.Unmarshal(b, &sr); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, st := range sr.States {
		if err := enc.Encode(NewDatasetRow(st)); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// DatasetRow is one row of the exported dataset. The state id travels in
// the columns each framework hands back to the reward: TRL passes every
// dataset column to a reward function as a keyword argument (state_id);
// verl passes extra_info (and reward_model.ground_truth); OpenRLHF passes
// the label column (label). Each row's state id is its own (StateID).
type DatasetRow struct {
	Prompt      []openai.Message  `json:"prompt"`
	StateID     string            `json:"state_id"`
	Task        string            `json:"task"`
	Split       string            `json:"split"`
	DataSource  string            `json:"data_source"`
	RewardModel map[string]string `json:"reward_model"`
	ExtraInfo   map[string]string `json:"extra_info"`
	Label       string            `json:"label"`
	// Text is the prompt as one string (system and user messages joined),
	// for a trainer that takes a plain-text input column.
	Text string `json:"text"`
}

// DataSource is the data_source column of exported rows.
const DataSource = "lm2lm"

// NewDatasetRow returns the dataset row of a state.
func NewDatasetRow(st StateRow) DatasetRow {
	var text string
	for i, m := range st.Prompt {
		if i > 0 {
			text += "\n\n"
		}
		text += m.Content
	}
	return DatasetRow{Prompt: st.Prompt, StateID: st.StateID, Task: st.Task, Split: st.Split, DataSource: DataSource,
		RewardModel: map[string]string{"style": "rule", "ground_truth": st.StateID},
		ExtraInfo:   map[string]string{"state_id": st.StateID, "split": st.Split}, Label: st.StateID, Text: text}
}

// EvalResult is the real outcome of one evaluated completion.
type EvalResult struct {
	Valid      bool    `json:"valid"`
	Measured   bool    `json:"measured"`
	Mechanism  string  `json:"mechanism,omitempty"`
	Gain       float64 `json:"gain"`
	GainSigmas float64 `json:"gain_sigmas"`
	Infeasible string  `json:"infeasible,omitempty"`
	Failure    string  `json:"failure,omitempty"`
}

// EvalResponse answers an evaluate request.
type EvalResponse struct {
	API     string         `json:"api"`
	Groups  [][]EvalResult `json:"groups"`
	Runs    int            `json:"runs"`
	MeanSig float64        `json:"mean_gain_sigmas"`
	// RequestSum is the digest of the request's groups: a request_id
	// used again with other groups is refused (409), not answered.
	RequestSum string `json:"request_sum,omitempty"`
}

// Evaluate runs a policy's proposals for real, one run per distinct
// (task, change) of the request, on issued states (held-out ones for a
// test-split evaluation), and returns the real gains (METHOD.md §1 Data
// and evaluation); unparseable, infeasible and unmeasured proposals are
// reported as such, and the mean is over the feasible runs in σ_e units.
// Runs are never added to M, and the runs it paid are counted durably.
func (s *Service) Evaluate(ctx context.Context, key string, gs []GroupCompletions) (json.RawMessage, error) {
	if err := s.checkEval(gs); err != nil {
		return nil, err
	}
	gb, err := json.Marshal(gs)
	if err != nil {
		return nil, err
	}
	sum := digest(gb)
	b, err := s.once(key, func() (json.RawMessage, error) {
		lg := make([]evalGroup, len(gs))
		s.mu.Lock()
		for i, g := range gs {
			e, ok := s.states[g.StateID]
			if !ok {
				s.mu.Unlock()
				return nil, badRequest("unknown_state", "group %d: unknown state_id %q", i, records.Excerpt(g.StateID))
			}
			lg[i] = evalGroup{state: e.State, texts: g.Completions}
		}
		s.mu.Unlock()
		jobs := s.evalJobs(lg)
		runs, err := s.execute(ctx, jobs)
		if err != nil {
			return nil, err
		}
		resp := evalResponse(lg, runs, len(jobs))
		resp.RequestSum = sum
		b, err := json.Marshal(resp)
		if err != nil {
			return nil, err
		}
		var paid int
		var cost records.Cost
		for _, r := range runs {
			if r.Ran && !r.Reused {
				paid++
				cost = cost.Add(r.Cost)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.commit(op{Kind: "eval", Key: key, Runs: paid, Cost: &cost, Body: b})
	})
	if err != nil {
		return nil, err
	}
	var was struct {
		RequestSum string `json:"request_sum"`
	}
	if err := json.Unmarshal(b, &was); err != nil {
		return nil, err
	}
	if was.RequestSum != "" && was.RequestSum != sum {
		return nil, conflict("request_id_reused", "%s was used before with other groups", records.Excerpt(key))
	}
	return b, nil
}

// checkEval checks an evaluate request's shape and bounds.
func (s *Service) checkEval(gs []GroupCompletions) error {
	n := 0
	for i, g := range gs {
		if g.StateID == "" || len(g.Completions) == 0 {
			return badRequest("bad_group", "group %d: a state_id and completions are required", i)
		}
		if len(g.Completions) > s.cfg.MaxCompletions {
			return tooLarge("too_many_completions", "group %d: %d completions, at most %d", i, len(g.Completions), s.cfg.MaxCompletions)
		}
		for j, c := range g.Completions {
			if len(c) > s.cfg.MaxCompletionBytes {
				return tooLarge("completion_too_long", "group %d completion %d: %d bytes, at most %d", i, j, len(c), s.cfg.MaxCompletionBytes)
			}
		}
		n += len(g.Completions)
	}
	switch {
	case n == 0:
		return badRequest("empty", "no groups")
	case n > s.cfg.MaxSamples:
		return tooLarge("too_many_samples", "%d completions, at most %d", n, s.cfg.MaxSamples)
	case s.c.Builder == nil || s.c.Executor == nil:
		return badRequest("no_executor", "the service has no executor")
	}
	return nil
}

// evalGroup is an evaluated group: its state, its completions, their
// parses and each one's run (an index into the jobs, −1 for none).
type evalGroup struct {
	state  records.State
	texts  []string
	parsed []proposerSample
	at     []int
}

// evalJobs parses the groups' completions and returns one run per
// distinct (task, change), filling each group's parses and runs.
func (s *Service) evalJobs(lg []evalGroup) []loop.RunJob {
	idx := map[string]int{}
	var jobs []loop.RunJob
	for gi := range lg {
		g := &lg[gi]
		g.at = make([]int, len(g.texts))
		for i, smp := range s.parse(g.texts) {
			g.parsed = append(g.parsed, proposerSample{smp.Invalid, smp.Proposal})
			g.at[i] = -1
			if smp.Invalid || smp.Proposal.IsNoChange() {
				continue
			}
			tc := records.TaskChange{Task: g.state.Task, Proposal: smp.Proposal}
			k, ok := idx[tc.Key()]
			if !ok {
				k = len(jobs)
				idx[tc.Key()] = k
				jobs = append(jobs, loop.RunJob{Change: tc})
			}
			g.at[i] = k
		}
	}
	return jobs
}

// evalResponse reports each completion's real outcome and the mean gain
// of the feasible runs in σ_e units.
func evalResponse(lg []evalGroup, runs []loop.RealRun, nJobs int) EvalResponse {
	resp := EvalResponse{API: APIVersion, Groups: make([][]EvalResult, len(lg)), Runs: nJobs}
	var sum float64
	var nf int
	for gi, g := range lg {
		for i, smp := range g.parsed {
			r := EvalResult{Valid: !smp.invalid}
			if !smp.invalid {
				r.Mechanism = smp.p.Mechanism
			}
			if k := g.at[i]; k >= 0 {
				run := runs[k]
				r.Measured, r.Failure = run.Measured, records.Excerpt(run.Failure)
				r.Infeasible = records.Excerpt(run.Record.Infeasible)
				if run.Measured && run.Record.Infeasible == "" {
					r.Gain, r.GainSigmas = run.Record.Gain, run.Record.Gain/g.state.Task.SeedNoise
					sum += r.GainSigmas
					nf++
				}
			}
			resp.Groups[gi] = append(resp.Groups[gi], r)
		}
	}
	if nf > 0 {
		resp.MeanSig = sum / float64(nf)
	}
	return resp
}

// proposerSample is a parsed evaluated completion.
type proposerSample struct {
	invalid bool
	p       records.Proposal
}
