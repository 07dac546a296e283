package serve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/lm2lm/lm2lm/loop"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/proposer/openai"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"slices"
	"strconv"
	"sync"
	"time"
)

// A group is one state's G completions at one trainer step, named by the
// trainer (verl's uid, a TRL prompt index, OpenRLHF's label, prime-rl's
// group id). Its samples may arrive in any number of requests, from any
// number of processes; the service assembles them, applies the group rules
// once (METHOD.md §1 Reward: duplicates, the diversity bonus and σ_G read
// the whole group; τ_e reads the group's predictions) and gives every
// sample the same answer however the group was split. A group still
// incomplete GroupDeadline after its first sample is scored on what
// arrived and marked partial.

// assembly is a group being assembled. Guarded by Service.mu.
type assembly struct {
	key      string
	step     int
	group    string
	stateID  string
	size     int
	texts    []string
	have     []bool
	n        int
	closing  bool // complete or past its deadline: being scored
	complete bool // its last sample arrived; the request that brought it scores it
	launched bool // its scoring has started
	partial  bool
	timer    *time.Timer
	done     chan struct{} // closed once ans is set
	ans      *groupAnswer
}

// groupAnswer is what a scored (or failed) group answers its samples.
type groupAnswer struct {
	StateID string `json:"state_id"`
	Size    int    `json:"size"`
	Partial bool   `json:"partial,omitempty"`
	// Failure, when set, is why the group has no rewards (a world-model
	// error or timeout): its samples answer failure_reason.
	Failure string  `json:"failure,omitempty"`
	Tau     float64 `json:"tau"`
	Kept    bool    `json:"kept"`
	// Index is the index in the group of each scored sample, Samples
	// their scores in that order, and Digests their completions' digests
	// (textDigest), so that a later request naming the group is answered
	// only for the same text. Absent in answers of an earlier version's
	// checkpoint, which are then given without the comparison.
	Index   []int         `json:"index"`
	Samples []SampleScore `json:"samples"`
	Digests []string      `json:"digests,omitempty"`
}

// textDigest is a completion's digest in a group answer: the first 8
// bytes of its SHA-256, in hex.
func textDigest(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:8])
}

// sameText returns an error when the answer scored another completion at
// idx than text: the same group name at the same step with other
// completions (a resumed trainer reusing its names) must not get the
// rewards of the first.
func (a *groupAnswer) sameText(group string, step, idx int, text string) error {
	if len(a.Digests) != len(a.Index) {
		return nil
	}
	for p, i := range a.Index {
		if i == idx {
			if got := textDigest(text); got != a.Digests[p] {
				return conflict("group_conflict", "group %q at step %d was scored with other completions: sample %d sent with digest %s, scored with digest %s; give a new run's groups new names",
					records.Excerpt(group), step, idx, got, a.Digests[p])
			}
			return nil
		}
	}
	return nil
}

// sample returns the answer of the sample at index idx.
func (a *groupAnswer) sample(group string, idx int) SampleScore {
	base := SampleScore{Group: group, Index: idx, StateID: a.StateID, GroupSize: a.Size, Received: len(a.Index),
		Partial: a.Partial, Tau: a.Tau, Kept: a.Kept}
	if a.Failure != "" {
		base.FailureReason = a.Failure
		return base
	}
	for p, i := range a.Index {
		if i == idx {
			smp := a.Samples[p]
			smp.Group, smp.Index, smp.StateID, smp.GroupSize, smp.Received = group, idx, a.StateID, a.Size, len(a.Index)
			smp.Partial, smp.Tau, smp.Kept = a.Partial, a.Tau, a.Kept
			return smp
		}
	}
	base.FailureReason = "late: the group was scored at its deadline before this sample arrived"
	return base
}

// groupOp is a scored group as journalled.
type groupOp struct {
	Key         string     `json:"key"`
	Group       string     `json:"group"`
	StateID     string     `json:"state_id"`
	Size        int        `json:"size"`
	Partial     bool       `json:"partial,omitempty"`
	Index       []int      `json:"index"`
	Completions []string   `json:"completions"`
	Preds       []predJSON `json:"preds"`
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

// groupKey is the assembly key of a group: the step and the trainer's
// name for it.
func groupKey(step int, group string) string { return strconv.Itoa(step) + "/" + group }

// sampleIn is one sample of a score request, normalised.
type sampleIn struct {
	group, stateID, text string
	size, index          int // index < 0: the next free one
}

// join adds a sample to its group and returns the group being assembled
// (with the sample's index in it), or the answer of a group already
// scored. The caller holds mu.
func (s *Service) join(step int, in sampleIn) (*assembly, *groupAnswer, int, error) {
	key := groupKey(step, in.group)
	if ans, ok := s.done.get(key); ok {
		if ans.StateID != in.stateID || ans.Size != in.size {
			return nil, nil, 0, conflict("group_mismatch", "group %q at step %d was scored for state %s with G = %d", records.Excerpt(in.group), step, ans.StateID, ans.Size)
		}
		if in.index < 0 {
			return nil, nil, 0, conflict("group_done", "group %q at step %d is scored; a retried sample must state its index", records.Excerpt(in.group), step)
		}
		if err := ans.sameText(in.group, step, in.index, in.text); err != nil {
			return nil, nil, 0, err
		}
		return nil, ans, in.index, nil
	}
	a := s.asm[key]
	if a == nil {
		e, ok := s.states[in.stateID]
		if !ok {
			return nil, nil, 0, badRequest("unknown_state", "unknown state_id %q (ask /v1/states or /v1/dataset first; the oldest of more than %d issued states are forgotten)", records.Excerpt(in.stateID), s.cfg.MaxIssued)
		}
		if e.Split != SplitTrain {
			return nil, nil, 0, badRequest("test_state", "state %s is a held-out state: it may only be evaluated (/v1/evaluate), never scored", in.stateID)
		}
		if len(s.asm) >= s.cfg.MaxPendingGroups {
			return nil, nil, 0, unavailable("busy", "%d groups are being assembled; retry later", len(s.asm))
		}
		a = &assembly{key: key, step: step, group: in.group, stateID: in.stateID, size: in.size,
			texts: make([]string, in.size), have: make([]bool, in.size), done: make(chan struct{})}
		a.timer = time.AfterFunc(s.cfg.GroupDeadline, func() { s.deadline(a) })
		s.asm[key] = a
	}
	if a.stateID != in.stateID || a.size != in.size {
		return nil, nil, 0, conflict("group_mismatch", "group %q at step %d is for state %s with G = %d, not %s with G = %d",
			records.Excerpt(in.group), step, a.stateID, a.size, records.Excerpt(in.stateID), in.size)
	}
	idx := in.index
	if idx < 0 {
		for i, h := range a.have {
			if !h {
				idx = i
				break
			}
		}
		if idx < 0 {
			return nil, nil, 0, conflict("group_full", "group %q at step %d already has its %d samples", records.Excerpt(in.group), step, a.size)
		}
	} else if a.have[idx] {
		if a.texts[idx] != in.text {
			return nil, nil, 0, conflict("sample_conflict", "group %q at step %d: sample %d was sent with another completion", records.Excerpt(in.group), step, idx)
		}
		return a, nil, idx, nil // a retried sample
	}
	if a.closing {
		return a, nil, idx, nil // late: the group is being scored without it
	}
	a.texts[idx], a.have[idx] = in.text, true
	a.n++
	if a.n == a.size {
		a.closing, a.complete = true, true
		a.timer.Stop()
	}
	return a, nil, idx, nil
}

// deadline scores a group still incomplete at its deadline on what
// arrived.
func (s *Service) deadline(a *assembly) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || a.closing {
		return
	}
	a.closing, a.partial = true, true
	s.goBG(func() { s.finish([]*assembly{a}) })
}

// finish scores assembled groups: their world-model queries under the
// current M (all at once, at most Parallel calls in flight), then, in the
// given order, the journalled ops that shape them, so that the groups a
// request completes are applied in the request's order. If a
// calibration's records reached M meanwhile, it predicts again under the
// new M. A world-model failure answers that group's samples with a failure
// reason and changes nothing: the trainer may send the group again.
func (s *Service) finish(as []*assembly) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		ps, all := s.prepare(as)
		epoch := s.loop.Status().Calibrations
		s.mu.Unlock()

		preds, errs := s.predictAll(all)
		off := 0
		for _, p := range ps {
			if p == nil {
				continue
			}
			p.preds = preds[off : off+len(p.jobs)]
			for _, err := range errs[off : off+len(p.jobs)] {
				if err != nil && p.err == nil {
					p.err = err
				}
			}
			off += len(p.jobs)
		}

		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		if s.loop.Status().Calibrations != epoch {
			s.mu.Unlock()
			continue
		}
		for k, a := range as {
			s.commitGroup(a, ps[k])
		}
		s.mu.Unlock()
		return
	}
}

// prepared is a group ready for its world-model queries: its samples'
// indices, completions and parses, the queries (the loop's Ready) and,
// once asked, their answers or the first error.
type prepared struct {
	idx    []int
	texts  []string
	parsed []proposer.Sample
	jobs   []loop.PredictJob
	preds  []predJSON
	err    error
}

// prepare parses each group and lists its queries under the current M
// (nil for a group whose state was forgotten, which it fails), and returns
// all the queries in order. The caller holds mu.
func (s *Service) prepare(as []*assembly) ([]*prepared, []loop.PredictJob) {
	ps := make([]*prepared, len(as))
	var all []loop.PredictJob
	for k, a := range as {
		e, ok := s.states[a.stateID]
		if !ok {
			if a.ans == nil {
				s.fail(a, "state_evicted: the state was forgotten before its group was scored")
			}
			continue
		}
		p := &prepared{}
		for i, h := range a.have {
			if h {
				p.idx, p.texts = append(p.idx, i), append(p.texts, a.texts[i])
			}
		}
		p.parsed = s.parse(p.texts)
		p.jobs = s.loop.Ready(loop.Group{State: e.State, Samples: p.parsed}).Predict
		all = append(all, p.jobs...)
		ps[k] = p
	}
	return ps, all
}

// commitGroup journals a predicted group, which scores it, or answers its
// samples with why it cannot be scored. The caller holds mu.
func (s *Service) commitGroup(a *assembly, p *prepared) {
	_, known := s.states[a.stateID]
	switch {
	case p == nil:
	case !known: // forgotten while its predictions ran: journal nothing replay could not apply
		s.fail(a, "state_evicted: the state was forgotten before its group was scored")
	case p.err != nil:
		s.fail(a, "world_model: "+records.ErrorExcerpt(p.err))
	default:
		o := op{Kind: "group", Group: &groupOp{Key: a.key, Group: a.group, StateID: a.stateID, Size: a.size,
			Partial: a.partial, Index: p.idx, Completions: p.texts, Preds: p.preds}, parsed: p.parsed}
		if _, err := s.commit(o); err != nil && a.ans == nil {
			s.fail(a, "state: "+records.ErrorExcerpt(err))
		}
	}
}

// fail answers a group's samples with a failure reason. The caller holds
// mu.
func (s *Service) fail(a *assembly, reason string) {
	a.ans = &groupAnswer{StateID: a.stateID, Size: a.size, Partial: a.partial, Failure: reason}
	close(a.done)
	delete(s.asm, a.key)
	s.failed++
	s.met.failures.Inc()
}

// applyGroup shapes a journalled group: it is deterministic, so the
// journal replays through it. parsed are its completions already parsed
// (nil: parse them). The caller holds mu.
func (s *Service) applyGroup(g *groupOp, parsed []proposer.Sample) (*groupAnswer, error) {
	if len(g.Index) != len(g.Completions) || len(g.Index) == 0 || g.Size < len(g.Index) {
		return nil, fmt.Errorf("group %q: %d indices, %d completions, G = %d", records.Excerpt(g.Key), len(g.Index), len(g.Completions), g.Size)
	}
	e, ok := s.states[g.StateID]
	if !ok {
		return nil, fmt.Errorf("group %q: unknown state %q", records.Excerpt(g.Key), records.Excerpt(g.StateID))
	}
	if len(parsed) != len(g.Completions) {
		parsed = s.parse(g.Completions)
	}
	lg := loop.Group{State: e.State, Samples: parsed}
	preds := make([]loop.Prediction, len(g.Preds))
	for i, p := range g.Preds {
		preds[i] = loop.Prediction{Prediction: p.P}
		if p.Bad != "" {
			preds[i].Err = badPrediction{p.Bad}
		}
	}
	sc, err := s.loop.Score([]loop.Group{lg}, preds)
	if err != nil {
		return nil, err
	}
	if err := s.loop.Expand(s.now()); err != nil {
		return nil, err
	}
	s.scored++
	if s.scored%trimEvery == 0 {
		// Trimmed every trimEvery groups, not at each: a trim copies what
		// it keeps.
		s.loop.Status().Pool.TrimSynthetic(s.cfg.PoolPerTask)
	}
	sg := sc.Groups[0]
	ans := &groupAnswer{StateID: g.StateID, Size: g.Size, Partial: g.Partial, Tau: sg.Tau, Kept: sg.Kept, Index: g.Index,
		Samples: make([]SampleScore, len(g.Index)), Digests: make([]string, len(g.Index))}
	for i := range g.Index {
		ans.Digests[i] = textDigest(g.Completions[i])
		r := sg.Rewards[i]
		smp := SampleScore{Reward: &r, Advantage: sg.Advantages[i], Valid: sg.Valid[i], Gain: sg.Gains[i],
			Reason: records.Excerpt(sg.Reasons[i])}
		if !lg.Samples[i].Invalid {
			smp.Mechanism = lg.Samples[i].Proposal.Mechanism
		}
		ans.Samples[i] = smp
	}
	s.done.put(g.Key, ans)
	s.met.scored(sc)
	if a := s.asm[g.Key]; a != nil {
		a.ans = ans
		close(a.done)
		delete(s.asm, g.Key)
	}
	return ans, nil
}

// trimEvery is how many scored groups pass between two trims of the
// state pool to its bound (PoolPerTask), which it may exceed by as many
// groups in between.
const trimEvery = 64

// parse turns completions into samples: a proposal of the catalogue, or
// an invalid sample with the parser's reason (METHOD.md §1 Reward 2).
func (s *Service) parse(completions []string) []proposer.Sample {
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

// predictAll asks the world model every job, at most Parallel at once
// over the whole service, each call bounded by PredictTimeout. An error
// about one proposal is kept as its answer; any other is that job's error.
func (s *Service) predictAll(jobs []loop.PredictJob) ([]predJSON, []error) {
	out := make([]predJSON, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for k, j := range jobs {
		wg.Go(func() {
			select {
			case s.predict <- struct{}{}:
			case <-s.ctx.Done():
				errs[k] = s.ctx.Err()
				return
			}
			defer func() { <-s.predict }()
			ctx, cancel := context.WithTimeout(s.ctx, s.cfg.PredictTimeout)
			defer cancel()
			p, err := s.c.World.Predict(ctx, j.Query)
			switch {
			case err == nil:
				if verr := p.Validate(); verr != nil {
					out[k] = predJSON{Bad: fmt.Sprintf("%v: %v", rwm.ErrBadPrediction, verr)}
				} else {
					out[k] = predJSON{P: p}
				}
			case errors.Is(err, rwm.ErrBadPrediction) || errors.Is(err, records.ErrInvalid):
				out[k] = predJSON{Bad: err.Error()}
			default:
				errs[k] = err
			}
		})
	}
	wg.Wait()
	return out, errs
}

// The score types name the thing first, then what it carries: a
// SampleCompletion and a GroupCompletions come in (ScoreRequest), a
// SampleScore and a GroupScore go out (ScoreResponse); inside, a group is
// an assembly while its samples arrive, a groupOp in the journal and a
// groupAnswer once scored.

// SampleCompletion is one sample of a score request: the trainer's name for its
// group (unique within the step), the state, G, the sample's index in the
// group (optional: absent, the next free index; state it for safe retries)
// and the completion.
type SampleCompletion struct {
	Group      string `json:"group"`
	StateID    string `json:"state_id"`
	GroupSize  int    `json:"group_size"`
	Index      *int   `json:"index,omitempty"`
	Completion string `json:"completion"`
}

// GroupCompletions is a whole group in a score request. Group names it; absent,
// it is named after the request (its request_id, or its body's digest).
type GroupCompletions struct {
	StateID     string   `json:"state_id"`
	Group       string   `json:"group,omitempty"`
	Completions []string `json:"completions"`
}

// SampleScore is one completion's score. Reward is absent (null) when
// FailureReason is set: the world model failed or the sample came late,
// and the trainer should drop the sample, not learn from a number.
type SampleScore struct {
	Group         string   `json:"group,omitempty"`
	Index         int      `json:"index"`
	StateID       string   `json:"state_id,omitempty"`
	Reward        *float64 `json:"reward"`
	Advantage     float64  `json:"advantage"`
	Valid         bool     `json:"valid"`
	Mechanism     string   `json:"mechanism,omitempty"`
	Gain          float64  `json:"gain"`
	Reason        string   `json:"reason,omitempty"`
	Tau           float64  `json:"tau"`
	Kept          bool     `json:"kept"`
	Partial       bool     `json:"partial,omitempty"`
	GroupSize     int      `json:"group_size"`
	Received      int      `json:"received"`
	FailureReason string   `json:"failure_reason,omitempty"`
}

// GroupScore is one whole group's scores.
type GroupScore struct {
	StateID       string        `json:"state_id"`
	Group         string        `json:"group"`
	Tau           float64       `json:"tau"`
	Kept          bool          `json:"kept"`
	Partial       bool          `json:"partial,omitempty"`
	FailureReason string        `json:"failure_reason,omitempty"`
	Samples       []SampleScore `json:"samples"`
}

// ScoreResponse answers a score request: Samples for its samples, Groups
// for its whole groups, and a summary over the distinct groups it touched.
type ScoreResponse struct {
	API     string        `json:"api"`
	Step    int           `json:"step"`
	Samples []SampleScore `json:"samples,omitempty"`
	Groups  []GroupScore  `json:"groups,omitempty"`
	Kept    int           `json:"kept"`
	Flat    int           `json:"flat"`
	Failed  int           `json:"failed"`
	// MeanReward and Invalid summarise the scored samples.
	MeanReward float64 `json:"mean_reward"`
	Invalid    int     `json:"invalid"`
}

// Score scores a request's samples and whole groups at the request's step
// (q.Step, or under Config.CountSteps the number of score requests before
// it). It returns once every group it touched is scored (complete, or at
// its deadline) or ctx ends. key names the request (its request_id or
// body digest) and sum is its body's digest: a request_id reused with
// another body is refused.
func (s *Service) Score(ctx context.Context, key, sum string, q ScoreRequest) (*ScoreResponse, error) {
	ins, err := s.normalise(key, q)
	if err != nil {
		return nil, err
	}
	step, waits, err := s.joinAll(q, key, sum, ins)
	if err != nil {
		return nil, err
	}
	for i, w := range waits {
		if w.ans != nil {
			continue
		}
		select {
		case <-w.a.done:
			waits[i].ans = w.a.ans
		case <-ctx.Done():
			return nil, &RequestError{Status: 504, Code: "timeout",
				Message: "the request ended before its groups were complete; send the same samples again (same group and index) for their answers"}
		}
	}
	return scoreResponse(step, len(q.Samples), ins, waits), nil
}

// joined is a sample of a request in its group: the group being
// assembled, or its answer once scored, and the sample's index in it.
type joined struct {
	a   *assembly
	ans *groupAnswer
	idx int
}

// joinAll takes the request's step and joins each sample to its group,
// starting the scoring of the groups it completes.
func (s *Service) joinAll(q ScoreRequest, key, sum string, ins []sampleIn) (int, []joined, error) {
	waits := make([]joined, len(ins))
	var complete []*assembly
	s.mu.Lock()
	defer s.mu.Unlock()
	step, seen, err := s.resolveStep(q, key, sum)
	if err == nil {
		err = s.checkJoins(step, ins)
	}
	if err == nil && !seen {
		err = s.recordStep(q, key, sum, step)
	}
	if err == nil {
		for i, in := range ins {
			a, ans, idx, jerr := s.join(step, in)
			if jerr != nil {
				err = jerr
				break
			}
			waits[i] = joined{a, ans, idx}
			if a != nil && a.complete && !a.launched {
				a.launched = true
				complete = append(complete, a)
			}
		}
	}
	if len(complete) > 0 && !s.closed {
		s.goBG(func() { s.finish(complete) })
	}
	return step, waits, err
}

// scoreResponse answers a request whose groups are all answered: its
// first singles samples one by one, the rest by whole group, with the
// counts over the distinct groups and the mean reward of the scored
// samples.
func scoreResponse(step, singles int, ins []sampleIn, waits []joined) *ScoreResponse {
	resp := &ScoreResponse{API: APIVersion, Step: step}
	seen := map[*groupAnswer]bool{}
	var sumR float64
	var nR int
	for i, w := range waits {
		smp := w.ans.sample(ins[i].group, w.idx)
		if smp.Reward != nil {
			sumR += *smp.Reward
			nR++
			if !smp.Valid {
				resp.Invalid++
			}
		}
		if !seen[w.ans] {
			seen[w.ans] = true
			switch {
			case w.ans.Failure != "":
				resp.Failed++
			case w.ans.Kept:
				resp.Kept++
			default:
				resp.Flat++
			}
		}
		if i < singles {
			resp.Samples = append(resp.Samples, smp)
			continue
		}
		gi := len(resp.Groups) - 1
		if gi < 0 || resp.Groups[gi].Group != ins[i].group {
			resp.Groups = append(resp.Groups, GroupScore{StateID: w.ans.StateID, Group: ins[i].group, Tau: w.ans.Tau, Kept: w.ans.Kept,
				Partial: w.ans.Partial, FailureReason: w.ans.Failure})
			gi++
		}
		resp.Groups[gi].Samples = append(resp.Groups[gi].Samples, smp)
	}
	if nR > 0 {
		resp.MeanReward = sumR / float64(nR)
	}
	return resp
}

// normalise checks a score request's shape and bounds and lists its
// samples, the whole groups' after the single samples.
func (s *Service) normalise(key string, q ScoreRequest) ([]sampleIn, error) {
	n := len(q.Samples)
	for _, g := range q.Groups {
		n += len(g.Completions)
	}
	switch {
	case n == 0:
		return nil, badRequest("empty", "no samples and no groups")
	case n > s.cfg.MaxSamples:
		return nil, tooLarge("too_many_samples", "%d samples, at most %d", n, s.cfg.MaxSamples)
	}
	out := make([]sampleIn, 0, n)
	check := func(what string, in sampleIn) error {
		switch {
		case in.group == "" || len(in.group) > 256:
			return badRequest("bad_group", "%s: group names are 1..256 bytes", what)
		case in.stateID == "":
			return badRequest("bad_group", "%s has no state_id", what)
		case in.size < 1 || in.size > s.cfg.MaxCompletions:
			return tooLarge("bad_group_size", "%s: group_size = %d, want 1..%d", what, in.size, s.cfg.MaxCompletions)
		case in.index >= in.size:
			return badRequest("bad_index", "%s: index %d, want 0..%d", what, in.index, in.size-1)
		case len(in.text) > s.cfg.MaxCompletionBytes:
			return tooLarge("completion_too_long", "%s: %d bytes, at most %d", what, len(in.text), s.cfg.MaxCompletionBytes)
		}
		return nil
	}
	for i, smp := range q.Samples {
		in := sampleIn{group: smp.Group, stateID: smp.StateID, text: smp.Completion, size: smp.GroupSize, index: -1}
		if smp.Index != nil {
			if *smp.Index < 0 {
				return nil, badRequest("bad_index", "sample %d: index %d, want ≥ 0", i, *smp.Index)
			}
			in.index = *smp.Index
		}
		if err := check(fmt.Sprintf("sample %d", i), in); err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	names := map[string]bool{}
	for gi, g := range q.Groups {
		name := g.Group
		if name == "" {
			name = key + "#" + strconv.Itoa(gi)
		}
		if names[name] {
			return nil, badRequest("bad_group", "group %d: the name %q is used twice in the request", gi, records.Excerpt(name))
		}
		names[name] = true
		if len(g.Completions) == 0 {
			return nil, badRequest("empty_group", "group %d has no completions", gi)
		}
		for i, c := range g.Completions {
			in := sampleIn{group: name, stateID: g.StateID, text: c, size: len(g.Completions), index: i}
			if err := check(fmt.Sprintf("group %d completion %d", gi, i), in); err != nil {
				return nil, err
			}
			out = append(out, in)
		}
	}
	return out, nil
}

// requestRecord is what the service keeps of a request with an id (or
// of every request under CountSteps): its body's digest and its step.
type requestRecord struct {
	Sum  string `json:"sum"`
	Step int    `json:"step"`
}

// resolveStep returns a score request's step without changing anything:
// a request seen before (same key) keeps its first step (seen), and a
// request_id reused with another body is refused. The caller holds mu.
func (s *Service) resolveStep(q ScoreRequest, key, sum string) (step int, seen bool, err error) {
	keep := q.RequestID != "" || s.cfg.CountSteps
	if keep {
		if b, ok := s.reqs.get(key); ok {
			var rec requestRecord
			if err := json.Unmarshal(b, &rec); err != nil {
				return 0, false, err
			}
			if rec.Sum != sum {
				return 0, false, conflict("request_id_reused", "request_id %q was used before with another body", records.Excerpt(q.RequestID))
			}
			return rec.Step, true, nil
		}
	}
	switch {
	case q.Step != nil:
		return *q.Step, false, nil
	case s.cfg.CountSteps:
		return s.requests, false, nil
	}
	return 0, false, badRequest("no_step", "the request states no step: send the trainer's step (or start the service with step counting)")
}

// recordStep takes a new request's step (observeStep) and records the
// request when it has an id (or under CountSteps). The caller holds mu.
func (s *Service) recordStep(q ScoreRequest, key, sum string, step int) error {
	if err := s.observeStep(step); err != nil {
		return err
	}
	if q.RequestID != "" || s.cfg.CountSteps {
		if _, err := s.commit(op{Kind: "request", Key: key, Sum: sum, Step: step}); err != nil {
			return err
		}
	}
	return nil
}

// checkJoins checks, without changing anything, that every sample of a
// request joins its group, so that a request is applied whole or not at
// all: one unknown or held-out state, one conflict or a full table of
// groups refuses the request before any of its samples joins a group (or
// becomes a calibration candidate). It mirrors join. The caller holds mu.
func (s *Service) checkJoins(step int, ins []sampleIn) error {
	type virt struct {
		stateID string
		size, n int
		have    []bool
		texts   []string
		closing bool
	}
	vs := map[string]*virt{}
	fresh := 0
	for _, in := range ins {
		key := groupKey(step, in.group)
		if ans, ok := s.done.get(key); ok {
			switch {
			case ans.StateID != in.stateID || ans.Size != in.size:
				return conflict("group_mismatch", "group %q at step %d was scored for state %s with G = %d", records.Excerpt(in.group), step, ans.StateID, ans.Size)
			case in.index < 0:
				return conflict("group_done", "group %q at step %d is scored; a retried sample must state its index", records.Excerpt(in.group), step)
			}
			if err := ans.sameText(in.group, step, in.index, in.text); err != nil {
				return err
			}
			continue
		}
		v := vs[key]
		if v == nil {
			if a := s.asm[key]; a != nil {
				v = &virt{stateID: a.stateID, size: a.size, n: a.n, have: slices.Clone(a.have), texts: slices.Clone(a.texts), closing: a.closing}
			} else {
				e, ok := s.states[in.stateID]
				switch {
				case !ok:
					return badRequest("unknown_state", "unknown state_id %q (ask /v1/states or /v1/dataset first; the oldest of more than %d issued states are forgotten)", records.Excerpt(in.stateID), s.cfg.MaxIssued)
				case e.Split != SplitTrain:
					return badRequest("test_state", "state %s is a held-out state: it may only be evaluated (/v1/evaluate), never scored", in.stateID)
				case len(s.asm)+fresh >= s.cfg.MaxPendingGroups:
					return unavailable("busy", "%d groups are being assembled; retry later", len(s.asm)+fresh)
				}
				fresh++
				v = &virt{stateID: in.stateID, size: in.size, have: make([]bool, in.size), texts: make([]string, in.size)}
			}
			vs[key] = v
		}
		if v.stateID != in.stateID || v.size != in.size {
			return conflict("group_mismatch", "group %q at step %d is for state %s with G = %d, not %s with G = %d",
				records.Excerpt(in.group), step, v.stateID, v.size, records.Excerpt(in.stateID), in.size)
		}
		idx := in.index
		if idx < 0 {
			idx = slices.Index(v.have, false)
			if idx < 0 {
				return conflict("group_full", "group %q at step %d already has its %d samples", records.Excerpt(in.group), step, v.size)
			}
		} else if v.have[idx] {
			if v.texts[idx] != in.text {
				return conflict("sample_conflict", "group %q at step %d: sample %d was sent with another completion", records.Excerpt(in.group), step, idx)
			}
			continue
		}
		if v.closing {
			continue
		}
		v.have[idx], v.texts[idx] = true, in.text
		if v.n++; v.n == v.size {
			v.closing = true
		}
	}
	return nil
}
