package serve

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
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

func conflict(code, format string, args ...any) error {
	return &RequestError{Status: http.StatusConflict, Code: code, Message: fmt.Sprintf(format, args...)}
}

func unavailable(code, format string, args ...any) error {
	return &RequestError{Status: http.StatusServiceUnavailable, Code: code, Message: fmt.Sprintf(format, args...)}
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
	if re.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
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

// ScoreRequest asks to score samples (Samples: any granularity, each
// naming its group) and whole groups (Groups) at the trainer's Step
// (required unless the service counts steps).
type ScoreRequest struct {
	RequestID string             `json:"request_id"`
	Step      *int               `json:"step"`
	Samples   []SampleCompletion `json:"samples"`
	Groups    []GroupCompletions `json:"groups"`
}

// AdvanceRequest sets the trainer's step.
type AdvanceRequest struct {
	RequestID string `json:"request_id"`
	Step      int    `json:"step"`
}

// RewardRequest is OpenRLHF's remote reward request: query[i] is the
// prompt and response of sample i, prompts[i] its prompt and labels[i] its
// label (the dataset's label column: the state id). OpenRLHF sends one
// sample per request; the samples of one label at one step form a group of
// G (the group_size URL parameter, or Config.GroupSize). The step is the
// body's step, or the step URL parameter: a number, or "current" for the
// service's step (as the trainer's /v1/advance calls set it). Indices,
// when a client can send them, are the samples' indices in their groups
// (0..G-1): a resent sample is then answered from its group's first
// answer. OpenRLHF's own client sends none; a sample without an index
// takes its group's next free one, so a resend would count twice.
type RewardRequest struct {
	Query   []string `json:"query"`
	Prompts []string `json:"prompts"`
	Labels  []string `json:"labels"`
	Step    *int     `json:"step"`
	Indices []int    `json:"indices"`
}

// RewardResponse is OpenRLHF's remote reward response.
type RewardResponse struct {
	Rewards   []float64          `json:"rewards"`
	Scores    []float64          `json:"scores"`
	ExtraLogs map[string]float64 `json:"extra_logs"`
}

// Handler returns the service's HTTP handler: the JSON API under /v1/,
// OpenRLHF's /get_reward and Prometheus metrics at /metrics. Every route
// needs the bearer token when Config.Token is set. A body is read (bounded
// by MaxBody, in time by the server's ReadTimeout) before the request
// takes one of the MaxInFlight slots (503 beyond); /v1/info, /v1/health
// and /metrics take none.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", s.route("info", false, func(r *http.Request, body []byte) (any, error) {
		if r.URL.Query().Get("digest") == "1" {
			return s.InfoDigest(), nil
		}
		return s.Info(), nil
	}))
	mux.HandleFunc("GET /v1/health", s.route("health", false, func(r *http.Request, body []byte) (any, error) { return s.Health(), nil }))
	mux.HandleFunc("GET /v1/monitors", s.route("monitors", true, func(r *http.Request, body []byte) (any, error) { return s.Monitors(), nil }))
	mux.HandleFunc("GET /v1/calibrations", s.route("calibrations", true, func(r *http.Request, body []byte) (any, error) { return s.Calibrations(), nil }))
	mux.HandleFunc("POST /v1/states", s.route("states", true, func(r *http.Request, body []byte) (any, error) {
		var q StatesRequest
		if err := decode(body, &q); err != nil {
			return nil, err
		}
		return s.States(requestKey("states", q.RequestID, body), q.N, q.Split)
	}))
	mux.HandleFunc("POST /v1/score", s.route("score", true, func(r *http.Request, body []byte) (any, error) {
		q, err := ParseScoreRequest(body)
		if err != nil {
			return nil, err
		}
		return s.Score(r.Context(), requestKey("score", q.RequestID, body), digest(body), q)
	}))
	mux.HandleFunc("POST /v1/advance", s.route("advance", true, func(r *http.Request, body []byte) (any, error) {
		var q AdvanceRequest
		if err := decode(body, &q); err != nil {
			return nil, err
		}
		return s.Advance(q.Step)
	}))
	mux.HandleFunc("POST /v1/evaluate", s.route("evaluate", true, func(r *http.Request, body []byte) (any, error) {
		q, err := ParseScoreRequest(body)
		if err != nil {
			return nil, err
		}
		if len(q.Samples) > 0 {
			return nil, badRequest("bad_request", "evaluate takes whole groups")
		}
		return s.Evaluate(r.Context(), requestKey("evaluate", q.RequestID, body), q.Groups)
	}))
	mux.HandleFunc("POST /v1/dataset", s.route("dataset", true, func(r *http.Request, body []byte) (any, error) {
		var q StatesRequest
		if err := decode(body, &q); err != nil {
			return nil, err
		}
		b, err := s.Dataset(requestKey("states", q.RequestID, body), q.N, q.Split)
		return jsonl(b), err
	}))
	mux.HandleFunc("POST /get_reward", s.route("get_reward", true, func(r *http.Request, body []byte) (any, error) {
		q, err := ParseRewardRequest(body)
		if err != nil {
			return nil, err
		}
		return s.reward(r, q)
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
	return kind + ":body:" + digest(body)
}

func digest(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// guard checks the token. A request without it is answered 401 and its
// connection closed: a client without the token keeps no connection (an
// idle keep-alive would hold one of Config.MaxConns for IdleTimeout).
func (s *Service) guard(next http.Handler) http.Handler {
	want := []byte("Bearer " + s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			closeConn(w)
			s.met.request("auth", writeError(w, &RequestError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "a bearer token is required"}))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// closeConn asks net/http to close the connection after this response.
func closeConn(w http.ResponseWriter) { w.Header().Set("Connection", "close") }

// route reads the bounded body, takes an in-flight slot when slot is set,
// calls f and writes its JSON answer.
func (s *Service) route(name string, slot bool, f func(r *http.Request, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
		if err != nil {
			// What is left of an unreadable body would be read as the
			// next request: the connection ends with this answer.
			closeConn(w)
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				err = tooLarge("body_too_large", "body over %d bytes", s.cfg.MaxBody)
			} else {
				err = badRequest("bad_body", "read body: %s", records.Excerpt(err.Error()))
			}
			s.met.request(name, writeError(w, err))
			return
		}
		if slot {
			select {
			case s.admit <- struct{}{}:
				defer func() { <-s.admit }()
			default:
				s.met.request("busy", writeError(w, unavailable("busy",
					"%d requests in process; retry later with the same request (see GET /v1/health)", s.cfg.MaxInFlight)))
				return
			}
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

// decode reads a JSON object strictly: duplicate keys, keys that are not
// lower snake_case (encoding/json would match them case-insensitively),
// unknown fields and trailing data are errors.
func decode(body []byte, v any) error {
	if err := checkKeys(body, true); err != nil {
		return badRequest("bad_json", "%s", records.Excerpt(err.Error()))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("bad_json", "%s", records.Excerpt(err.Error()))
	}
	if dec.More() {
		return badRequest("bad_json", "trailing data after the JSON object")
	}
	return nil
}

// checkKeys walks a JSON document and refuses an object with a duplicate
// key and, when lower is set, a key that is not lower snake_case.
func checkKeys(body []byte, lower bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		obj  bool
		key  bool // the next string token in an object is a key
		seen map[string]bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k, _ := tok.(string)
			if top.seen[k] {
				return fmt.Errorf("duplicate key %q", records.Excerpt(k))
			}
			if lower && !snakeCase(k) {
				return fmt.Errorf("key %q: keys are lower snake_case", records.Excerpt(k))
			}
			top.seen[k] = true
			top.key = false
			continue
		}
		if top != nil && top.obj {
			top.key = true // a value was read; the next token is a key
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, &frame{obj: true, key: true, seen: map[string]bool{}})
			case '[':
				stack = append(stack, &frame{})
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		}
	}
}

func snakeCase(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ParseScoreRequest decodes a score or evaluate request strictly. It is a
// parser of outside input the fuzz targets cover.
func ParseScoreRequest(body []byte) (ScoreRequest, error) {
	var q ScoreRequest
	if err := decode(body, &q); err != nil {
		return q, err
	}
	if q.Step != nil && (*q.Step < 0 || *q.Step > MaxStep) {
		return q, badRequest("bad_step", "step = %d, want 0..%d", *q.Step, MaxStep)
	}
	for i, g := range q.Groups {
		if g.StateID == "" {
			return q, badRequest("bad_group", "group %d has no state_id", i)
		}
	}
	return q, nil
}

// ParseRewardRequest decodes OpenRLHF's request: query and labels of equal
// length, prompts empty or of the same length. Unknown fields are ignored
// (later OpenRLHF versions may send more); duplicate keys are refused.
func ParseRewardRequest(body []byte) (RewardRequest, error) {
	var q RewardRequest
	if err := checkKeys(body, false); err != nil {
		return q, badRequest("bad_json", "%s", records.Excerpt(err.Error()))
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return q, badRequest("bad_json", "%s", records.Excerpt(err.Error()))
	}
	if len(q.Query) == 0 {
		return q, badRequest("empty", "no query")
	}
	if len(q.Labels) != len(q.Query) {
		return q, badRequest("bad_labels", "%d labels for %d queries: the dataset's label column must carry the state id", len(q.Labels), len(q.Query))
	}
	if len(q.Prompts) != 0 && len(q.Prompts) != len(q.Query) {
		return q, badRequest("bad_prompts", "%d prompts for %d queries", len(q.Prompts), len(q.Query))
	}
	if q.Step != nil && (*q.Step < 0 || *q.Step > MaxStep) {
		return q, badRequest("bad_step", "step = %d, want 0..%d", *q.Step, MaxStep)
	}
	if len(q.Indices) != 0 && len(q.Indices) != len(q.Query) {
		return q, badRequest("bad_index", "%d indices for %d queries", len(q.Indices), len(q.Query))
	}
	for i, idx := range q.Indices {
		if idx < 0 {
			return q, badRequest("bad_index", "sample %d: index %d, want ≥ 0", i, idx)
		}
	}
	return q, nil
}

// reward answers OpenRLHF: the completions are the queries with their
// prompt cut off; each is a sample of the group (step, label). A group
// that failed is answered 503 (OpenRLHF retries), never with a made-up
// reward.
func (s *Service) reward(r *http.Request, q RewardRequest) (any, error) {
	size := s.cfg.GroupSize
	if v := r.URL.Query().Get("group_size"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, badRequest("bad_group_size", "group_size %q", records.Excerpt(v))
		}
		size = n
	}
	sq := ScoreRequest{Step: q.Step}
	if sq.Step == nil {
		switch v := r.URL.Query().Get("step"); v {
		case "":
		case "current":
			st := s.Info().Step
			sq.Step = &st
		default:
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, badRequest("bad_step", "step %q: a number or \"current\"", records.Excerpt(v))
			}
			sq.Step = &n
		}
	}
	for i, query := range q.Query {
		c := query
		if len(q.Prompts) > 0 {
			c = strings.TrimPrefix(query, q.Prompts[i])
		}
		smp := SampleCompletion{Group: q.Labels[i], StateID: q.Labels[i], GroupSize: size, Completion: c}
		if len(q.Indices) > 0 {
			smp.Index = &q.Indices[i]
		}
		sq.Samples = append(sq.Samples, smp)
	}
	sr, err := s.Score(r.Context(), "", "", sq)
	var re *RequestError
	if errors.As(err, &re) && re.Code == "group_done" {
		// A sample after its group was scored (at its deadline): no
		// reward, answered as a failed group is, so that OpenRLHF retries
		// and then leaves the sample without one.
		return nil, unavailable("no_reward", "late: the group was scored before this sample arrived (%s)", re.Message)
	}
	if err != nil {
		return nil, err
	}
	out := RewardResponse{Rewards: make([]float64, len(q.Query)), Scores: make([]float64, len(q.Query)),
		ExtraLogs: map[string]float64{"lm2lm_step": float64(sr.Step), "lm2lm_mean_reward": sr.MeanReward,
			"lm2lm_invalid": float64(sr.Invalid), "lm2lm_kept_groups": float64(sr.Kept), "lm2lm_flat_groups": float64(sr.Flat)}}
	for i, smp := range sr.Samples {
		if smp.Reward == nil {
			return nil, unavailable("no_reward", "sample %d: %s", i, smp.FailureReason)
		}
		out.Rewards[i], out.Scores[i] = *smp.Reward, *smp.Reward
	}
	return out, nil
}

// HeaderTimeout bounds the arrival of a request's line and headers, from
// the connection's start for its first request (from its first byte for a
// later one), when Config.ReadTimeout is longer. Library choice: an honest
// client sends its few hundred bytes of headers at once; a connection
// that sends nothing is closed after it, so that clients which connect and
// wait hold one of Config.MaxConns for at most this long.
const HeaderTimeout = 5 * time.Second

// Server returns an HTTP server for the service's Handler with its read
// and idle timeouts (HeaderTimeout, Config.ReadTimeout, IdleTimeout): a
// slow client cannot hold a connection by trickling its request, a silent
// or idle one is closed, and a request without the token or with an
// unreadable body ends its connection. Serve it on Listen's listener,
// which bounds open connections. With Config.MaxConns = n, any number of
// clients without the token delay an honest one by at most their place in
// the accept queue: each holds a connection for one refused request or
// HeaderTimeout.
func (s *Service) Server() *http.Server {
	return &http.Server{Handler: s.Handler(), ReadHeaderTimeout: min(HeaderTimeout, s.cfg.ReadTimeout), ReadTimeout: s.cfg.ReadTimeout,
		IdleTimeout: s.cfg.IdleTimeout, MaxHeaderBytes: 64 << 10}
}

// Listen listens on Config.Addr (or addr, when not empty) with at most
// Config.MaxConns connections open at once: a connection beyond it waits
// in the kernel's backlog until one closes.
func (s *Service) Listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = s.cfg.Addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return LimitListener(ln, s.cfg.MaxConns), nil
}

// LimitListener returns a listener that accepts at most n connections
// open at once.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
