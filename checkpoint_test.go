package lm2lm_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
)

// seal wraps a checkpoint body in the loop's envelope with its checksum.
func seal(body []byte) []byte {
	sum := sha256.Sum256(body)
	b, _ := json.Marshal(map[string]any{"format": "lm2lm/Loop/v1", "sha256": hex.EncodeToString(sum[:]), "body": json.RawMessage(body)})
	return b
}

// part returns the trainer's part of a decoded checkpoint body.
func part(b map[string]any) map[string]any { return b["driver"].(map[string]any) }

// midRun returns a checkpoint of a WMRL trainer stopped at step 11 (five
// mini-batches left, one calibration done) and its decoded body.
func midRun(t testing.TB) ([]byte, map[string]any) {
	cfg := smallConfig()
	cfg.Steps = 20
	cfg.WMRL = wmrlConfig()
	tr, _ := newTrainer(t, cfg, trapWorld(t))
	for tr.Step() < 11 {
		_, err := tr.StepOnce(context.Background())
		require.NoError(t, err)
	}
	cp, err := tr.MarshalBinary()
	require.NoError(t, err)
	var env struct{ Body json.RawMessage }
	require.NoError(t, json.Unmarshal(cp, &env))
	var body map[string]any
	require.NoError(t, json.Unmarshal(env.Body, &body))
	return cp, body
}

func TestCheckpointValidation(t *testing.T) {
	// Every corrupt or inconsistent checkpoint is refused with ErrCheckpoint
	// before any state is replaced (the trainer keeps its step and its own
	// checkpoint bytes).
	cp, _ := midRun(t)
	cfg := smallConfig()
	cfg.Steps = 20
	cfg.WMRL = wmrlConfig()
	fresh, _ := newTrainer(t, cfg, trapWorld(t))
	before, err := fresh.MarshalBinary()
	require.NoError(t, err)
	item := func(b map[string]any) map[string]any {
		return part(b)["batches"].([]any)[0].([]any)[0].(map[string]any)
	}
	for _, c := range []struct {
		name string
		edit func(b map[string]any)
	}{
		{"step beyond Steps", func(b map[string]any) { part(b)["step"] = 99 }},
		{"calibration not done though due", func(b map[string]any) { b["calibrations"] = 0 }},
		{"calibration done ahead", func(b map[string]any) { b["calibrations"] = 2; part(b)["step"] = 12 }},
		{"mini-batch count", func(b map[string]any) { part(b)["batches"] = part(b)["batches"].([]any)[1:] }},
		{"unknown pool task", func(b map[string]any) { b["pool"].(map[string]any)["nope"] = []any{} }},
		{"negative cost", func(b map[string]any) { b["cost"] = map[string]any{"device_seconds": -1} }},
		{"negative runs", func(b map[string]any) { b["runs"] = -1 }},
		{"rng", func(b map[string]any) { b["rng"] = "AAAA" }},
		{"positive log-prob", func(b map[string]any) {
			s := item(b)["Sample"].(map[string]any)
			s["LogProbs"].([]any)[0] = 0.5
		}},
		{"log-probs and tokens differ in length", func(b map[string]any) {
			s := item(b)["Sample"].(map[string]any)
			s["LogProbs"] = s["LogProbs"].([]any)[1:]
		}},
		{"unknown token", func(b map[string]any) {
			s := item(b)["Sample"].(map[string]any)
			s["Invalid"] = false
			s["Proposal"] = map[string]any{"mechanism": "teleport", "params": map[string]any{"level": "1"}}
			s["Tokens"] = []any{"teleport", "level=1"}
			s["LogProbs"] = []any{-1.0, -1.0}
		}},
		{"task of another trainer", func(b map[string]any) {
			item(b)["State"].(map[string]any)["task"].(map[string]any)["id"] = "elsewhere"
		}},
		{"WMRL state missing", func(b map[string]any) { delete(b, "wmrl") }},
		{"weighter state corrupt", func(b map[string]any) {
			b["wmrl"].(map[string]any)["weighter"].(map[string]any)["d"] = -1
		}},
		{"debiaser pairs mismatched", func(b map[string]any) {
			d := b["wmrl"].(map[string]any)["debiaser"].(map[string]any)
			d["x"] = append(d["x"].([]any), 0.5)
		}},
		{"policy", func(b map[string]any) { part(b)["policy"] = "e30=" }},
		{"no trainer's part", func(b map[string]any) { delete(b, "driver") }},
		{"a trainer's part outside it", func(b map[string]any) { b["batches"] = part(b)["batches"] }},
		{"a calibration in flight not due", func(b map[string]any) {
			b["in_flight"] = map[string]any{"phase": 3, "cal_u": 1}
		}},
		{"an earlier version's step in flight", func(b map[string]any) {
			b["in_flight"] = map[string]any{"phase": 2}
		}},
		{"version inside the body", func(b map[string]any) { b["version"] = 1 }},
	} {
		_, body := midRun(t)
		c.edit(body)
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		err = fresh.UnmarshalBinary(seal(raw))
		require.ErrorIs(t, err, lm2lm.ErrCheckpoint, c.name)
		after, err := fresh.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, string(before), string(after), "%s: the trainer changed", c.name)
	}
	// The checksum and the format are checked.
	bad := []byte(string(cp))
	bad[len(bad)/2] ^= 1
	require.ErrorIs(t, fresh.UnmarshalBinary(bad), lm2lm.ErrCheckpoint)
	var env map[string]any
	require.NoError(t, json.Unmarshal(cp, &env))
	env["format"] = "lm2lm/Trainer/v9"
	b, _ := json.Marshal(env)
	require.ErrorIs(t, fresh.UnmarshalBinary(b), lm2lm.ErrCheckpoint)
	env["format"], env["sha256"] = "lm2lm/Loop/v1", "00"
	b, _ = json.Marshal(env)
	require.ErrorContains(t, fresh.UnmarshalBinary(b), "checksum")
	require.NoError(t, fresh.UnmarshalBinary(cp))
	require.Equal(t, 11, fresh.Step())
}

// FuzzTrainerUnmarshal: any input, taken as a whole checkpoint or sealed as
// a body with a correct checksum, is either refused with ErrCheckpoint,
// leaving the trainer unchanged, or restores a trainer whose own checkpoint
// restores again.
func FuzzTrainerUnmarshal(f *testing.F) {
	cp, body := midRun(f)
	raw, _ := json.Marshal(body)
	f.Add(cp, false)
	f.Add(raw, true)
	f.Add([]byte(`{}`), true)
	f.Add([]byte(`{"format":"lm2lm/Trainer/v2","sha256":"","body":{}}`), false)
	f.Add([]byte(`{"format":"lm2lm/Loop/v1","sha256":"","body":{}}`), false)
	f.Add([]byte(`{"version":1,"seed":1}`), false)
	cfg := smallConfig()
	cfg.Steps = 20
	cfg.WMRL = wmrlConfig()
	f.Fuzz(func(t *testing.T, data []byte, sealed bool) {
		tr, _ := newTrainer(t, cfg, trapWorld(t))
		before, err := tr.MarshalBinary()
		require.NoError(t, err)
		in := data
		if sealed {
			in = seal(data)
		}
		if err := tr.UnmarshalBinary(in); err != nil {
			require.ErrorIs(t, err, lm2lm.ErrCheckpoint)
			after, err := tr.MarshalBinary()
			require.NoError(t, err)
			require.Equal(t, string(before), string(after), "a refused checkpoint changed the trainer")
			return
		}
		again, err := tr.MarshalBinary()
		require.NoError(t, err)
		tr2, _ := newTrainer(t, cfg, trapWorld(t))
		require.NoError(t, tr2.UnmarshalBinary(again))
		require.Equal(t, tr.Step(), tr2.Step())
	})
}

// A damaged checkpoint's error quotes no outside string whole: a 4 MiB
// format, pool task or mini-batch task makes an error of bounded length
// that still wraps ErrCheckpoint.
func TestCheckpointErrorsBounded(t *testing.T) {
	huge := strings.Repeat("x", 4<<20)
	cp, _ := midRun(t)
	cfg := smallConfig()
	cfg.Steps = 20
	cfg.WMRL = wmrlConfig()
	fresh, _ := newTrainer(t, cfg, trapWorld(t))
	check := func(t *testing.T, name string, data []byte) {
		t.Helper()
		err := fresh.UnmarshalBinary(data)
		require.ErrorIs(t, err, lm2lm.ErrCheckpoint, name)
		require.True(t, errors.Is(err, lm2lm.ErrCheckpoint), name)
		require.Less(t, len(err.Error()), 1<<10, "%s: %.200s", name, err.Error())
	}
	var env map[string]any
	require.NoError(t, json.Unmarshal(cp, &env))
	env["format"] = huge
	b, err := json.Marshal(env)
	require.NoError(t, err)
	check(t, "format", b)

	for name, edit := range map[string]func(b map[string]any){
		"pool task": func(b map[string]any) { b["pool"].(map[string]any)[huge] = []any{} },
		"record filed under another task": func(b map[string]any) {
			for _, rs := range b["pool"].(map[string]any) {
				if rs := rs.([]any); len(rs) > 0 {
					rs[0].(map[string]any)["task"].(map[string]any)["id"] = huge
					return
				}
			}
			panic("no pool record")
		},
		"mini-batch task": func(b map[string]any) {
			item := part(b)["batches"].([]any)[0].([]any)[0].(map[string]any)
			item["State"].(map[string]any)["task"].(map[string]any)["id"] = huge
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, body := midRun(t)
			edit(body)
			raw, err := json.Marshal(body)
			require.NoError(t, err)
			check(t, name, seal(raw))
		})
	}
}
