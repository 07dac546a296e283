package oaitest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/internal/oaitest"
)

func TestTokenizeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.String().Draw(t, "s")
		if got := strings.Join(oaitest.Tokenize(s), ""); got != s {
			t.Fatalf("Tokenize(%q) joins to %q", s, got)
		}
	})
	require.Equal(t, []string{"{", `"`, "gain", `"`, ":", " 1", ".", "5", "}"}, oaitest.Tokenize(`{"gain": 1.5}`))
}

func post(t *testing.T, url, body string) (int, http.Header, []byte, error) {
	t.Helper()
	res, err := http.Post(url+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b, err
}

func TestServerWireFormat(t *testing.T) {
	srv := oaitest.New(t, func(r oaitest.Request) oaitest.Reply {
		return oaitest.Text("a b", "c")
	})
	code, _, body, err := post(t, srv.URL(), `{"model":"m","n":2,"logprobs":true,"top_logprobs":2,"seed":7,
		"messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}]}`)
	require.NoError(t, err)
	require.Equal(t, 200, code)
	var c struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int `json:"index"`
			Message struct {
				Content *string `json:"content"`
				Refusal *string `json:"refusal"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
			Logprobs     *struct {
				Content []oaitest.TokenLogprob `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage oaitest.Usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(body, &c))
	require.Equal(t, "chat.completion", c.Object)
	require.Equal(t, "m", c.Model)
	require.Len(t, c.Choices, 2)
	require.Equal(t, "a b", *c.Choices[0].Message.Content)
	require.Nil(t, c.Choices[0].Message.Refusal)
	require.Equal(t, "stop", c.Choices[0].FinishReason)
	require.NotNil(t, c.Choices[0].Logprobs)
	lp := c.Choices[0].Logprobs.Content
	require.Len(t, lp, 2)
	require.Equal(t, " b", lp[1].Token)
	require.Equal(t, oaitest.LogprobOf(" b", 1), lp[1].Logprob)
	require.Len(t, lp[1].TopLogprobs, 2)
	require.Equal(t, []int{' ', 'b'}, lp[1].Bytes)
	require.Equal(t, 3, c.Usage.CompletionTokens) // "a", " b", "c"

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, 2, reqs[0].N)
	require.True(t, reqs[0].Logprobs)
	require.Equal(t, int64(7), *reqs[0].Seed)
	require.Equal(t, "hi there", reqs[0].Text("user"))
	require.Equal(t, "sys", reqs[0].Text("system"))
}

func TestServerFaults(t *testing.T) {
	srv := oaitest.New(t, nil)
	srv.Push(oaitest.Status(429, "2"), oaitest.Refusal("no"), oaitest.Reply{Choices: []oaitest.Choice{{Content: "x"}}, OmitLogprobs: true},
		oaitest.Truncated(oaitest.Text("hello"), 10))
	req := `{"model":"m","logprobs":true,"messages":[{"role":"user","content":"q"}]}`

	code, h, _, err := post(t, srv.URL(), req)
	require.NoError(t, err)
	require.Equal(t, 429, code)
	require.Equal(t, "2", h.Get("Retry-After"))

	_, _, body, err := post(t, srv.URL(), req)
	require.NoError(t, err)
	require.Contains(t, string(body), `"refusal":"no"`)
	require.Contains(t, string(body), `"content":null`)

	_, _, body, err = post(t, srv.URL(), req)
	require.NoError(t, err)
	require.Contains(t, string(body), `"logprobs":null`)

	_, _, _, err = post(t, srv.URL(), req)
	require.Error(t, err, "a truncated body is an unexpected EOF")

	code, _, _, err = post(t, srv.URL(), req)
	require.NoError(t, err)
	require.Equal(t, 500, code, "an unscripted request without responder gets a 500")
}

func ExampleServer() {
	srv := oaitest.NewServer(func(r oaitest.Request) oaitest.Reply {
		return oaitest.Text("echo: " + r.Text("user"))
	})
	defer srv.Close()
	res, err := http.Post(srv.URL()+"/chat/completions", "application/json",
		bytes.NewReader([]byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)))
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	var c struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil {
		panic(err)
	}
	fmt.Println(c.Choices[0].Message.Content, srv.Count())
	// Output: echo: hello 1
}

var sink []byte

func TestAllocated(t *testing.T) {
	// A 4 MiB allocation counts at least its size; doing nothing counts
	// far less.
	got := oaitest.Allocated(func() { sink = make([]byte, 4<<20) })
	require.GreaterOrEqual(t, got, uint64(4<<20))
	require.Less(t, oaitest.Allocated(func() {}), uint64(1<<20))
}
