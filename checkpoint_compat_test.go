package lm2lm_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/rwm"
)

// readGzip returns the contents of a gzipped file under testdata.
func readGzip(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	require.NoError(t, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	b, err := io.ReadAll(zr)
	require.NoError(t, err)
	return b
}

// policyOf returns the policy checkpoint of an earlier version's trainer
// checkpoint (format lm2lm/Trainer/v3: a flat body).
func policyOf(t *testing.T, cp []byte) []byte {
	t.Helper()
	var env struct {
		Format string
		Body   struct{ Policy []byte }
	}
	require.NoError(t, json.Unmarshal(cp, &env))
	require.Equal(t, "lm2lm/Trainer/v3", env.Format)
	return env.Body.Policy
}

func TestEarlierCheckpointsResume(t *testing.T) {
	// The testdata are checkpoints an earlier version of the Trainer wrote
	// (format lm2lm/Trainer/v3) in the middle of a run with WMRL and of one
	// with a calibration trigger, and at the end of each run uninterrupted.
	// This version restores the middle one and trains on to the same final
	// policy, M, pool and cost, byte for byte: what the method computes did
	// not change, and earlier checkpoints still load.
	ctx := context.Background()
	wmrl := smallConfig()
	wmrl.Steps = 20
	wmrl.WMRL = wmrlConfig()
	for _, c := range []struct {
		name   string
		cfg    lm2lm.Config
		world  func() rwm.WorldModel
		stopAt int
	}{
		{"wmrl", wmrl, func() rwm.WorldModel { return trapWorld(t) }, 11},
		{"trigger", triggerConfig(), func() rwm.WorldModel { return shifted(4) }, 13},
	} {
		t.Run(c.name, func(t *testing.T) {
			mid := readGzip(t, "trainer-v3-"+c.name+"-step"+map[string]string{"wmrl": "11", "trigger": "13"}[c.name]+".json.gz")
			final := readGzip(t, "trainer-v3-"+c.name+"-final.json.gz")
			resumed, pol := newTrainer(t, c.cfg, c.world())
			require.NoError(t, resumed.UnmarshalBinary(mid))
			require.Equal(t, c.stopAt, resumed.Step())
			_, err := resumed.Run(ctx, nil)
			require.NoError(t, err)

			ended, _ := newTrainer(t, c.cfg, c.world())
			require.NoError(t, ended.UnmarshalBinary(final), "a finished run's checkpoint loads too")
			require.Equal(t, c.cfg.Steps, ended.Step())

			got, err := pol.MarshalBinary()
			require.NoError(t, err)
			require.True(t, bytes.Equal(policyOf(t, final), got), "final policy")
			require.Equal(t, ended.Evidence().Fingerprint(), resumed.Evidence().Fingerprint(), "final M")
			for _, task := range tasks() {
				require.Equal(t, ended.Pool().Records(task.ID), resumed.Pool().Records(task.ID), "pool of %s", task.ID)
			}
			c1, r1 := ended.Cost()
			c2, r2 := resumed.Cost()
			require.Equal(t, c1, c2)
			require.Equal(t, r1, r2)

			// And a run of this version from the start ends there too.
			straight, spol := newTrainer(t, c.cfg, c.world())
			_, err = straight.Run(ctx, nil)
			require.NoError(t, err)
			sgot, err := spol.MarshalBinary()
			require.NoError(t, err)
			require.True(t, bytes.Equal(got, sgot), "straight run's final policy")
		})
	}
}

func TestCheckpointOfAnotherDriverRefused(t *testing.T) {
	// A loop checkpoint with no trainer's part (the environment service's)
	// is refused with a message that says so.
	cp, body := midRun(t)
	_ = cp
	delete(body, "driver")
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	cfg := smallConfig()
	cfg.Steps = 20
	cfg.WMRL = wmrlConfig()
	fresh, _ := newTrainer(t, cfg, trapWorld(t))
	err = fresh.UnmarshalBinary(seal(raw))
	require.ErrorIs(t, err, lm2lm.ErrCheckpoint)
	require.ErrorContains(t, err, "no trainer's part")
}

// downNode fails every run with a machinery failure while down is set.
type downNode struct {
	builder.Executor
	down atomic.Bool
}

func (e *downNode) Execute(ctx context.Context, j builder.Job) (builder.Outcome, error) {
	if e.down.Load() {
		return builder.Outcome{}, fmt.Errorf("%w: node lost", builder.ErrCancelled)
	}
	return e.Executor.Execute(ctx, j)
}

func TestCheckpointWithCalibrationInFlight(t *testing.T) {
	// A step whose calibration runs fail leaves them pending: a checkpoint
	// taken then restores, and the trainer it restores goes on as the one
	// it was taken of, executing the same runs on the retry.
	ctx := context.Background()
	cfg := smallConfig()
	cfg.Steps = 20
	newFlaky := func() (*lm2lm.Trainer, *downNode) {
		pcfg := proposer.DefaultPolicyConfig()
		pcfg.Adam.LR = 0.05
		pol, err := proposer.NewPolicy(catalogue(), pcfg, nil)
		require.NoError(t, err)
		ex := &downNode{Executor: oracle{}}
		tr, err := lm2lm.New(cfg, lm2lm.Components{Policy: pol, World: trapWorld(t), Builder: oracle{}, Executor: ex,
			Tasks: tasks(), Evidence: m0(t, "wider", "lr", "decay")})
		require.NoError(t, err)
		return tr, ex
	}
	tr, ex := newFlaky()
	for tr.Step() < 8 {
		_, err := tr.StepOnce(ctx)
		require.NoError(t, err)
	}
	ex.down.Store(true)
	_, err := tr.StepOnce(ctx)
	require.ErrorIs(t, err, builder.ErrCancelled)
	require.Equal(t, 8, tr.Step())
	ex.down.Store(false)
	cp, err := tr.MarshalBinary()
	require.NoError(t, err)
	want, err := tr.Run(ctx, nil)
	require.NoError(t, err)
	require.NotNil(t, want[0].Calibration, "the retry runs the calibration")
	wantState, err := tr.MarshalBinary()
	require.NoError(t, err)

	resumed, _ := newFlaky()
	require.NoError(t, resumed.UnmarshalBinary(cp))
	got, err := resumed.Run(ctx, nil)
	require.NoError(t, err)
	if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
		t.Fatalf("reports differ (-taken +restored):\n%s", diff)
	}
	gotState, err := resumed.MarshalBinary()
	require.NoError(t, err)
	require.Equal(t, string(wantState), string(gotState))
}
