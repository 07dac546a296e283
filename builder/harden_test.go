package builder_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/builder/buildertest"
	"github.com/lm2lm/lm2lm/records"
)

// shScript is a subprocess command running a shell script; "$1" is the job
// file and "$2" the result file.
func shScript(script string) func(*builder.SubprocessConfig) {
	return func(c *builder.SubprocessConfig) { c.Command = []string{"/bin/sh", "-c", script, "sh"} }
}

// TestSubprocessResultFIFO: a result "file" that is a FIFO (directly or
// behind a symlink) neither blocks Execute past its Timeout or ctx nor is
// read: it is a bad result, at once.
func TestSubprocessResultFIFO(t *testing.T) {
	for name, script := range map[string]string{
		"fifo":    `mkfifo "$2"`,
		"symlink": `mkfifo "$2.fifo" && ln -s "$2.fifo" "$2"`,
		"device":  `ln -s /dev/zero "$2"`,
	} {
		t.Run(name, func(t *testing.T) {
			s := newSubprocess(t, func(c *builder.SubprocessConfig) {
				shScript(script)(c)
				c.Timeout = time.Hour
			})
			done := make(chan error, 1)
			go func() {
				_, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
				done <- err
			}()
			select {
			case err := <-done:
				require.ErrorIs(t, err, builder.ErrFailed)
				require.ErrorIs(t, err, builder.ErrBadResult)
				require.Contains(t, err.Error(), "not a regular file")
			case <-time.After(time.Minute):
				t.Fatal("Execute blocks on a result FIFO")
			}
		})
	}
}

// TestSubprocessImplausibleResult: a loss outside its metric's range, or a
// gain that disagrees with b_e − loss, is ErrFailed and, through a Pool, is
// neither returned as an outcome nor stored as evidence.
func TestSubprocessImplausibleResult(t *testing.T) {
	// The conformance task has b_e = 1.5, σ_e = 0.01: tolerance 0.115.
	for _, res := range []string{`{"loss": -1e300}`, `{"loss": -0.5}`, `{"loss": 1e300}`, `{"loss": 65}`,
		`{"loss": 1, "gain": 1e300}`, `{"loss": 1, "gain": 1000}`, `{"loss": 1, "gain": 0.62}`, `{"loss": 1, "gain": 0}`} {
		t.Run(res, func(t *testing.T) {
			store := records.NewMemStore()
			p := newPool(t, newSubprocess(t, shScript(`printf '%s' '`+res+`' > "$2"`)), func(c *builder.PoolConfig) { c.Store = store })
			out, err := p.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
			require.ErrorIs(t, err, builder.ErrFailed)
			require.ErrorIs(t, err, records.ErrImplausible)
			require.NotErrorIs(t, err, builder.ErrTransient)
			require.Zero(t, out.Loss)
			require.Zero(t, out.Gain)
			rs, serr := store.Scan(context.Background(), records.Filter{})
			require.NoError(t, serr)
			require.Empty(t, rs, "an implausible result is never stored")
		})
	}
	for _, res := range []string{`{"loss": 1}`, `{"loss": 1, "gain": 0.6}`, `{"loss": 1, "gain": 0.4}`, `{"loss": 0}`, `{"loss": 64, "gain": -62.5}`} {
		s := newSubprocess(t, shScript(`printf '%s' '`+res+`' > "$2"`))
		_, err := s.Execute(context.Background(), buildertest.Job(buildertest.Spec{}))
		require.NoError(t, err, res)
	}
}

// olderStore is a store written by an older version, which let old's
// records in unchecked: Scan returns them before the store's own.
type olderStore struct {
	*records.MemStore
	old []records.Record
}

func (s olderStore) Scan(ctx context.Context, f records.Filter) ([]records.Record, error) {
	rs, err := s.MemStore.Scan(ctx, f)
	return append(append([]records.Record(nil), s.old...), rs...), err
}

// TestPoolRefusesImplausibleOutcome: whatever the executor, the pool turns
// an implausible outcome into ErrFailed and does not store it; a stored
// implausible record is not reused.
func TestPoolRefusesImplausibleOutcome(t *testing.T) {
	store := records.NewMemStore()
	runs := 0
	x := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		runs++
		return builder.Outcome{Loss: 1, Gain: 1000, Seeds: []uint64{j.Seed}}, nil
	})
	p := newPool(t, x, func(c *builder.PoolConfig) { c.Store = store })
	j := buildertest.Job(buildertest.Spec{})
	_, err := p.Execute(context.Background(), j)
	require.ErrorIs(t, err, builder.ErrFailed)
	require.ErrorIs(t, err, records.ErrImplausible)
	rs, _ := store.Scan(context.Background(), records.Filter{})
	require.Empty(t, rs)

	bad := builder.Outcome{Loss: 1, Gain: 1000, Seeds: []uint64{j.Seed}}.Record(j)
	require.ErrorIs(t, store.Append(context.Background(), bad), records.ErrImplausible)
	good := buildertest.Func(func(ctx context.Context, j builder.Job) (builder.Outcome, error) {
		runs++
		return builder.Outcome{Loss: 1, Gain: 0.5, Seeds: []uint64{j.Seed}}, nil
	})
	older := olderStore{MemStore: store, old: []records.Record{bad}} // a store from an older version
	p = newPool(t, good, func(c *builder.PoolConfig) { c.Store = older })
	out, err := p.Execute(context.Background(), j)
	require.NoError(t, err)
	require.Equal(t, 0.5, out.Gain)
	require.Equal(t, 2, runs, "the implausible stored record was not reused")
}

// TestSubprocessKillsDescendantsAfterSetsid: a grandchild that leaves the
// script's process group with setsid (and is orphaned by a double fork) is
// still killed, both when the script exits by itself and when it is
// cancelled.
func TestSubprocessKillsDescendantsAfterSetsid(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid(1)")
	}
	for _, mode := range []string{"exit", "cancel"} {
		t.Run(mode, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "escapee.pid")
			// The escapee: a new session, its parent gone, its output
			// detached; it records its pid and sleeps.
			escape := fmt.Sprintf(`setsid /bin/sh -c 'echo $$ > %s.tmp && mv %s.tmp %s && exec sleep 600' </dev/null >/dev/null 2>&1 &`, pidFile, pidFile, pidFile)
			script := `( ` + escape + ` ); while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done; `
			if mode == "exit" {
				script += `printf '{"loss": 1}' > "$2"`
			} else {
				script += `exec sleep 600`
			}
			s := newSubprocess(t, shScript(script))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if mode == "cancel" {
				go func() {
					for {
						if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
							cancel()
							return
						}
						time.Sleep(10 * time.Millisecond)
					}
				}()
			}
			_, err := s.Execute(ctx, buildertest.Job(buildertest.Spec{}))
			if mode == "exit" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, builder.ErrCancelled)
			}
			b, err := os.ReadFile(pidFile)
			require.NoError(t, err)
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			require.Eventually(t, func() bool { return !alive(pid) }, 10*time.Second, 10*time.Millisecond,
				"the escapee %d survived", pid)
		})
	}
}
