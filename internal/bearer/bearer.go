// Package bearer is the tests' one HTTP call to a service that takes a
// bearer token: the environment service, the policy server of
// examples/llm-rl. It exists so that every test sends the token, and
// reads the answer, the same way.
package bearer

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// Call sends body (nil for none) with method to url, with the header
// "Authorization: Bearer token" unless token is empty, and returns the
// response's status and whole body. A transport error fails t.
func Call(t testing.TB, method, url, token string, body []byte) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}
