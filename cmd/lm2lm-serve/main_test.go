package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
)

func TestHelpSaysWhatItDoes(t *testing.T) {
	var b bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &b)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, b.String(), "environment service for RL trainers (verl, TRL, OpenRLHF, slime, prime-rl)")
	require.Contains(t, b.String(), "-addr")
	require.Contains(t, b.String(), "/get_reward")
	require.Contains(t, b.String(), "-max-in-flight")
	require.NotContains(t, b.String(), "-token ", "the token never travels on the command line")
}

func noEnv(string) string { return "" }

func TestRefusesPublicAddressWithoutToken(t *testing.T) {
	var b bytes.Buffer
	o, err := parseFlags([]string{"-addr", "0.0.0.0:9", "-dir", t.TempDir()}, &b)
	require.NoError(t, err)
	err = run(context.Background(), o, noEnv, &b)
	require.True(t, errors.Is(err, serve.ErrConfig), "%v", err)
	require.Contains(t, err.Error(), "bearer token is required")
}

func TestTokenFromFileOrEnvironment(t *testing.T) {
	f := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(f, []byte("a-file-token-of-enough-bytes\n"), 0o600))
	tok, err := serve.Token(f, noEnv)
	require.NoError(t, err)
	require.Equal(t, "a-file-token-of-enough-bytes", tok)
	tok, err = serve.Token("", func(k string) string { return map[string]string{serve.TokenEnv: "from-env"}[k] })
	require.NoError(t, err)
	require.Equal(t, "from-env", tok)
	// A blank token for a public address is refused.
	require.NoError(t, os.WriteFile(f, []byte(" \n"), 0o600))
	o, err := parseFlags([]string{"-addr", "0.0.0.0:9", "-dir", t.TempDir(), "-token-file", f}, &bytes.Buffer{})
	require.NoError(t, err)
	require.ErrorIs(t, run(context.Background(), o, noEnv, &bytes.Buffer{}), serve.ErrConfig)
}

func TestBusyPortAndLockedDirFailFirst(t *testing.T) {
	// Both are found before any reference run (which would take minutes
	// and write the store).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	dir := t.TempDir()
	o, err := parseFlags([]string{"-addr", ln.Addr().String(), "-dir", filepath.Join(dir, "s"), "-store", filepath.Join(dir, "r.jsonl")}, &bytes.Buffer{})
	require.NoError(t, err)
	err = run(context.Background(), o, noEnv, &bytes.Buffer{})
	require.ErrorContains(t, err, "address already in use")
	require.NoFileExists(t, filepath.Join(dir, "r.jsonl"))

	release, err := serve.LockDir(filepath.Join(dir, "s"))
	require.NoError(t, err)
	defer release()
	o.addr = "127.0.0.1:0"
	err = run(context.Background(), o, noEnv, &bytes.Buffer{})
	require.ErrorIs(t, err, serve.ErrLocked)
	require.NoFileExists(t, filepath.Join(dir, "r.jsonl"))
}

func TestRejectsArguments(t *testing.T) {
	var b bytes.Buffer
	_, err := parseFlags([]string{"extra"}, &b)
	require.ErrorContains(t, err, "unexpected arguments")
}

func TestScheduleFlag(t *testing.T) {
	tests := []struct {
		name, flag      string
		steps, budgets  []int
		wantErrContains string
	}{
		{"default", "", []int{16, 40, 64}, []int{31, 38, 31}, ""},
		{"points", "2:3, 4:5", []int{2, 4}, []int{3, 5}, ""},
		{"every 20 steps to 100", "20-100/20:31", []int{20, 40, 60, 80, 100}, []int{31, 31, 31, 31, 31}, ""},
		{"mixed", "16:31,40-64/24:38", []int{16, 40, 64}, []int{31, 38, 38}, ""},
		{"not increasing", "40:3,16:3", nil, nil, "strictly increasing"},
		{"no budget", "16", nil, nil, "want STEP:BUDGET"},
		{"zero budget", "16:0", nil, nil, "budget"},
		{"too many points", "0-100000/1:1", nil, nil, "more than 10000 points"},
		{"backwards span", "100-20/20:1", nil, nil, "FIRST ≤ LAST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"-dir", t.TempDir()}
			if tt.flag != "" {
				args = append(args, "-schedule", tt.flag)
			}
			o, err := parseFlags(args, &bytes.Buffer{})
			if tt.wantErrContains != "" {
				require.ErrorContains(t, err, tt.wantErrContains)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.steps, o.schedule.Steps)
			require.Equal(t, tt.budgets, o.schedule.Budgets)
		})
	}
}

func FuzzParseSchedule(f *testing.F) {
	f.Add("16:31,40:38,64:31")
	f.Add("20-2000/20:31")
	f.Add("0-9223372036854775807/1:1")
	f.Fuzz(func(t *testing.T, s string) {
		sch, err := parseSchedule(s)
		if err != nil {
			return
		}
		require.NoError(t, sch.Validate())
		require.LessOrEqual(t, len(sch.Steps), maxSchedulePoints)
		back, err := parseSchedule(formatSchedule(sch))
		require.NoError(t, err)
		require.Equal(t, sch, back)
	})
}
