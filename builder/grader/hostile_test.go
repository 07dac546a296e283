package grader

// Hostile solutions, each run through the real grader: every test here
// is a way a solution once got out of its run, read what grades it, or
// hung the grader (docs/sandbox.md, "What the tests check").

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/reward"
)

// needSandbox skips a test unless this host can give the whole sandbox:
// root, and the namespaces (checked with unshare(1), the same kernel
// calls).
func needSandbox(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox's per-run users and cgroups need root")
	}
	if err := exec.Command("unshare", "--pid", "--fork", "--net", "--mount", "--ipc", "true").Run(); err != nil {
		t.Skipf("the kernel refuses new PID, network, mount or IPC namespaces: %v", err)
	}
}

// openTask makes toyTask's files reachable by any user, as Prepare's are
// (t.TempDir makes its directories 0700).
func openTask(t *testing.T, tk Task) {
	t.Helper()
	for d := tk.Dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0)) }

// pyList writes ss as a Python list of string literals.
func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// token is a string unique to one test run, for finding what a run left.
func token(t *testing.T) string {
	return fmt.Sprintf("lm2lm-hostile-%d-%d", os.Getpid(), time.Now().UnixNano())
}

// procsWith lists the host's processes whose command line holds s.
func procsWith(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(b), s) {
			out = append(out, pid)
		}
	}
	return out
}

// gradeWithin grades code and fails the test, instead of hanging it, when
// Grade does not return long after its Timeout and ctx.
func gradeWithin(t *testing.T, g *Grader, tk Task, code string) Grade {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	type res struct {
		gr  Grade
		err error
	}
	done := make(chan res, 1)
	go func() { gr, err := g.Grade(ctx, tk, code); done <- res{gr, err} }()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		t.Logf("%s; sandbox %+v", r.gr.Summary(), r.gr.Sandbox)
		return r.gr
	case <-time.After(45 * time.Second):
		t.Fatal("Grade did not return 30 s past its ctx deadline")
		return Grade{}
	}
}

func TestHostileReadsAnswers(t *testing.T) {
	// The answers file is found by walking the file system and copied as
	// the submission.
	needSandbox(t)
	g, tk := newToyGrader(t, nil)
	openTask(t, tk)
	code := fmt.Sprintf(`import os, shutil, sys
for top in [%q, %q, '/tmp', '/var/tmp']:
    for d, _, files in os.walk(top):
        if 'answers.csv' in files:
            shutil.copy(os.path.join(d, 'answers.csv'), 'submission.csv')
            sys.exit(0)
sys.exit(3)
`, filepath.Dir(tk.Dir), filepath.Dir(filepath.Dir(tk.Dir)))
	gr := gradeWithin(t, g, tk, code)
	require.Equal(t, reward.RuntimeError, gr.Status, "the answers were found: %s", gr.Summary())
	require.Equal(t, "SystemExit", gr.ErrorType)

	// Variant: the file is opened by its known path.
	code = fmt.Sprintf("import shutil\nshutil.copy(%q, 'submission.csv')\n", filepath.Join(tk.Dir, tk.Answers))
	gr = gradeWithin(t, g, tk, code)
	require.Equal(t, reward.RuntimeError, gr.Status, gr.Summary())
	require.Equal(t, "FileNotFoundError", gr.ErrorType)
}

func TestHostileLabelsFromIDs(t *testing.T) {
	// toyTask's ids are row indices and its label a function of the row
	// index (f0 = id mod 10, target = f0 ≥ 5), as the embedded tasks' ids
	// were indices into scikit-learn's bundled datasets: a solution that
	// ignores the features and looks the label up by id.
	g, tk := newToyGrader(t, nil)
	code := readTest + "with open('submission.csv', 'w') as f:\n    f.write('id,target\\n')\n" +
		"    for r in rows:\n        f.write('%s,%d\\n' % (r['id'], int(r['id']) % 10 >= 5))\n"
	// With ids a fresh permutation per grade, accuracy 1 three times in a
	// row has probability below 2^-20.
	perfect := 0
	for range 3 {
		gr := gradeWithin(t, g, tk, code)
		require.Equal(t, reward.ValidSubmission, gr.Status, gr.Log)
		if gr.Metric == 1 {
			perfect++
		}
	}
	require.Less(t, perfect, 3, "the ids still carry the rows' labels")

	// Variant: the row order of test.csv (a fixed split) gives the rows away.
	code = readTest + "with open('submission.csv', 'w') as f:\n    f.write('id,target\\n')\n" +
		"    for k, r in enumerate(rows):\n        f.write('%s,%d\\n' % (r['id'], k % 2))\n"
	perfect = 0
	for range 3 {
		if gr := gradeWithin(t, g, tk, code); gr.Metric == 1 {
			perfect++
		}
	}
	require.Less(t, perfect, 3, "the row order still carries the labels")
}

func TestRelabel(t *testing.T) {
	in := map[string][]byte{
		"train.csv": []byte("id,f0,target\n10,1,a\n11,2,b\n12,3,c\n"),
		"test.csv":  []byte("f0,id\n4,20\n5,21.0\n"),
		"notes.txt": []byte("id is not a column here\n"),
	}
	hidden := map[string]string{"20": "x", "21": "y"} // the test rows
	seen := map[string]bool{}
	for seed := uint64(0); seed < 20; seed++ {
		out, ids, err := relabel(newRand(seed), in, hidden)
		require.NoError(t, err)
		require.Equal(t, in["notes.txt"], out["notes.txt"])
		// Every row is kept with its features; the five ids are 0..4.
		all := map[string]string{}
		for _, name := range []string{"train.csv", "test.csv"} {
			rows, id, ok := idTable(out[name])
			require.True(t, ok)
			for _, r := range rows[1:] {
				all[r[id]] = strings.Join(append(append([]string{}, r[:id]...), r[id+1:]...), ",")
			}
		}
		require.Len(t, all, 5)
		want := map[string]string{"10": "1,a", "11": "2,b", "12": "3,c", "20": "4", "21": "5"}
		for opaque, rest := range all {
			n, err := strconv.Atoi(opaque)
			require.NoError(t, err)
			require.True(t, n >= 0 && n < 5, opaque)
			require.Equal(t, want[ids.toTask[opaque]], rest, "row %s", opaque)
		}
		seen[string(out["test.csv"])] = true
		// The training rows keep their order (features 1, 2, 3).
		rows, _, _ := idTable(out["train.csv"])
		require.Equal(t, []string{"1", "2", "3"}, []string{rows[1][1], rows[2][1], rows[3][1]})
		// A submission maps back to the task's ids.
		sub := map[string]string{}
		for opaque, task := range ids.toTask {
			if task == "20" || task == "21" {
				sub[opaque] = "p" + task
			}
		}
		back, err := ids.translate(sub)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"20": "p20", "21": "p21"}, back)
		_, err = ids.translate(map[string]string{"99": "x"})
		require.NoError(t, err)
	}
	require.Greater(t, len(seen), 5, "test.csv is drawn afresh: rows and ids vary with the seed")
}

func FuzzRelabel(f *testing.F) {
	for _, s := range []string{"id,a\n1,x\n2,y\n", "a,id\n", "id\n\n", "\"id\",b\n\"1,2\",3\n", "x,y\n1,2\n", ""} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, s string, seed uint64) {
		out, ids, err := relabel(newRand(seed), map[string][]byte{"t.csv": []byte(s)}, map[string]string{"1": "x"})
		if err != nil {
			return
		}
		rows, id, ok := idTable(out["t.csv"])
		if !ok {
			if string(out["t.csv"]) != s {
				t.Fatalf("a file without an id column changed: %q → %q", s, out["t.csv"])
			}
			return
		}
		if len(ids.toTask) != len(rows)-1 {
			t.Fatalf("%d rows, %d ids", len(rows)-1, len(ids.toTask))
		}
		for _, r := range rows[1:] {
			if _, ok := ids.toTask[r[id]]; !ok {
				t.Fatalf("id %q has no task row", r[id])
			}
		}
	})
}

func TestHostileStatusFile(t *testing.T) {
	g, tk := newToyGrader(t, func(c *Config) { c.Timeout = 5 * time.Second })
	// A FIFO in place of the status file once hung Grade past its Timeout
	// and ctx: it is not a regular file, so there is no status.
	gr := gradeWithin(t, g, tk, "import os\nos.remove('.status.json')\nos.mkfifo('.status.json')\nos._exit(0)\n")
	require.Equal(t, reward.RanNoSubmission, gr.Status)
	// Variant: the runner itself blocks on the FIFO (its last status write).
	gr = gradeWithin(t, g, tk, "import os\nos.remove('.status.json')\nos.mkfifo('.status.json')\n")
	require.Equal(t, reward.RuntimeError, gr.Status)
	require.Equal(t, "Timeout", gr.ErrorType)

	// A symbolic link to /proc/self/fd/0 made the grader read its own
	// stdin; here stdin holds a forged status, which must not be read.
	forged, err := os.CreateTemp(t.TempDir(), "stdin")
	require.NoError(t, err)
	_, err = forged.WriteString(`{"status":"runtime_err","error_type":"ReadTheGradersStdin","error_line":7,"message":"x"}`)
	require.NoError(t, err)
	_, err = forged.Seek(0, 0)
	require.NoError(t, err)
	saved, err := syscall.Dup(0)
	require.NoError(t, err)
	require.NoError(t, syscall.Dup2(int(forged.Fd()), 0))
	gr = gradeWithin(t, g, tk, "import os\nos.remove('.status.json')\nos.symlink('/proc/self/fd/0', '.status.json')\nos._exit(11)\n")
	require.NoError(t, syscall.Dup2(saved, 0))
	syscall.Close(saved)
	require.Equal(t, reward.RuntimeError, gr.Status)
	require.Equal(t, "exit status 11", gr.ErrorType, "the status was read through the link")
	// Variant: a link to a file of the run's own.
	gr = gradeWithin(t, g, tk, "import os\nopen('forged', 'w').write('{\"status\": \"runtime_err\", \"error_type\": \"Forged\"}')\n"+
		"os.remove('.status.json')\nos.symlink('forged', '.status.json')\nos._exit(11)\n")
	require.Equal(t, "exit status 11", gr.ErrorType, "the status was read through the link")
	// The submission is read the same way: a link to the answers is refused.
	gr = gradeWithin(t, g, tk, fmt.Sprintf("import os\nos.symlink(%q, 'submission.csv')\n", filepath.Join(tk.Dir, tk.Answers)))
	require.Equal(t, reward.RanNoSubmission, gr.Status)
	require.Contains(t, gr.Detail, "not a regular file")
}

// escapee returns a solution that leaves a process behind: a double fork
// (with setsid, or with only setpgid), the grandchild's command line
// holding tok; the solution then sleeps for wait seconds.
func escapee(how, tok string, wait float64) string {
	return fmt.Sprintf(`import os, time
pid = os.fork()
if pid == 0:
    os.%s
    if os.fork() == 0:
        os.execv('/usr/bin/python3', ['python3', '-c', 'import time; time.sleep(60)', %q])
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(%g)
`, how, tok, wait)
}

func requireNoneLeft(t *testing.T, tok string) {
	t.Helper()
	left := procsWith(tok)
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	require.Empty(t, left, "processes of the run outlived Grade")
}

func TestHostileEscapes(t *testing.T) {
	needSandbox(t)
	g, tk := newToyGrader(t, nil)
	for _, how := range []string{"setsid()", "setpgid(0, 0)"} {
		t.Run(how, func(t *testing.T) {
			tok := token(t)
			gr := gradeWithin(t, g, tk, escapee(how, tok, 0.2))
			require.Equal(t, reward.RanNoSubmission, gr.Status, gr.Log)
			requireNoneLeft(t, tok)
		})
	}
	t.Run("past the timeout", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits for a timeout")
		}
		g, tk := newToyGrader(t, func(c *Config) { c.Timeout = 3 * time.Second })
		tok := token(t)
		gr := gradeWithin(t, g, tk, escapee("setsid()", tok, 60))
		require.Equal(t, "Timeout", gr.ErrorType)
		requireNoneLeft(t, tok)
	})
}

func TestDegradedKillsDescendants(t *testing.T) {
	// Without namespaces (Isolate false) the init is still a subreaper:
	// what the run leaves is killed when its main process exits.
	g, tk := newToyGrader(t, func(c *Config) { c.Isolate = false })
	tok := token(t)
	gr := gradeWithin(t, g, tk, escapee("setsid()", tok, 0.2))
	require.Equal(t, reward.RanNoSubmission, gr.Status, gr.Log)
	require.False(t, gr.Sandbox.PID)
	requireNoneLeft(t, tok)
}

func TestHostileKillsOtherRuns(t *testing.T) {
	// Two runs at once: one signals every process it may, the other is
	// honest and slow. The honest one must not notice.
	needSandbox(t)
	g, tk := newToyGrader(t, nil)
	hostile := map[string]string{
		"kill(-1)": "import os, time\nend = time.time() + 4\nwhile time.time() < end:\n" +
			"    try:\n        os.kill(-1, 9)\n    except OSError:\n        pass\n    time.sleep(0.01)\n",
		"every pid in /proc": "import os, time\nend = time.time() + 4\nwhile time.time() < end:\n" +
			"    for p in os.listdir('/proc'):\n        if p.isdigit() and int(p) != os.getpid() and int(p) > 2:\n" +
			"            try:\n                os.kill(int(p), 9)\n            except OSError:\n                pass\n    time.sleep(0.01)\n",
	}
	honest := "import time\ntime.sleep(2)\n" + solExact
	for name, code := range hostile {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			var bad, good Grade
			wg.Add(2)
			go func() { defer wg.Done(); bad, _ = g.Grade(context.Background(), tk, code) }()
			go func() {
				defer wg.Done()
				time.Sleep(300 * time.Millisecond)
				good, _ = g.Grade(context.Background(), tk, honest)
			}()
			wg.Wait()
			t.Logf("hostile: %s; honest: %s", bad.Summary(), good.Summary())
			require.Equal(t, reward.ValidSubmission, good.Status, "the honest run was killed: %s", good.Summary())
			require.InDelta(t, 0.5+0.5*(2.5/3), good.Score, 1e-12)
			require.NotEqual(t, bad.Sandbox.UID, good.Sandbox.UID)
		})
	}
}

func TestHostileMemory(t *testing.T) {
	needSandbox(t)
	g, tk := newToyGrader(t, func(c *Config) { c.Memory = 256 << 20 })
	if gr := gradeWithin(t, g, tk, "pass\n"); gr.Sandbox.Cgroup == "" {
		t.Skipf("no cgroup limits on this host: %s", gr.Sandbox.Missing)
	}
	// Four children of 180 MB each, every one under the per-process limit
	// of 256 MiB, 720 MB together.
	children := `import os, sys, time
def hold(n):
    b = bytearray(n)
    for i in range(0, n, 4096):
        b[i] = 1
    time.sleep(2)
    return b
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        hold(180 << 20)
        os._exit(0)
    pids.append(pid)
if any(os.waitpid(p, 0)[1] != 0 for p in pids):
    sys.exit(4)
` + solExact
	gr := gradeWithin(t, g, tk, children)
	require.Equal(t, reward.RuntimeError, gr.Status, "720 MB held under a 256 MiB limit: %s", gr.Summary())
	require.Equal(t, "MemoryError", gr.ErrorType)

	// Variant: files in /dev/shm count too (three of 50 MB, under the
	// file-size limit) next to 150 MB held by the process.
	shm := `import time
for k in range(3):
    with open('/dev/shm/blob%d' % k, 'wb') as f:
        f.write(b'x' * (50 << 20))
b = bytearray(150 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
` + solExact
	gr = gradeWithin(t, g, tk, shm)
	require.NotEqual(t, reward.ValidSubmission, gr.Status, "300 MB held under a 256 MiB limit: %s", gr.Summary())

	// Variant: a process limit for the whole run.
	few, _ := newToyGrader(t, func(c *Config) { c.Processes = 16 })
	forks := `import os, sys, time
for _ in range(40):
    if os.fork() == 0:
        time.sleep(3)
        os._exit(0)
` + solExact
	gr = gradeWithin(t, few, tk, forks)
	require.Equal(t, reward.RuntimeError, gr.Status, "40 processes under a limit of 16: %s", gr.Summary())
}

func TestHostileLeavesFiles(t *testing.T) {
	needSandbox(t)
	g, tk := newToyGrader(t, nil)
	tok := token(t)
	paths := []string{"/tmp/" + tok, "/dev/shm/" + tok, "/var/tmp/" + tok}
	t.Cleanup(func() {
		for _, p := range paths {
			os.Remove(p)
		}
	})
	code := "for p in " + pyList(paths) + ":\n    open(p, 'w').write('left behind')\n"
	gr := gradeWithin(t, g, tk, code)
	require.Equal(t, reward.RanNoSubmission, gr.Status, gr.Summary())
	for _, p := range paths {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, "%s outlived the run", p)
	}
}

func TestHostileHostSockets(t *testing.T) {
	needSandbox(t)
	g, tk := newToyGrader(t, nil)
	tok := token(t)
	var accepted sync.WaitGroup
	var mu sync.Mutex
	var got []string
	listen := func(name string) {
		l, err := net.Listen("unix", name)
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		if !strings.HasPrefix(name, "@") {
			require.NoError(t, os.Chmod(name, 0o777))
		}
		accepted.Add(1)
		go func() {
			defer accepted.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				got = append(got, name)
				mu.Unlock()
				c.Close()
			}
		}()
	}
	names := []string{"/tmp/" + tok + ".sock", "/run/" + tok + ".sock", "@" + tok}
	for _, n := range names {
		listen(n)
	}
	code := "import socket\nok = []\nfor p in " + pyList(names) + ":\n" +
		"    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect('\\0' + p[1:] if p[0] == '@' else p)\n" +
		"        ok.append(p)\n    except OSError:\n        pass\nif ok:\n    raise SystemExit('connected to %s' % ok)\n"
	gr := gradeWithin(t, g, tk, code)
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, got, "host sockets accepted the run: %s", gr.Summary())
	require.Equal(t, reward.RanNoSubmission, gr.Status, gr.Summary())
}

func TestHostileInfiniteMetric(t *testing.T) {
	// Finite predictions of 1e308 once scored RMSE +Inf as a valid
	// submission.
	g, tk := newToyGrader(t, nil)
	tk.Metric, tk.ID = RMSE, "toy-rmse"
	g.tasks[tk.ID] = tk
	code := readTest + "with open('submission.csv', 'w') as f:\n    f.write('id,target\\n')\n" +
		"    for r in rows:\n        f.write('%s,1e308\\n' % r['id'])\n"
	gr := gradeWithin(t, g, tk, code)
	require.Equal(t, reward.RanNoSubmission, gr.Status, gr.Summary())
	require.Contains(t, gr.Detail, "rmse is +Inf")
}

func TestGradeKeepsTrainingOrder(t *testing.T) {
	// Relabelling shuffles the test rows only: a learner that depends on
	// the order of its training rows (here: the label of the training row
	// at position f0) scores the same in every grade.
	g, tk := newToyGrader(t, nil)
	code := readTest + "train = list(csv.DictReader(open('train.csv')))\n" +
		"with open('submission.csv', 'w') as f:\n    f.write('id,target\\n')\n" +
		"    for r in rows:\n        f.write('%s,%s\\n' % (r['id'], train[int(r['f0'])]['target']))\n"
	var metrics []float64
	for range 3 {
		gr := gradeWithin(t, g, tk, code)
		require.Equal(t, reward.ValidSubmission, gr.Status, gr.Log)
		metrics = append(metrics, gr.Metric)
	}
	// Training rows 0..9 are ids 1..4, 6..9, 11, 12 with targets 0,0,0,0,1,1,1,1,0,0;
	// the test rows have f0 0 (target 0) or 5 (target 1): position 0 → 0
	// (right), position 5 → 1 (right).
	require.Equal(t, []float64{1, 1, 1}, metrics)
}
