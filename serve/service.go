package serve

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Service is the LM2LM environment service: an lm2lm.Loop driven by
// requests of an outside RL trainer. It hands out research states as chat
// prompts, scores groups of completions with the world model, counts the
// trainer's steps, runs the calibration points through the Executor,
// evaluates proposals on held-out states with real runs, and keeps its
// state durable in Config.Dir. Its methods are safe for concurrent use;
// Handler serves them over HTTP.
type Service struct {
	cfg Config
	c   Components
	met *metrics

	admit chan struct{} // MaxInFlight slots

	mu       sync.Mutex // guards everything below
	loop     *lm2lm.Loop
	states   map[string]stateEntry // issued states by id
	testDraw int                   // held-out draws so far
	scored   int                   // score requests applied
	journal  *os.File
	ops      int // ops journalled since the checkpoint
	cache    map[string]json.RawMessage
	order    []string                 // cache keys, oldest first
	pending  map[string]chan struct{} // keys being computed
	calBusy  bool
	evalRuns int
	evalCost records.Cost
}

// stateEntry is one issued state.
type stateEntry struct {
	State records.State `json:"state"`
	Split string        `json:"split"`
}

// Split names.
const (
	SplitTrain = "train"
	SplitTest  = "test"
)

// snapshot is the service's checkpoint file.
type snapshot struct {
	Format   string                `json:"format"`
	Loop     []byte                `json:"loop"`
	States   map[string]stateEntry `json:"states"`
	TestDraw int                   `json:"test_draws"`
	Scored   int                   `json:"scored"`
	Cache    []cacheEntry          `json:"cache,omitempty"`
	EvalRuns int                   `json:"eval_runs,omitempty"`
	EvalCost records.Cost          `json:"eval_cost"`
}

type cacheEntry struct {
	Key  string          `json:"key"`
	Body json.RawMessage `json:"body"`
}

const snapshotFormat = "lm2lm-serve/state/v1"

// op is one journalled request, replayed in order after the checkpoint.
type op struct {
	Kind   string       `json:"op"` // "states", "score" or "step"
	Key    string       `json:"key"`
	N      int          `json:"n,omitempty"`
	Split  string       `json:"split,omitempty"`
	Step   int          `json:"step,omitempty"`
	Groups []ScoreGroup `json:"groups,omitempty"`
	Preds  []predJSON   `json:"preds,omitempty"`
}

// predJSON is one world-model answer as journalled: a prediction, or the
// text of an error about that one proposal.
type predJSON struct {
	P   rwm.Prediction `json:"p"`
	Bad string         `json:"bad,omitempty"`
}

// badPrediction replays a journalled error about one proposal.
type badPrediction struct{ msg string }

func (e badPrediction) Error() string        { return e.msg }
func (e badPrediction) Is(target error) bool { return target == rwm.ErrBadPrediction }

// New returns a service over c, resuming from Config.Dir when it holds a
// checkpoint: the checkpoint is restored and the journal replayed (no
// world-model call, no run). A calibration that was in flight is not
// resumed here: call Resume before serving.
func New(cfg Config, c Components) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c.World == nil {
		return nil, fmt.Errorf("%w: World is required", ErrConfig)
	}
	if cfg.Loop.Calibration != lm2lm.Static && (c.Builder == nil || c.Executor == nil) {
		return nil, fmt.Errorf("%w: Builder and Executor are required unless calibration is static", ErrConfig)
	}
	for _, t := range c.HeldOut {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("%w: held-out task: %w", ErrConfig, err)
		}
	}
	loop, err := lm2lm.NewLoop(cfg.Loop, c.Tasks, c.Evidence, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	s := &Service{cfg: cfg, c: c, loop: loop, states: map[string]stateEntry{}, cache: map[string]json.RawMessage{},
		pending: map[string]chan struct{}{}, admit: make(chan struct{}, cfg.MaxInFlight)}
	s.met = newMetrics()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.met.update(s)
	return s, nil
}

func (s *Service) snapshotPath() string { return filepath.Join(s.cfg.Dir, "checkpoint.json") }
func (s *Service) journalPath() string  { return filepath.Join(s.cfg.Dir, "journal.jsonl") }

// load restores the checkpoint and replays the journal, then opens the
// journal for appending.
func (s *Service) load() error {
	b, err := os.ReadFile(s.snapshotPath())
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("%w: %w", ErrState, err)
	default:
		var sn snapshot
		if err := json.Unmarshal(b, &sn); err != nil {
			return fmt.Errorf("%w: checkpoint: %w", ErrState, err)
		}
		if sn.Format != snapshotFormat {
			return fmt.Errorf("%w: checkpoint format %q, want %q", ErrState, records.Excerpt(sn.Format), snapshotFormat)
		}
		if err := s.loop.UnmarshalBinary(sn.Loop); err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
		s.states, s.testDraw, s.scored, s.evalRuns, s.evalCost = sn.States, sn.TestDraw, sn.Scored, sn.EvalRuns, sn.EvalCost
		if s.states == nil {
			s.states = map[string]stateEntry{}
		}
		for _, e := range sn.Cache {
			s.remember(e.Key, e.Body)
		}
	}
	if err := s.replay(); err != nil {
		return err
	}
	f, err := os.OpenFile(s.journalPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	s.journal = f
	return nil
}

// replay applies the journal's ops in order. A torn last line (a write cut
// by a kill) is dropped: its request was never answered.
func (s *Service) replay() error {
	f, err := os.Open(s.journalPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), int(s.cfg.MaxBody)*4+(1<<20))
	var good int64
	for sc.Scan() {
		line := sc.Bytes()
		var o op
		if err := json.Unmarshal(line, &o); err != nil {
			break // torn tail
		}
		if _, err := s.apply(o); err != nil {
			return fmt.Errorf("%w: journal replay: %w", ErrState, err)
		}
		good += int64(len(line)) + 1
		s.ops++
	}
	// Cut a torn tail so that later appends start on a fresh line.
	if err := os.Truncate(s.journalPath(), good); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	return nil
}

// commit journals o durably, then applies it. The caller holds mu.
func (s *Service) commit(o op) (json.RawMessage, error) { return s.commitParsed(o, nil) }

// commitParsed is commit with a score op's groups already parsed.
func (s *Service) commitParsed(o op, parsed []lm2lm.Group) (json.RawMessage, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, fmt.Errorf("%w: journal: %w", ErrState, err)
	}
	if _, err := s.journal.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%w: journal: %w", ErrState, err)
	}
	if err := s.journal.Sync(); err != nil {
		return nil, fmt.Errorf("%w: journal: %w", ErrState, err)
	}
	s.ops++
	resp, err := s.applyParsed(o, parsed)
	if err != nil {
		return nil, err
	}
	if s.ops >= s.cfg.SnapshotEvery {
		if err := s.checkpoint(); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// apply performs o on the state and caches its response under o.Key. It
// is deterministic: the journal replays through it.
func (s *Service) apply(o op) (json.RawMessage, error) { return s.applyParsed(o, nil) }

// applyParsed is apply with a score op's groups already resolved and
// parsed (nil: resolve and parse them).
func (s *Service) applyParsed(o op, parsed []lm2lm.Group) (json.RawMessage, error) {
	var resp any
	switch o.Kind {
	case "states":
		resp = s.applyStates(o)
	case "score":
		r, err := s.applyScore(o, parsed)
		if err != nil {
			return nil, err
		}
		resp = r
	case "step":
		resp = struct {
			API  string `json:"api"`
			Step int    `json:"step"`
		}{APIVersion, s.loop.SetStep(o.Step)}
	default:
		return nil, fmt.Errorf("unknown op %q", records.Excerpt(o.Kind))
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return nil, err
	}
	s.remember(o.Key, b)
	s.met.update(s)
	return b, nil
}

// remember caches a response, dropping the oldest beyond Config.Cache.
func (s *Service) remember(key string, body json.RawMessage) {
	if key == "" {
		return
	}
	if _, ok := s.cache[key]; !ok {
		s.order = append(s.order, key)
	}
	s.cache[key] = body
	for len(s.order) > s.cfg.Cache {
		delete(s.cache, s.order[0])
		s.order = s.order[1:]
	}
}

// checkpoint writes the checkpoint atomically and empties the journal. The
// caller holds mu.
func (s *Service) checkpoint() error {
	lb, err := s.loop.MarshalBinary()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	sn := snapshot{Format: snapshotFormat, Loop: lb, States: s.states, TestDraw: s.testDraw, Scored: s.scored,
		EvalRuns: s.evalRuns, EvalCost: s.evalCost}
	for _, k := range s.order {
		sn.Cache = append(sn.Cache, cacheEntry{Key: k, Body: s.cache[k]})
	}
	b, err := json.Marshal(sn)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := writeAtomic(s.snapshotPath(), b); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := s.journal.Truncate(0); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	if err := s.journal.Sync(); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	s.ops = 0
	return nil
}

// writeAtomic writes b to path through a synced temporary file and a
// rename, so that path always holds a whole file.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Close closes the journal. The state on disk is complete at every moment;
// Close writes nothing.
func (s *Service) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.journal == nil {
		return nil
	}
	err := s.journal.Close()
	s.journal = nil
	return err
}

// StateID returns the id of a state: "s-" and the first 16 hex digits of
// the SHA-256 of its JSON encoding.
func StateID(st records.State) string {
	b, _ := json.Marshal(st)
	sum := sha256.Sum256(b)
	return "s-" + hex.EncodeToString(sum[:8])
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

func (s *Service) applyStates(o op) StatesResponse {
	var sts []records.State
	if o.Split == SplitTest {
		sts = s.drawTest(o.N)
	} else {
		sts = s.loop.Draw(o.N)
	}
	resp := StatesResponse{API: APIVersion, PromptVersion: openai.PromptVersion, Step: s.loop.Step(), States: make([]StateRow, 0, len(sts))}
	for _, st := range sts {
		id := StateID(st)
		s.states[id] = stateEntry{State: st, Split: o.Split}
		msgs, err := openai.Messages(st, s.c.Catalogue, s.cfg.AllowNoChange, 0)
		if err != nil {
			// A state of a valid task renders; a failure is a broken
			// catalogue, reported in the prompt's place.
			msgs = []openai.Message{{Role: "system", Content: "prompt unavailable: " + records.Excerpt(err.Error())}}
		}
		resp.States = append(resp.States, StateRow{StateID: id, Task: st.Task.ID, Split: o.Split, Prompt: msgs})
	}
	return resp
}

// drawTest draws n held-out states: a task uniformly and a history from
// Components.Histories, from a source derived from the seed and the number
// of held-out draws so far.
func (s *Service) drawTest(n int) []records.State {
	if len(s.c.HeldOut) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(s.cfg.Loop.Seed, 0x74657374+uint64(s.testDraw)))
	s.testDraw++
	pool := s.c.Histories
	if pool == nil {
		pool = &records.Pool{}
	}
	return pool.States(rng, s.c.HeldOut, n, s.cfg.Loop.MaxHistory)
}

// parse turns completions into samples: a proposal of the catalogue, or
// an invalid sample with the parser's reason (METHOD.md §1 Reward 2).
func (s *Service) parse(st records.State, completions []string) []proposer.Sample {
	out := make([]proposer.Sample, len(completions))
	for i, c := range completions {
		p, err := openai.ParseProposal(c, s.c.Catalogue, s.cfg.AllowNoChange)
		if err != nil {
			out[i] = proposer.Sample{Invalid: true, Reason: err.Error()}
			continue
		}
		p.Text = truncate(c, s.cfg.TextBytes)
		out[i] = proposer.Sample{Proposal: p}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return records.Excerpt(s[:n])
}

// groups resolves a request's groups to the loop's, or a *RequestError.
func (s *Service) groups(gs []ScoreGroup) ([]lm2lm.Group, error) {
	out := make([]lm2lm.Group, len(gs))
	for i, g := range gs {
		e, ok := s.states[g.StateID]
		if !ok {
			return nil, badRequest("unknown_state", "group %d: unknown state_id %q (ask /v1/states or /v1/dataset first)", i, records.Excerpt(g.StateID))
		}
		out[i] = lm2lm.Group{State: e.State, Samples: s.parse(e.State, g.Completions)}
	}
	return out, nil
}

// ScoreGroup is one state's completions in a score request.
type ScoreGroup struct {
	StateID     string   `json:"state_id"`
	Completions []string `json:"completions"`
}

// SampleScore is one completion's score.
type SampleScore struct {
	Reward    float64 `json:"reward"`
	Advantage float64 `json:"advantage"`
	Valid     bool    `json:"valid"`
	Mechanism string  `json:"mechanism,omitempty"`
	Gain      float64 `json:"gain"`
	Reason    string  `json:"reason,omitempty"`
}

// GroupScore is one group's scores.
type GroupScore struct {
	StateID string        `json:"state_id"`
	Tau     float64       `json:"tau"`
	Kept    bool          `json:"kept"`
	Samples []SampleScore `json:"samples"`
}

// ScoreResponse answers a score request.
type ScoreResponse struct {
	API    string       `json:"api"`
	Step   int          `json:"step"`
	Groups []GroupScore `json:"groups"`
	Kept   int          `json:"kept"`
	Flat   int          `json:"flat"`
	// MeanReward and Invalid summarise the request (RolloutReport).
	MeanReward float64 `json:"mean_reward"`
	Invalid    int     `json:"invalid"`
}

func (s *Service) applyScore(o op, gs []lm2lm.Group) (ScoreResponse, error) {
	if gs == nil {
		var err error
		if gs, err = s.groups(o.Groups); err != nil {
			return ScoreResponse{}, err
		}
	}
	preds := make([]lm2lm.Prediction, len(o.Preds))
	for i, p := range o.Preds {
		preds[i] = lm2lm.Prediction{Prediction: p.P}
		if p.Bad != "" {
			preds[i].Err = badPrediction{p.Bad}
		}
	}
	now := time.Time{}
	if s.cfg.Now != nil {
		now = s.cfg.Now()
	}
	s.loop.SetStep(o.Step)
	sc, err := s.loop.ScoreGroups(gs, preds, now)
	if err != nil {
		return ScoreResponse{}, err
	}
	s.scored++
	resp := ScoreResponse{API: APIVersion, Step: s.loop.Step(), Groups: make([]GroupScore, len(sc.Groups)),
		Kept: sc.Report.Kept, Flat: sc.Report.Flat, MeanReward: sc.Report.MeanReward, Invalid: sc.Report.Invalid}
	for gi, g := range sc.Groups {
		gsc := GroupScore{StateID: o.Groups[gi].StateID, Tau: g.Tau, Kept: g.Kept, Samples: make([]SampleScore, len(g.Rewards))}
		for i := range g.Rewards {
			smp := gs[gi].Samples[i]
			gsc.Samples[i] = SampleScore{Reward: g.Rewards[i], Advantage: g.Advantages[i], Valid: g.Valid[i],
				Gain: g.Gains[i], Reason: records.Excerpt(g.Reasons[i])}
			if !smp.Invalid {
				gsc.Samples[i].Mechanism = smp.Proposal.Mechanism
			}
		}
		resp.Groups[gi] = gsc
	}
	s.met.scored(sc)
	return resp, nil
}

// Info is the service's state in brief.
type Info struct {
	API          string `json:"api"`
	Step         int    `json:"step"`
	Scored       int    `json:"scored_requests"`
	Calibrations int    `json:"calibrations"`
	Evidence     int    `json:"evidence"`
	Candidates   int    `json:"candidates"`
	RealRuns     int    `json:"real_runs"`
	Reused       int    `json:"reused_runs"`
	EvalRuns     int    `json:"eval_runs"`
	Calibrating  bool   `json:"calibrating"`
	// Digest is the SHA-256 of the loop's checkpoint without what was
	// paid (cost, runs, reused: a resumed calibration is served its
	// finished runs from the store): equal digests mean equal state.
	Digest string `json:"digest"`
}

// info returns the service's state. The caller holds mu.
func (s *Service) info() Info {
	_, runs, reused := s.loop.Cost()
	in := Info{API: APIVersion, Step: s.loop.Step(), Scored: s.scored, Calibrations: s.loop.Calibrations(),
		Evidence: s.loop.Evidence().Len(), Candidates: s.loop.Candidates(), RealRuns: runs, Reused: reused,
		EvalRuns: s.evalRuns, Calibrating: s.calBusy}
	in.Digest = s.digest()
	return in
}

// Info returns the service's state in brief.
func (s *Service) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info()
}

// once answers key from the cache, or computes it with f while other
// requests with the same key wait for its result.
func (s *Service) once(key string, f func() (json.RawMessage, error)) (json.RawMessage, error) {
	for {
		s.mu.Lock()
		if b, ok := s.cache[key]; ok && key != "" {
			s.mu.Unlock()
			s.met.repeats.Inc()
			return b, nil
		}
		ch, busy := s.pending[key]
		if !busy || key == "" {
			if key != "" {
				s.pending[key] = make(chan struct{})
			}
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
// the first answer.
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
	return s.once(key, func() (json.RawMessage, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.commit(op{Kind: "states", Key: key, N: n, Split: split})
	})
}

// Score scores groups of completions (one group per state), at the
// trainer's step when step ≥ 0 or else at the count of score requests
// applied so far; a calibration due at that step runs first (Advance).
func (s *Service) Score(ctx context.Context, key string, step int, gs []ScoreGroup) (json.RawMessage, error) {
	if err := s.checkGroups(gs); err != nil {
		return nil, err
	}
	return s.once(key, func() (json.RawMessage, error) {
		s.mu.Lock()
		if step < 0 {
			step = s.scored
		}
		s.mu.Unlock()
		if _, err := s.advance(ctx, step); err != nil {
			return nil, err
		}
		s.mu.Lock()
		lg, err := s.groups(gs)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		jobs := s.loop.ScoreJobs(lg)
		s.mu.Unlock()
		preds, err := s.predict(ctx, jobs)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.commitParsed(op{Kind: "score", Key: key, Step: step, Groups: gs, Preds: preds}, lg)
	})
}

// checkGroups enforces the batch bounds.
func (s *Service) checkGroups(gs []ScoreGroup) error {
	if len(gs) == 0 {
		return badRequest("empty", "no groups")
	}
	if len(gs) > s.cfg.MaxGroups {
		return tooLarge("too_many_groups", "%d groups, at most %d", len(gs), s.cfg.MaxGroups)
	}
	for i, g := range gs {
		if len(g.Completions) == 0 {
			return badRequest("empty_group", "group %d has no completions", i)
		}
		if len(g.Completions) > s.cfg.MaxCompletions {
			return tooLarge("too_many_completions", "group %d: %d completions, at most %d", i, len(g.Completions), s.cfg.MaxCompletions)
		}
		for j, c := range g.Completions {
			if len(c) > s.cfg.MaxCompletionBytes {
				return tooLarge("completion_too_long", "group %d completion %d: %d bytes, at most %d", i, j, len(c), s.cfg.MaxCompletionBytes)
			}
		}
	}
	return nil
}

// predict asks the world model every job, at most Parallel at once. An
// error about one proposal is kept as its answer; any other fails the
// request.
func (s *Service) predict(ctx context.Context, jobs []lm2lm.PredictJob) ([]predJSON, error) {
	out := make([]predJSON, len(jobs))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(s.cfg.Parallel)
	for k, j := range jobs {
		eg.Go(func() error {
			p, err := s.c.World.Predict(ectx, j.Query)
			switch {
			case err == nil:
				if verr := p.Validate(); verr != nil {
					out[k] = predJSON{Bad: fmt.Sprintf("%v: %v", rwm.ErrBadPrediction, verr)}
					return nil
				}
				out[k] = predJSON{P: p}
			case errors.Is(err, rwm.ErrBadPrediction) || errors.Is(err, records.ErrInvalid):
				out[k] = predJSON{Bad: err.Error()}
			default:
				return fmt.Errorf("serve: predict: %w", err)
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// AdvanceResponse answers an advance request.
type AdvanceResponse struct {
	API          string              `json:"api"`
	Step         int                 `json:"step"`
	Calibrations []CalibrationResult `json:"calibrations,omitempty"`
}

// CalibrationResult is one calibration point as reported on the wire
// (lm2lm.CalibrationReport; monitors that are undefined are absent).
type CalibrationResult struct {
	Step         int              `json:"step"`
	Budget       int              `json:"budget"`
	Executed     int              `json:"executed"`
	Infeasible   int              `json:"infeasible"`
	MeanRealGain float64          `json:"mean_real_gain_sigmas"`
	Records      []records.Record `json:"records"`
	Failures     []string         `json:"failures,omitempty"`
	DeltaM       *float64         `json:"delta_m,omitempty"`
	Gap          *float64         `json:"gap,omitempty"`
	Cosine       *float64         `json:"advantage_cosine,omitempty"`
	Accuracy     *float64         `json:"pairwise_accuracy,omitempty"`
}

func calibrationResult(r lm2lm.CalibrationReport) CalibrationResult {
	m := r.Monitors
	return CalibrationResult{Step: r.Step, Budget: r.Budget, Executed: r.Executed, Infeasible: r.Infeasible,
		MeanRealGain: r.MeanRealGain, Records: r.Records, Failures: r.Failures,
		DeltaM: finPtr(m.Bias.Delta), Gap: finPtr(m.Bias.Gap()), Cosine: finPtr(m.Cosine), Accuracy: finPtr(m.Accuracy)}
}

// Advance records the trainer's step and runs the calibration points due
// at it (one calibration at a time: a second caller waits for the first).
func (s *Service) Advance(ctx context.Context, key string, step int) (json.RawMessage, error) {
	if step < 0 {
		return nil, badRequest("bad_step", "step = %d, want ≥ 0", step)
	}
	return s.once(key, func() (json.RawMessage, error) {
		reps, err := s.advance(ctx, step)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		resp := AdvanceResponse{API: APIVersion, Step: s.loop.Step()}
		for _, r := range reps {
			resp.Calibrations = append(resp.Calibrations, calibrationResult(r))
		}
		b, err := json.Marshal(resp)
		if err != nil {
			return nil, err
		}
		s.remember(key, b)
		return b, nil
	})
}

// advance sets the step and runs every calibration due, each planned,
// checkpointed, executed and checkpointed again.
func (s *Service) advance(ctx context.Context, step int) ([]lm2lm.CalibrationReport, error) {
	var reps []lm2lm.CalibrationReport
	for {
		s.mu.Lock()
		for s.calBusy {
			s.mu.Unlock()
			if err := s.waitCalibration(ctx); err != nil {
				return reps, err
			}
			s.mu.Lock()
		}
		before := s.loop.Step()
		s.loop.SetStep(step)
		jobs, ok := s.loop.Calibrate()
		if !ok {
			var err error
			if s.loop.Step() != before {
				_, err = s.commit(op{Kind: "step", Step: step})
			}
			s.mu.Unlock()
			return reps, err
		}
		s.calBusy = true
		err := s.checkpoint()
		s.mu.Unlock()
		if err != nil {
			s.endCalibration()
			return reps, err
		}
		rep, err := s.runCalibration(ctx, jobs)
		if err != nil {
			return reps, err
		}
		reps = append(reps, rep)
	}
}

// Resume finishes a calibration that was in flight when the service
// stopped: its runs are executed again (an idempotent executor serves the
// finished ones from its store without paying). Call it before serving.
func (s *Service) Resume(ctx context.Context) (*lm2lm.CalibrationReport, error) {
	s.mu.Lock()
	jobs := s.loop.PendingRuns()
	if jobs == nil || s.calBusy {
		s.mu.Unlock()
		return nil, nil
	}
	s.calBusy = true
	s.mu.Unlock()
	rep, err := s.runCalibration(ctx, jobs)
	if err != nil {
		return nil, err
	}
	return &rep, nil
}

// runCalibration executes the calibration's runs and finishes it. The
// caller has set calBusy.
func (s *Service) runCalibration(ctx context.Context, jobs []lm2lm.RunJob) (lm2lm.CalibrationReport, error) {
	defer s.endCalibration()
	runs, err := s.execute(ctx, jobs)
	if err != nil {
		return lm2lm.CalibrationReport{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rep, err := s.loop.FinishCalibration(runs)
	if err != nil {
		return rep, err
	}
	s.met.calibrated(rep)
	s.met.update(s)
	return rep, s.checkpoint()
}

func (s *Service) endCalibration() {
	s.mu.Lock()
	s.calBusy = false
	s.mu.Unlock()
}

// waitCalibration waits until no calibration is in flight.
func (s *Service) waitCalibration(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("serve: wait for the calibration: %w", ctx.Err())
		case <-t.C:
		}
		s.mu.Lock()
		busy := s.calBusy
		s.mu.Unlock()
		if !busy {
			return nil
		}
	}
}

// execute runs jobs for real, at most Parallel at once, in job order.
func (s *Service) execute(ctx context.Context, jobs []lm2lm.RunJob) ([]lm2lm.RealRun, error) {
	runs := make([]lm2lm.RealRun, len(jobs))
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(s.cfg.Parallel)
	for i, j := range jobs {
		eg.Go(func() error {
			r, err := lm2lm.RunRealJob(ectx, s.c.Builder, s.c.Executor, j)
			runs[i] = r
			return err
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, fmt.Errorf("serve: runs: %w", err)
	}
	return runs, nil
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
}

// Evaluate runs a policy's proposals for real, one run per distinct
// (task, change) of the request, on held-out (or any issued) states, and
// returns the real gains (METHOD.md §1 Data and evaluation); unparseable,
// infeasible and unmeasured proposals are reported as such, and the mean
// is over the feasible runs in σ_e units. Runs are not added to M.
func (s *Service) Evaluate(ctx context.Context, key string, gs []ScoreGroup) (json.RawMessage, error) {
	if err := s.checkGroups(gs); err != nil {
		return nil, err
	}
	if s.c.Builder == nil || s.c.Executor == nil {
		return nil, badRequest("no_executor", "the service has no executor")
	}
	return s.once(key, func() (json.RawMessage, error) {
		s.mu.Lock()
		lg, err := s.groups(gs)
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		idx := map[string]int{}
		var jobs []lm2lm.RunJob
		at := make([][]int, len(lg))
		for gi, g := range lg {
			at[gi] = make([]int, len(g.Samples))
			for i, smp := range g.Samples {
				at[gi][i] = -1
				if smp.Invalid || smp.Proposal.IsNoChange() {
					continue
				}
				tc := records.TaskChange{Task: g.State.Task, Proposal: smp.Proposal}
				k, ok := idx[tc.Key()]
				if !ok {
					k = len(jobs)
					idx[tc.Key()] = k
					jobs = append(jobs, lm2lm.RunJob{Change: tc})
				}
				at[gi][i] = k
			}
		}
		runs, err := s.execute(ctx, jobs)
		if err != nil {
			return nil, err
		}
		resp := EvalResponse{API: APIVersion, Groups: make([][]EvalResult, len(lg)), Runs: len(jobs)}
		var sum float64
		var n int
		for gi, g := range lg {
			for i, smp := range g.Samples {
				r := EvalResult{Valid: !smp.Invalid}
				if !smp.Invalid {
					r.Mechanism = smp.Proposal.Mechanism
				}
				if k := at[gi][i]; k >= 0 {
					run := runs[k]
					r.Measured, r.Failure = run.Measured, records.Excerpt(run.Failure)
					r.Infeasible = records.Excerpt(run.Record.Infeasible)
					if run.Measured && run.Record.Infeasible == "" {
						r.Gain, r.GainSigmas = run.Record.Gain, run.Record.Gain/g.State.Task.SeedNoise
						sum += r.GainSigmas
						n++
					}
				}
				resp.Groups[gi] = append(resp.Groups[gi], r)
			}
		}
		if n > 0 {
			resp.MeanSig = sum / float64(n)
		}
		b, err := json.Marshal(resp)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range runs {
			if r.Ran && !r.Reused {
				s.evalRuns++
				s.evalCost = s.evalCost.Add(r.Cost)
			}
		}
		s.remember(key, b)
		return b, nil
	})
}

// MonitorsResponse reports the reliability monitors.
type MonitorsResponse struct {
	API string `json:"api"`
	// Calibrated is false before the first calibration; the monitors are
	// then absent.
	Calibrated bool `json:"calibrated"`
	// DeltaM is Δ_M = J̄ − Ĵ_M and Gap = Ĵ_M − J̄ on the last
	// calibration's runs (METHOD.md §1 Known weaknesses); Cosine the
	// advantage cosine, Accuracy the pairwise accuracy.
	DeltaM   *float64 `json:"delta_m,omitempty"`
	Gap      *float64 `json:"gap,omitempty"`
	Cosine   *float64 `json:"advantage_cosine,omitempty"`
	Accuracy *float64 `json:"pairwise_accuracy,omitempty"`
	// Share is each mechanism's share of the proposals scored since the
	// last calibration.
	Share []ShareRow `json:"mechanism_share"`
}

// ShareRow is one mechanism's share.
type ShareRow struct {
	Mechanism string  `json:"mechanism"`
	Count     int     `json:"count"`
	Fraction  float64 `json:"fraction"`
}

// Monitors returns the monitors (NaN ones absent).
func (s *Service) Monitors() MonitorsResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := MonitorsResponse{API: APIVersion, Share: []ShareRow{}}
	if m, ok := s.loop.LastMonitors(); ok {
		r.Calibrated = true
		r.DeltaM, r.Gap, r.Cosine, r.Accuracy = finPtr(m.Bias.Delta), finPtr(m.Bias.Gap()), finPtr(m.Cosine), finPtr(m.Accuracy)
	}
	for _, sh := range s.loop.CandidateShare() {
		r.Share = append(r.Share, ShareRow{Mechanism: sh.Mechanism, Count: sh.Count, Fraction: sh.Fraction})
	}
	return r
}

func finPtr(x float64) *float64 {
	if x != x || x > 1e308 || x < -1e308 {
		return nil
	}
	return &x
}

// Dataset writes n new states of split as JSON Lines dataset rows (see
// DatasetRow) to a buffer; key makes a repeated request return the same
// rows.
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
// the label column (label, with --label_key label).
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
	// for OpenRLHF's --input_key without a chat template.
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

// digest is Info.Digest. The caller holds mu.
func (s *Service) digest() string {
	b, err := s.loop.MarshalBinary()
	if err != nil {
		return ""
	}
	var env struct{ Body map[string]json.RawMessage }
	if err := json.Unmarshal(b, &env); err != nil {
		return ""
	}
	delete(env.Body, "cost")
	delete(env.Body, "runs")
	delete(env.Body, "reused")
	nb, err := json.Marshal(env.Body) // map keys sorted
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(nb)
	return hex.EncodeToString(sum[:])
}
