package serve

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/records"
)

// RequestError is a request the service refuses, with its HTTP status and
// a stable code; it is answered as {"error": {"code", "message"}}.
type RequestError struct {
	Status  int
	Code    string
	Message string
}

func (e *RequestError) Error() string { return "serve: " + e.Code + ": " + e.Message }

func badRequest(code, format string, args ...any) error {
	return &RequestError{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

func tooLarge(code, format string, args ...any) error {
	return &RequestError{Status: http.StatusRequestEntityTooLarge, Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorBody is the JSON of an error response.
type errorBody struct {
	API   string `json:"api"`
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, err error) int {
	var re *RequestError
	if !errors.As(err, &re) {
		re = &RequestError{Status: http.StatusInternalServerError, Code: "internal", Message: records.Excerpt(err.Error())}
	}
	var b errorBody
	b.API, b.Error.Code, b.Error.Message = APIVersion, re.Code, re.Message
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(re.Status)
	_ = json.NewEncoder(w).Encode(b)
	return re.Status
}

// Wire requests.

// StatesRequest asks for N new states of Split ("train" by default, or
// "test": held-out states for /v1/evaluate).
type StatesRequest struct {
	RequestID string `json:"request_id"`
	N         int    `json:"n"`
	Split     string `json:"split"`
}

// ScoreRequest asks to score groups of completions. Step is the trainer's
// global step (TRL's trainer_state.global_step); absent, the step is the
// number of score requests applied before this one.
type ScoreRequest struct {
	RequestID string       `json:"request_id"`
	Step      *int         `json:"step"`
	Groups    []ScoreGroup `json:"groups"`
}

// AdvanceRequest sets the trainer's step.
type AdvanceRequest struct {
	RequestID string `json:"request_id"`
	Step      int    `json:"step"`
}

// RewardRequest is OpenRLHF's remote reward request: query[i] is the
// prompt and response of sample i, prompts[i] its prompt and labels[i] its
// label (the dataset's label column: the state id). A group is the
// samples of one label in the request, in order.
type RewardRequest struct {
	Query   []string `json:"query"`
	Prompts []string `json:"prompts"`
	Labels  []string `json:"labels"`
	Step    *int     `json:"step"`
}

// RewardResponse is OpenRLHF's remote reward response.
type RewardResponse struct {
	Rewards   []float64          `json:"rewards"`
	Scores    []float64          `json:"scores"`
	ExtraLogs map[string]float64 `json:"extra_logs"`
}

// Handler returns the service's HTTP handler: the JSON API under /v1/,
// OpenRLHF's /get_reward and Prometheus metrics at /metrics. Every route
// needs the bearer token when Config.Token is set; bodies are bounded by
// MaxBody and requests in process by MaxInFlight (503 beyond).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.route("info", func(r *http.Request, body []byte) (any, error) { return s.Info(), nil }))
	mux.HandleFunc("GET /v1/monitors", s.route("monitors", func(r *http.Request, body []byte) (any, error) { return s.Monitors(), nil }))
	mux.HandleFunc("POST /v1/states", s.route("states", func(r *http.Request, body []byte) (any, error) {
		var q StatesRequest
		if err := decode(body, &q); err != nil {
			return nil, err
		}
		return s.States(requestKey("states", q.RequestID, body), q.N, q.Split)
	}))
	mux.HandleFunc("POST /v1/score", s.route("score", func(r *http.Request, body []byte) (any, error) {
		q, err := ParseScoreRequest(body)
		if err != nil {
			return nil, err
		}
		step := -1
		if q.Step != nil {
			step = *q.Step
		}
		return s.Score(r.Context(), requestKey("score", q.RequestID, body), step, q.Groups)
	}))
	mux.HandleFunc("POST /v1/advance", s.route("advance", func(r *http.Request, body []byte) (any, error) {
		var q AdvanceRequest
		if err := decode(body, &q); err != nil {
			return nil, err
		}
		return s.Advance(r.Context(), requestKey("advance", q.RequestID, body), q.Step)
	}))
	mux.HandleFunc("POST /v1/evaluate", s.route("evaluate", func(r *http.Request, body []byte) (any, error) {
		q, err := ParseScoreRequest(body)
		if err != nil {
			return nil, err
		}
		return s.Evaluate(r.Context(), requestKey("evaluate", q.RequestID, body), q.Groups)
	}))
	mux.HandleFunc("POST /v1/dataset", s.route("dataset", func(r *http.Request, body []byte) (any, error) {
		var q StatesRequest
		if err := decode(body, &q); err != nil {
			return nil, err
		}
		b, err := s.Dataset(requestKey("states", q.RequestID, body), q.N, q.Split)
		return jsonl(b), err
	}))
	mux.HandleFunc("POST /get_reward", s.route("get_reward", func(r *http.Request, body []byte) (any, error) {
		q, err := ParseRewardRequest(body)
		if err != nil {
			return nil, err
		}
		return s.reward(r, requestKey("reward", "", body), q)
	}))
	mux.Handle("GET /metrics", s.met.handler())
	return s.guard(mux)
}

// jsonl is a JSON Lines body.
type jsonl []byte

// requestKey is the idempotency key of a request: its kind and request
// id, or without an id the SHA-256 of its body (a retried identical
// request is the same request).
func requestKey(kind, id string, body []byte) string {
	if id != "" {
		return kind + ":" + id
	}
	sum := sha256.Sum256(body)
	return kind + ":body:" + hex.EncodeToString(sum[:])
}

// guard checks the token, then bounds the requests in process.
func (s *Service) guard(next http.Handler) http.Handler {
	want := []byte("Bearer " + s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			s.met.request("auth", writeError(w, &RequestError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "a bearer token is required"}))
			return
		}
		if r.URL.Path == "/metrics" || r.URL.Path == "/v1/info" {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case s.admit <- struct{}{}:
			defer func() { <-s.admit }()
		default:
			w.Header().Set("Retry-After", "1")
			s.met.request("busy", writeError(w, &RequestError{Status: http.StatusServiceUnavailable, Code: "busy",
				Message: fmt.Sprintf("%d requests in process; retry later with the same request_id", s.cfg.MaxInFlight)}))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// route reads the bounded body, calls f and writes its JSON answer.
func (s *Service) route(name string, f func(r *http.Request, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				err = tooLarge("body_too_large", "body over %d bytes", s.cfg.MaxBody)
			} else {
				err = badRequest("bad_body", "read body: %s", records.Excerpt(err.Error()))
			}
			s.met.request(name, writeError(w, err))
			return
		}
		v, err := f(r, body)
		if err != nil {
			s.met.request(name, writeError(w, err))
			return
		}
		switch b := v.(type) {
		case jsonl:
			w.Header().Set("Content-Type", "application/jsonl")
			_, _ = w.Write(b)
		case json.RawMessage:
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		default:
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
		s.met.request(name, http.StatusOK)
		s.met.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	}
}

// decode reads a JSON object strictly: unknown fields and trailing data
// are errors.
func decode(body []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("bad_json", "%s", records.Excerpt(err.Error()))
	}
	if dec.More() {
		return badRequest("bad_json", "trailing data after the JSON object")
	}
	return nil
}

// ParseScoreRequest decodes a score or evaluate request and checks its
// shape (every group names a state). It is the parser of outside input
// the fuzz target covers.
func ParseScoreRequest(body []byte) (ScoreRequest, error) {
	var q ScoreRequest
	if err := decode(body, &q); err != nil {
		return q, err
	}
	if q.Step != nil && *q.Step < 0 {
		return q, badRequest("bad_step", "step = %d, want ≥ 0", *q.Step)
	}
	for i, g := range q.Groups {
		if g.StateID == "" {
			return q, badRequest("bad_group", "group %d has no state_id", i)
		}
	}
	return q, nil
}

// ParseRewardRequest decodes OpenRLHF's request: query and labels of equal
// length, prompts empty or of the same length.
func ParseRewardRequest(body []byte) (RewardRequest, error) {
	var q RewardRequest
	// OpenRLHF may send more fields in later versions: unknown ones are
	// ignored here.
	if err := json.Unmarshal(body, &q); err != nil {
		return q, badRequest("bad_json", "%s", records.Excerpt(err.Error()))
	}
	if len(q.Query) == 0 {
		return q, badRequest("empty", "no query")
	}
	if len(q.Labels) != len(q.Query) {
		return q, badRequest("bad_labels", "%d labels for %d queries: the dataset's label column must carry the state id (--label_key)", len(q.Labels), len(q.Query))
	}
	if len(q.Prompts) != 0 && len(q.Prompts) != len(q.Query) {
		return q, badRequest("bad_prompts", "%d prompts for %d queries", len(q.Prompts), len(q.Query))
	}
	if q.Step != nil && *q.Step < 0 {
		return q, badRequest("bad_step", "step = %d, want ≥ 0", *q.Step)
	}
	return q, nil
}

// reward answers OpenRLHF: the completions are the queries with their
// prompt cut off, grouped by label in order of first appearance.
func (s *Service) reward(r *http.Request, key string, q RewardRequest) (any, error) {
	var gs []ScoreGroup
	where := make([][2]int, len(q.Query))
	byLabel := map[string]int{}
	for i, query := range q.Query {
		c := query
		if len(q.Prompts) > 0 {
			c = strings.TrimPrefix(query, q.Prompts[i])
		}
		g, ok := byLabel[q.Labels[i]]
		if !ok {
			g = len(gs)
			byLabel[q.Labels[i]] = g
			gs = append(gs, ScoreGroup{StateID: q.Labels[i]})
		}
		where[i] = [2]int{g, len(gs[g].Completions)}
		gs[g].Completions = append(gs[g].Completions, c)
	}
	step := -1
	if q.Step != nil {
		step = *q.Step
	}
	b, err := s.Score(r.Context(), key, step, gs)
	if err != nil {
		return nil, err
	}
	var sr ScoreResponse
	if err := json.Unmarshal(b, &sr); err != nil {
		return nil, err
	}
	out := RewardResponse{Rewards: make([]float64, len(q.Query)), Scores: make([]float64, len(q.Query)),
		ExtraLogs: map[string]float64{"lm2lm_step": float64(sr.Step), "lm2lm_mean_reward": sr.MeanReward,
			"lm2lm_invalid": float64(sr.Invalid), "lm2lm_kept_groups": float64(sr.Kept), "lm2lm_flat_groups": float64(sr.Flat)}}
	for i, w := range where {
		smp := sr.Groups[w[0]].Samples[w[1]]
		out.Rewards[i], out.Scores[i] = smp.Reward, smp.Reward
	}
	return out, nil
}
