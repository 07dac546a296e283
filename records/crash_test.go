package records_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/records/storetest"
)

// Environment of the helper processes started by this test binary.
const (
	envChild = "LM2LM_RECORDS_TEST_CHILD" // "crash" or "lock"
	envPath  = "LM2LM_RECORDS_TEST_PATH"  // the store file
	envID    = "LM2LM_RECORDS_TEST_ID"    // the crash child's number
	envKills = "LM2LM_CRASH_KILLS"        // number of kills (default 200, 20 under -short)
	envSeed  = "LM2LM_CRASH_SEED"         // seed of the kill schedule (default 1)
)

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "crash":
		os.Exit(crashChild())
	case "lock":
		os.Exit(lockChild())
	}
	code := m.Run()
	removeBenchStore()
	os.Exit(code)
}

// crashRecord is part `part` of the batch of `size` records that crash
// child `child` appends as its batch number `batch`. The parent rebuilds it
// from those four numbers to check that what it reads is intact.
func crashRecord(child, batch, part, size int) records.Record {
	r := storetest.Record(child*7 + batch*3 + part)
	r.Proposal.Params = map[string]string{
		"child": strconv.Itoa(child), "batch": strconv.Itoa(batch),
		"part": strconv.Itoa(part), "size": strconv.Itoa(size),
	}
	r.Proposal.Text = strings.Repeat("padding so that lines cross pages ", batch%7)
	if size > 4 {
		r.Proposal.Text = strings.Repeat("a big batch spans many pages ", 150) // ≈ 4 KiB
	}
	r.Seeds = []uint64{uint64(child)<<32 | uint64(batch)<<8 | uint64(part)}
	r.Gain = float64(batch-part) / 1024
	r.Loss = r.Task.RefLoss - r.Gain
	r.Infeasible = ""
	return r
}

// crashChild opens the store, prints "ready", then appends batches of 1 to
// 4 records (and now and then 16 to 64 big ones) until it is killed, printing "ack <batch>" after each Append
// returns.
func crashChild() int {
	id, _ := strconv.Atoi(os.Getenv(envID))
	s, err := records.OpenFile(os.Getenv(envPath), records.DefaultFileConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	fmt.Fprintln(os.Stdout, "ready")
	rng := rand.New(rand.NewPCG(uint64(id), 99))
	deadline := time.Now().Add(time.Minute) // never reached when the parent works
	for b := 0; time.Now().Before(deadline); b++ {
		n := 1 + rng.IntN(4)
		if rng.IntN(8) == 0 {
			n = 16 + rng.IntN(49) // a batch of ≈ 64-260 KiB, written by one write(2)
		}
		batch := make([]records.Record, n)
		for p := range batch {
			batch[p] = crashRecord(id, b, p, n)
		}
		if err := s.Append(context.Background(), batch...); err != nil {
			fmt.Fprintln(os.Stderr, "child append:", err)
			return 2
		}
		fmt.Fprintf(os.Stdout, "ack %d\n", b)
	}
	return 3
}

// lockChild opens the store for writing, prints "locked" and holds the lock
// until its stdin is closed.
func lockChild() int {
	s, err := records.OpenFile(os.Getenv(envPath), records.DefaultFileConfig())
	if err != nil {
		fmt.Fprintln(os.Stdout, "error:", err)
		return 2
	}
	fmt.Fprintln(os.Stdout, "locked")
	io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stdout, "error:", err)
		return 2
	}
	return 0
}

func TestFileStoreLockAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envChild+"=lock", envPath+"="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)

	_, err = records.OpenFile(path, records.DefaultFileConfig())
	require.ErrorIs(t, err, records.ErrLocked)
	ro, err := records.OpenFile(path, records.FileConfig{ReadOnly: true})
	require.NoError(t, err, "a reader needs no lock")
	require.NoError(t, ro.Close())

	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait())
	s, err := records.OpenFile(path, records.DefaultFileConfig())
	require.NoError(t, err, "lock released when the other process exits")
	require.NoError(t, s.Close())
}

// TestCrash is the store's crash test: a child process appends records
// in a loop and is killed with SIGKILL at random moments. After each kill
// the store reopens without error, every batch whose Append returned is
// present and intact, every batch is all or none, and appends continue.
func TestCrash(t *testing.T) {
	kills := 200
	if testing.Short() {
		kills = 20
	}
	if v := os.Getenv(envKills); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, envKills)
		kills = n
	}
	seed := uint64(1)
	if v := os.Getenv(envSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, envSeed)
		seed = n
	}
	t.Logf("%d kills, seed %d (%s, %s)", kills, seed, envKills, envSeed)
	rng := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	const killsPerFile = 25 // a fresh file now and then keeps reopening cheap

	var (
		path   string
		acked  map[[2]int]bool // (child, batch) whose Append returned
		parent int             // records the parent appended to the current file
		stats  struct{ beforeReady, acks, torn int }
	)
	for k := range kills {
		if k%killsPerFile == 0 {
			path = filepath.Join(dir, fmt.Sprintf("crash-%d.jsonl", k/killsPerFile))
			acked, parent = map[[2]int]bool{}, 0
		}
		waitReady := rng.IntN(4) != 0
		delay := time.Duration(rng.IntN(4000)) * time.Microsecond
		if !waitReady {
			delay = time.Duration(rng.IntN(15000)) * time.Microsecond
			stats.beforeReady++
		}
		out, stderr := runAndKill(t, k, path, waitReady, delay)
		for _, l := range strings.Split(out, "\n") {
			if b, ok := strings.CutPrefix(l, "ack "); ok {
				n, err := strconv.Atoi(b)
				require.NoError(t, err, "child output %q", out)
				acked[[2]int{k, n}] = true
				stats.acks++
			}
		}

		// Reopen: writable on even kills (truncating any torn tail and
		// appending one record), read-only on odd ones (leaving the tail
		// for the next child's open to truncate).
		cfg := records.DefaultFileConfig()
		if k%2 == 1 {
			cfg = records.FileConfig{ReadOnly: true}
		}
		s, err := records.OpenFile(path, cfg)
		if errors.Is(err, os.ErrNotExist) && k%killsPerFile == 0 && len(acked) == 0 {
			continue // killed before the first child created the file
		}
		require.NoError(t, err, "reopen after kill %d (child stderr: %s)", k, stderr)
		if s.TornBytes() > 0 {
			stats.torn++
		}
		rs, err := s.Scan(context.Background(), records.Filter{})
		require.NoError(t, err)
		checkCrashRecords(t, k, rs, acked, parent)
		if !cfg.ReadOnly {
			r := storetest.Record(k)
			r.Proposal.Params = map[string]string{"parent": strconv.Itoa(k)}
			require.NoError(t, s.Append(context.Background(), r), "append after kill %d", k)
			parent++
		}
		require.NoError(t, s.Close())
	}
	t.Logf("%d kills (%d before the child was ready), %d acknowledged batches, %d reopens dropped a torn tail",
		kills, stats.beforeReady, stats.acks, stats.torn)
}

// runAndKill starts crash child k and SIGKILLs it after delay (counted
// from its "ready" line when waitReady). It returns the child's complete
// stdout and stderr.
func runAndKill(t *testing.T, k int, path string, waitReady bool, delay time.Duration) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envChild+"=crash", envPath+"="+path, envID+"="+strconv.Itoa(k))
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	pipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	var out bytes.Buffer
	ready := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		br := bufio.NewReader(pipe)
		first := true
		for {
			// Only whole lines count: a line cut by the kill has no '\n'.
			l, err := br.ReadString('\n')
			if err != nil {
				break
			}
			out.WriteString(l)
			if first {
				close(ready)
				first = false
			}
		}
		if first {
			close(ready)
		}
	})
	if waitReady {
		select {
		case <-ready:
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			wg.Wait()
			cmd.Wait()
			t.Fatalf("crash child %d never became ready; stderr:\n%s", k, errBuf.String())
		}
	}
	time.Sleep(delay)
	killErr := cmd.Process.Signal(syscall.SIGKILL)
	wg.Wait()
	err = cmd.Wait()
	if killErr != nil {
		t.Fatalf("kill child %d: %v; it ended with %v; stderr:\n%s", k, killErr, err, errBuf.String())
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("crash child %d ended with %v, not by SIGKILL; stderr:\n%s", k, err, errBuf.String())
	}
	return out.String(), errBuf.String()
}

// checkCrashRecords checks a reopened crash store: every record is intact
// (equal to the record its child built), batches are complete and in
// order, nothing is duplicated, every acknowledged batch is present, and
// the parent's own appends survived.
func checkCrashRecords(t *testing.T, k int, rs []records.Record, acked map[[2]int]bool, parent int) {
	t.Helper()
	found := map[[2]int]bool{}
	lastBatch := map[int]int{}
	parents := 0
	for i := 0; i < len(rs); {
		p := rs[i].Proposal.Params
		if _, ok := p["parent"]; ok {
			parents++
			i++
			continue
		}
		child, e1 := strconv.Atoi(p["child"])
		batch, e2 := strconv.Atoi(p["batch"])
		size, e3 := strconv.Atoi(p["size"])
		if err := errors.Join(e1, e2, e3); err != nil || size < 1 {
			t.Fatalf("after kill %d: record %d has params %v", k, i, p)
		}
		id := [2]int{child, batch}
		if found[id] {
			t.Fatalf("after kill %d: child %d batch %d appears twice", k, child, batch)
		}
		prev, ok := lastBatch[child]
		if !ok {
			prev = -1
		}
		if batch != prev+1 {
			t.Fatalf("after kill %d: child %d batch %d follows batch %d (-1: none)", k, child, batch, prev)
		}
		found[id], lastBatch[child] = true, batch
		for part := range size {
			if i+part >= len(rs) {
				t.Fatalf("after kill %d: child %d batch %d has %d of %d records", k, child, batch, part, size)
			}
			want := crashRecord(child, batch, part, size)
			if diff := cmp.Diff(want, rs[i+part], cmpOpts...); diff != "" {
				t.Fatalf("after kill %d: record %d (child %d batch %d part %d) not intact (-want +got):\n%s",
					k, i+part, child, batch, part, diff)
			}
		}
		i += size
	}
	for id := range acked {
		if !found[id] {
			t.Fatalf("after kill %d: acknowledged batch %d of child %d is missing", k, id[1], id[0])
		}
	}
	if parents != parent {
		t.Fatalf("after kill %d: %d parent records, want %d", k, parents, parent)
	}
}
