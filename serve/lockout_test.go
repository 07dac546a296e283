package serve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
)

// token is the service's bearer token in these tests.
const token = "lockout-test-token-0123"

// rawRequest sends one request on c and reads its answer.
func rawRequest(t *testing.T, c net.Conn, br *bufio.Reader, req string) *http.Response {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := io.WriteString(c, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp
}

// requireClosed: the server closed c (EOF, or a reset after it), rather
// than leaving it open.
func requireClosed(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err := br.ReadByte()
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the connection is still open: %v", err)
}

// A request without the token, and one whose body cannot be read, is
// answered and its connection closed.
func TestRefusedRequestsCloseTheirConnection(t *testing.T) {
	_, addr := newReal(t, func(c *serve.Config) { c.Token, c.MaxBody, c.IdleTimeout = token, 1024, time.Minute })
	for _, tc := range []struct {
		name, req string
		code      int
	}{
		{"no token", "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusUnauthorized},
		{"wrong token", "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer other\r\n\r\n", http.StatusUnauthorized},
		{"no token with a body", "POST /v1/states HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", http.StatusUnauthorized},
		{"body too large", "POST /v1/states HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token + "\r\nContent-Length: 2000\r\n\r\n" + strings.Repeat(" ", 2000), http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer c.Close()
			br := bufio.NewReader(c)
			resp := rawRequest(t, c, br, tc.req)
			require.Equal(t, tc.code, resp.StatusCode)
			require.True(t, resp.Close, "the answer says Connection: close")
			requireClosed(t, c, br)
		})
	}
	// An honest request keeps its connection.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	br := bufio.NewReader(c)
	for range 2 {
		resp := rawRequest(t, c, br, "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+token+"\r\n\r\n")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.False(t, resp.Close)
	}
}

// honestWithin sends an authorised health request and requires its
// answer within d.
func honestWithin(t *testing.T, addr string, d time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/health", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := cl.Do(req)
	require.NoError(t, err, "the honest client is not served within %v", d)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return time.Since(start)
}

// Many clients without the token, each keeping its connection open after
// its 401 and connecting again when it is closed, do not lock an honest
// client out of a service with 4 connections.
func TestTokenlessClientsDoNotLockOut(t *testing.T) {
	_, addr := newReal(t, func(c *serve.Config) {
		c.Token, c.MaxConns, c.IdleTimeout, c.ReadTimeout = token, 4, time.Minute, 30*time.Second
	})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				_ = c.SetDeadline(time.Now().Add(3 * time.Second))
				br := bufio.NewReader(c)
				if _, err := io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"); err == nil {
					if resp, err := http.ReadResponse(br, nil); err == nil {
						_, _ = io.ReadAll(resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusUnauthorized {
							refused.Add(1)
						}
						// Hold the connection as long as the server lets it.
						_, _ = br.ReadByte()
					}
				}
				c.Close()
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(200 * time.Millisecond)
	var worst time.Duration
	for range 5 {
		worst = max(worst, honestWithin(t, addr, 2*time.Second))
	}
	t.Logf("honest client: slowest answer %v among %d refusals", worst, refused.Load())
	require.Greater(t, refused.Load(), int64(32), "the tokenless clients were refused and came back")
}

// Clients that connect and send nothing hold their connections for
// HeaderTimeout, not for ReadTimeout: an honest client waiting behind
// them is served after it.
func TestSilentClientsReleaseConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for HeaderTimeout")
	}
	_, addr := newReal(t, func(c *serve.Config) {
		c.Token, c.MaxConns, c.IdleTimeout, c.ReadTimeout = token, 2, time.Minute, time.Minute
	})
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		silent = append(silent, c)
	}
	defer func() {
		for _, c := range silent {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	took := honestWithin(t, addr, serve.HeaderTimeout+5*time.Second)
	require.Less(t, took, serve.HeaderTimeout+3*time.Second, fmt.Sprintf("served after %v", took))
	for _, c := range silent {
		requireClosed(t, c, bufio.NewReader(c))
	}
}
