package bearer

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// Call sends the token only when there is one, the body only when there is
// one, and returns the status and the body whole.
func TestCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(r.Method + "|" + r.Header.Get("Authorization") + "|" + string(b)))
	}))
	defer srv.Close()
	code, body := Call(t, http.MethodPost, srv.URL+"/x", "tok", []byte(`{"a":1}`))
	require.Equal(t, http.StatusTeapot, code)
	require.Equal(t, `POST|Bearer tok|{"a":1}`, string(body))
	code, body = Call(t, http.MethodGet, srv.URL, "", nil)
	require.Equal(t, http.StatusTeapot, code)
	require.Equal(t, "GET||", string(body))
}
