package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/internal/bearer"
)

// startPolicyServer runs train.py's policy_server (no torch: a fixed
// answer) with the given timeout and connection bound, and returns its
// address and process id.
func startPolicyServer(t *testing.T, timeout float64, conns int) (addr string, pid int) {
	t.Helper()
	if _, err := os.Stat(Python); err != nil {
		t.Skipf("no %s", Python)
	}
	cmd := exec.Command(Python, "-c", fmt.Sprintf(`import sys
sys.argv = ["x"]
import train
def answer(body):
    if "bad" in body:
        raise ValueError("bad field")
    if "boom" in body:
        raise KeyError("boom")
    return {"ok": True}
train.run_policy_server(train.policy_server("tok", answer, timeout=%g, conns=%d))
`, timeout, conns))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on http://127.0.0.1:")
	require.True(t, ok, line)
	return "127.0.0.1:" + port, cmd.Process.Pid
}

// threads is the number of threads of process pid.
func threads(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no Threads line")
	return 0
}

// Any body the server cannot parse is answered 400, not a dropped
// connection: 1 MiB of '[' (past Python's recursion limit), bytes that
// are not UTF-8, a body shorter than its Content-Length; an error of the
// answer other than ValueError is 500.
func TestPolicyServerBadBodies(t *testing.T) {
	addr, _ := startPolicyServer(t, 1, 4)
	url := "http://" + addr + "/v1/chat/completions"
	for _, tc := range []struct {
		name, body string
		code       int
	}{
		{"deep nesting", strings.Repeat("[", 1<<20), http.StatusBadRequest},
		{"deep object nesting", strings.Repeat(`{"a":`, 100000), http.StatusBadRequest},
		{"not UTF-8", "\xff\xfe{}", http.StatusBadRequest},
		{"not an object", "[1]", http.StatusBadRequest},
		{"refused by the answer", `{"bad": 1}`, http.StatusBadRequest},
		{"failure of the answer", `{"boom": 1}`, http.StatusInternalServerError},
		{"good", `{"messages": []}`, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := bearer.Call(t, http.MethodPost, url, "tok", []byte(tc.body))
			require.Equal(t, tc.code, code, "%s", b)
		})
	}
	// A body shorter than its Content-Length: the read times out, the
	// connection ends without a hang.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 100\r\n\r\n{}")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadAll(c)
	require.NoError(t, err, "the server closes the connection after its timeout")
}

// Many clients that send half a request hold at most conns threads, each
// for the socket timeout; an honest client is served once they time out.
func TestPolicyServerHalfRequests(t *testing.T) {
	const conns = 4
	addr, pid := startPolicyServer(t, 0.5, conns)
	base := threads(t, pid)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 40 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
		require.NoError(t, err)
		held = append(held, c)
	}
	most := 0
	for range 20 {
		most = max(most, threads(t, pid))
		time.Sleep(25 * time.Millisecond)
	}
	t.Logf("threads: %d before, at most %d with 40 half-requests", base, most)
	require.LessOrEqual(t, most, base+conns, "one thread per handled connection, at most conns")
	start := time.Now()
	code, b := bearer.Call(t, http.MethodPost, "http://"+addr+"/v1/chat/completions", "tok", []byte(`{"messages": []}`))
	require.Equal(t, http.StatusOK, code, "%s", b)
	require.Less(t, time.Since(start), 30*time.Second)
}
