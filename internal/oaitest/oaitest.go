// Package oaitest is an in-process fake of an OpenAI-compatible
// chat-completions server (POST /v1/chat/completions) for the tests of
// rwm/openai and proposer/openai (DESIGN.md: LLM backends are tested against
// an httptest server that speaks the same wire format).
//
// Every request is decoded into a Request and kept for inspection. Replies
// are scripted: queued replies (Push) are served first, in order; after them
// the Responder given to New answers. A Reply can be a normal completion with
// n choices, message.refusal, finish_reason and token log-probs (present only
// when the request asked for them, unless the reply omits them), or a fault:
// any status with headers (429 with Retry-After, 500, 503), a hung
// connection that is held until the client gives up, a truncated body or an
// arbitrary raw (malformed) body.
//
// The package does network I/O on the loopback interface only. A Server is
// safe for concurrent use; its handler serves requests concurrently.
package oaitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Message is one chat message of a request. Content is the text of the
// message whether the client sent a string or an array of text parts.
type Message struct {
	Role    string
	Content string
}

// Request is a decoded chat-completions request.
type Request struct {
	Model       string
	Messages    []Message
	N           int      // the n parameter; 0 when absent
	Logprobs    bool     // the logprobs parameter
	TopLogprobs int      // the top_logprobs parameter; 0 when absent
	Seed        *int64   // the seed parameter; nil when absent
	Temperature *float64 // the temperature parameter; nil when absent
	MaxTokens   int      // max_completion_tokens or max_tokens; 0 when absent
	// ResponseFormat is the raw response_format object; nil when absent.
	ResponseFormat json.RawMessage
	// Header holds the request's HTTP headers (e.g. Authorization).
	Header http.Header
	// Raw is the request body as sent.
	Raw []byte
}

// Text returns the concatenated contents of the messages with the given
// role, separated by newlines.
func (r Request) Text(role string) string {
	var parts []string
	for _, m := range r.Messages {
		if m.Role == role {
			parts = append(parts, m.Content)
		}
	}
	return strings.Join(parts, "\n")
}

// ResponseFormatType returns response_format.type ("json_schema",
// "json_object", "text") or "" when absent.
func (r Request) ResponseFormatType() string {
	var rf struct {
		Type string `json:"type"`
	}
	if len(r.ResponseFormat) == 0 || json.Unmarshal(r.ResponseFormat, &rf) != nil {
		return ""
	}
	return rf.Type
}

// TokenLogprob is one entry of choices[i].logprobs.content.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative in top_logprobs.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// Choice is one scripted choice.
type Choice struct {
	Content      string
	Refusal      string // when set, message.refusal is this and content is null
	FinishReason string // default "stop"
	// Logprobs, when non-nil, are sent as logprobs.content whatever the
	// request asked. When nil and the request asked for log-probs (and the
	// Reply does not set OmitLogprobs), the server derives them from Content
	// with Tokenize and LogprobOf.
	Logprobs []TokenLogprob
}

// Usage is the token accounting of a reply.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Reply is one scripted answer.
type Reply struct {
	// Status is the HTTP status; 0 means 200.
	Status int
	// Header is added to the response (e.g. "Retry-After": "2").
	Header http.Header
	// Body, when non-nil, is sent verbatim (with Content-Type
	// application/json) instead of a completion: use it for malformed JSON
	// and error bodies.
	Body []byte
	// Hang holds the connection open, sending nothing, until the client
	// cancels the request or the server closes.
	Hang bool
	// Truncate > 0 sends only the first Truncate bytes of the body (with a
	// Content-Length promising the whole body), then closes the connection.
	Truncate int
	// Choices of a normal completion. A request with n > len(Choices) gets
	// only len(Choices) choices (servers that ignore n behave so).
	Choices []Choice
	// OmitLogprobs sends "logprobs": null even when the request asked for
	// log-probs (servers that do not support them behave so).
	OmitLogprobs bool
	// Usage overrides the derived usage (prompt: bytes of the messages / 4,
	// completion: tokens of the choices).
	Usage *Usage
	// Model overrides the echoed model name.
	Model string
}

// Responder answers a request that no queued reply covers.
type Responder func(Request) Reply

// Text returns a reply whose choices have the given contents.
func Text(contents ...string) Reply {
	r := Reply{}
	for _, c := range contents {
		r.Choices = append(r.Choices, Choice{Content: c})
	}
	return r
}

// Refusal returns a reply with one choice that refuses with msg.
func Refusal(msg string) Reply { return Reply{Choices: []Choice{{Refusal: msg}}} }

// Status returns an error reply with the given status, an OpenAI-style error
// body and, when retryAfter is not empty, a Retry-After header.
func Status(code int, retryAfter string) Reply {
	h := http.Header{}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	body := fmt.Sprintf(`{"error":{"message":"fake %d","type":"server_error","param":null,"code":null}}`, code)
	return Reply{Status: code, Header: h, Body: []byte(body)}
}

// Hang returns a reply that never answers.
func Hang() Reply { return Reply{Hang: true} }

// Raw returns a 200 reply with the given body.
func Raw(body string) Reply { return Reply{Body: []byte(body)} }

// Truncated returns r with its body cut after n bytes.
func Truncated(r Reply, n int) Reply { r.Truncate = n; return r }

// Server is the fake chat-completions server.
type Server struct {
	srv       *httptest.Server
	responder Responder
	release   chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	queue    []Reply
	requests []Request
	created  int64
	models   []string
}

// SetModels sets the models GET <URL>/models lists (none by default).
func (s *Server) SetModels(ids ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = append([]string(nil), ids...)
}

// listModels answers GET <URL>/models as an OpenAI-compatible server
// does: {"object": "list", "data": [{"id": …, "object": "model"}, …]}.
func (s *Server) listModels(w http.ResponseWriter) {
	s.mu.Lock()
	data := []map[string]string{}
	for _, id := range s.models {
		data = append(data, map[string]string{"id": id, "object": "model"})
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// New starts a server answering with responder after the queued replies
// (nil: a 500 for every unscripted request) and registers its Close with
// t.Cleanup.
func New(t testing.TB, responder Responder) *Server {
	t.Helper()
	s := NewServer(responder)
	t.Cleanup(s.Close)
	return s
}

// NewServer is New without a testing.TB; the caller must Close it.
func NewServer(responder Responder) *Server {
	s := &Server{responder: responder, release: make(chan struct{}), created: 1_700_000_000}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// URL returns the base URL for an OpenAI client (it ends in "/v1").
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close releases hung requests and shuts the server down.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.release)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
}

// Push queues replies; each serves exactly one request, in order.
func (s *Server) Push(rs ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, rs...)
}

// Requests returns a copy of the requests received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns the number of requests received so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// wireRequest is the JSON shape of a request.
type wireRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	N                   *int            `json:"n"`
	Logprobs            *bool           `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Seed                *int64          `json:"seed"`
	Temperature         *float64        `json:"temperature"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	ResponseFormat      json.RawMessage `json:"response_format"`
}

// DecodeRequest decodes a chat-completions request body.
func DecodeRequest(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, fmt.Errorf("oaitest: decode request: %w", err)
	}
	req := Request{Model: w.Model, Seed: w.Seed, Temperature: w.Temperature, Raw: body}
	if w.N != nil {
		req.N = *w.N
	}
	if w.Logprobs != nil {
		req.Logprobs = *w.Logprobs
	}
	if w.TopLogprobs != nil {
		req.TopLogprobs = *w.TopLogprobs
	}
	if w.MaxCompletionTokens != nil {
		req.MaxTokens = *w.MaxCompletionTokens
	} else if w.MaxTokens != nil {
		req.MaxTokens = *w.MaxTokens
	}
	if len(w.ResponseFormat) > 0 && string(w.ResponseFormat) != "null" {
		req.ResponseFormat = w.ResponseFormat
	}
	for i, m := range w.Messages {
		text, err := contentText(m.Content)
		if err != nil {
			return Request{}, fmt.Errorf("oaitest: message %d: %w", i, err)
		}
		req.Messages = append(req.Messages, Message{Role: m.Role, Content: text})
	}
	return req, nil
}

func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content is neither a string nor text parts: %w", err)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
		s.listModels(w)
		return
	}
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, `{"error":{"message":"read","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	req, err := DecodeRequest(body)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
		return
	}
	req.Header = r.Header.Clone()

	s.mu.Lock()
	s.requests = append(s.requests, req)
	var reply Reply
	switch {
	case len(s.queue) > 0:
		reply = s.queue[0]
		s.queue = s.queue[1:]
	case s.responder != nil:
		s.mu.Unlock()
		reply = s.responder(req)
		s.mu.Lock()
	default:
		reply = Status(http.StatusInternalServerError, "")
	}
	s.created++
	created := s.created
	id := len(s.requests)
	s.mu.Unlock()

	if reply.Hang {
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
		return
	}
	for k, vs := range reply.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	out := reply.Body
	if out == nil {
		out = Completion(req, reply, id, created)
	}
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	if reply.Truncate > 0 && reply.Truncate < len(out) {
		w.Header().Set("Content-Length", fmt.Sprint(len(out)))
		w.WriteHeader(status)
		_, _ = w.Write(out[:reply.Truncate])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		// Drop the connection so that the client sees an unexpected EOF.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
			}
		}
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// wire types of a completion
type wireCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []wireChoice `json:"choices"`
	Usage             Usage        `json:"usage"`
}

type wireChoice struct {
	Index        int           `json:"index"`
	Message      wireMessage   `json:"message"`
	Logprobs     *wireLogprobs `json:"logprobs"`
	FinishReason string        `json:"finish_reason"`
}

type wireMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	Refusal *string `json:"refusal"`
}

type wireLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// Completion renders reply as the JSON body of a chat completion answering
// req (id "chatcmpl-fake-<id>").
func Completion(req Request, reply Reply, id int, created int64) []byte {
	model := reply.Model
	if model == "" {
		model = req.Model
	}
	c := wireCompletion{
		ID:                fmt.Sprintf("chatcmpl-fake-%d", id),
		Object:            "chat.completion",
		Created:           created,
		Model:             model,
		SystemFingerprint: "fp_fake",
		Choices:           []wireChoice{},
	}
	n := len(reply.Choices)
	if req.N > 0 && req.N < n {
		n = req.N
	}
	completionTokens := 0
	for i := 0; i < n; i++ {
		ch := reply.Choices[i]
		wc := wireChoice{Index: i, FinishReason: ch.FinishReason, Message: wireMessage{Role: "assistant"}}
		if wc.FinishReason == "" {
			wc.FinishReason = "stop"
		}
		if ch.Refusal != "" {
			ref := ch.Refusal
			wc.Message.Refusal = &ref
		} else {
			content := ch.Content
			wc.Message.Content = &content
		}
		toks := Tokenize(ch.Content + ch.Refusal)
		completionTokens += len(toks)
		switch {
		case ch.Logprobs != nil:
			wc.Logprobs = &wireLogprobs{Content: ch.Logprobs, Refusal: []TokenLogprob{}}
		case req.Logprobs && !reply.OmitLogprobs && ch.Refusal == "":
			wc.Logprobs = &wireLogprobs{Content: Logprobs(toks, req.TopLogprobs), Refusal: []TokenLogprob{}}
		}
		c.Choices = append(c.Choices, wc)
	}
	if reply.Usage != nil {
		c.Usage = *reply.Usage
	} else {
		prompt := 0
		for _, m := range req.Messages {
			prompt += (len(m.Content) + 3) / 4
		}
		c.Usage = Usage{PromptTokens: prompt, CompletionTokens: completionTokens, TotalTokens: prompt + completionTokens}
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic("oaitest: marshal completion: " + err.Error())
	}
	return b
}

// Tokenize splits s into the fake server's tokens: runs of letters and
// digits with the white space before them, and single other characters.
// Concatenating the tokens gives s back.
func Tokenize(s string) []string {
	var toks []string
	var cur strings.Builder
	isWord := func(r rune) bool {
		return r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 127
	}
	prevWord := false
	for _, r := range s {
		w := isWord(r)
		switch {
		case r == ' ' || r == '\n' || r == '\t':
			if cur.Len() > 0 {
				toks = append(toks, cur.String())
				cur.Reset()
			}
			cur.WriteRune(r)
			prevWord = false
			continue
		case w && (prevWord || isSpaceOnly(cur.String())):
			cur.WriteRune(r)
		default:
			if cur.Len() > 0 {
				toks = append(toks, cur.String())
				cur.Reset()
			}
			cur.WriteRune(r)
		}
		prevWord = w
	}
	if cur.Len() > 0 {
		toks = append(toks, cur.String())
	}
	return toks
}

func isSpaceOnly(s string) bool { return s != "" && strings.Trim(s, " \n\t") == "" }

// LogprobOf is the fake server's deterministic log-probability of a token at
// position i: −0.05·(1 + (i+len(token)) mod 7).
func LogprobOf(token string, i int) float64 {
	return -0.05 * float64(1+(i+len(token))%7)
}

// Logprobs returns logprobs.content for toks, with top alternatives (the
// token itself first, then "<alt k>" tokens with lower log-probs) when top > 0.
func Logprobs(toks []string, top int) []TokenLogprob {
	out := make([]TokenLogprob, len(toks))
	for i, tok := range toks {
		lp := LogprobOf(tok, i)
		tl := TokenLogprob{Token: tok, Logprob: lp, Bytes: bytesOf(tok), TopLogprobs: []TopLogprob{}}
		for k := 0; k < top; k++ {
			if k == 0 {
				tl.TopLogprobs = append(tl.TopLogprobs, TopLogprob{Token: tok, Logprob: lp, Bytes: bytesOf(tok)})
				continue
			}
			alt := fmt.Sprintf("<alt %d>", k)
			tl.TopLogprobs = append(tl.TopLogprobs, TopLogprob{Token: alt, Logprob: lp - float64(k), Bytes: bytesOf(alt)})
		}
		out[i] = tl
	}
	return out
}

func bytesOf(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}

// WaitFor polls until the server has received at least n requests or the
// timeout passes, and reports whether it has. Tests use it to synchronise
// with a request that is hanging.
func (s *Server) WaitFor(n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if s.Count() >= n {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// Sleeps records the waits a client under test asks for instead of waiting,
// so that retry and Retry-After behaviour is checked without delay. Its
// Sleep has the signature of the clients' Config.Sleep; it returns ctx.Err().
// Safe for concurrent use.
type Sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

// Sleep records d and returns at once.
func (s *Sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

// All returns the recorded waits in order.
func (s *Sleeps) All() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// Allocated returns how many bytes the process allocated on the heap
// (runtime.MemStats.TotalAlloc, counted from a fresh collection) while f
// ran: with HugeBody, a bound on it shows that a client stops reading at
// its body limit instead of buffering the answer.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// HugeBody returns a server that answers every request with status 200
// and a JSON body of size bytes, generated as it is sent (the server holds
// no copy): a completion whose content string is padded with spaces. With
// withLength the response has a Content-Length, otherwise it is chunked.
// The caller closes the server.
func HugeBody(size int64, withLength bool) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		head := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`)
		tail := []byte(`"}}]}`)
		w.Header().Set("Content-Type", "application/json")
		if withLength {
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		}
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(head); err != nil {
			return
		}
		pad := bytes.Repeat([]byte{' '}, 64<<10)
		for left := size - int64(len(head)+len(tail)); left > 0; {
			n := min(left, int64(len(pad)))
			if _, err := w.Write(pad[:n]); err != nil {
				return
			}
			left -= n
		}
		_, _ = w.Write(tail)
	}))
}
