package serve_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
	"github.com/lm2lm/lm2lm/serve/servetest"
)

// serveReal serves s on a random loopback port through Listen and Server.
func serveReal(t *testing.T, s *serve.Service) string {
	t.Helper()
	ln, err := s.Listen("127.0.0.1:0")
	require.NoError(t, err)
	srv := s.Server()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func newReal(t *testing.T, edit func(*serve.Config)) (*serve.Service, string) {
	t.Helper()
	cfg := servetest.Config(t.TempDir())
	edit(&cfg)
	c, _, err := servetest.Components(servetest.Options{})
	require.NoError(t, err)
	s, err := serve.New(cfg, c)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, serveReal(t, s)
}

// TestSlowClientsDoNotStarve: clients trickling their bodies hold no
// in-flight slot, so an honest request beside them is served; the server
// drops them at the read timeout.
func TestSlowClientsDoNotStarve(t *testing.T) {
	_, addr := newReal(t, func(c *serve.Config) { c.MaxInFlight, c.ReadTimeout = 2, 500*time.Millisecond })
	var slow []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		slow = append(slow, c)
		_, err = fmt.Fprintf(c, "POST /v1/states HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		require.NoError(t, err)
	}
	for range 3 {
		code, b := post(t, "http://"+addr+"/v1/states", "", serve.StatesRequest{RequestID: "honest", N: 1})
		require.Equal(t, http.StatusOK, code, string(b))
		for _, c := range slow {
			_, _ = c.Write([]byte(" "))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// At the read timeout the server gives up on them.
	for _, c := range slow {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := io.ReadAll(c) // the server answers or closes; it never waits forever
		require.NoError(t, err)
		c.Close()
	}
}

// TestIdleConnectionsAreClosed: a keep-alive connection left idle is
// closed at the idle timeout.
func TestIdleConnectionsAreClosed(t *testing.T) {
	_, addr := newReal(t, func(c *serve.Config) { c.IdleTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = br.ReadByte()
	require.ErrorIs(t, err, io.EOF, "the idle connection is closed by the server")
}

// TestConnectionCap: beyond MaxConns open connections, a new one waits
// until one closes.
func TestConnectionCap(t *testing.T) {
	_, addr := newReal(t, func(c *serve.Config) { c.MaxConns = 2 })
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = fmt.Fprintf(c, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		held = append(held, c)
	}
	third, err := net.Dial("tcp", addr) // the kernel's backlog takes it
	require.NoError(t, err)
	defer third.Close()
	_, err = fmt.Fprintf(third, "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(third)
	require.NoError(t, third.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = br.ReadByte()
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "not served while two connections are open")
	held[0].Close()
	require.NoError(t, third.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "HTTP/1.1 200"), line)
	held[1].Close()
}
