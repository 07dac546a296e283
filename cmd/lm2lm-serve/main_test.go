package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/serve"
)

func TestHelpSaysWhatItDoes(t *testing.T) {
	var b bytes.Buffer
	_, err := parseFlags([]string{"-h"}, &b)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, b.String(), "environment service for RL trainers (TRL, verl, OpenRLHF)")
	require.Contains(t, b.String(), "-addr")
	require.Contains(t, b.String(), "/get_reward")
}

func TestRefusesPublicAddressWithoutToken(t *testing.T) {
	var b bytes.Buffer
	o, err := parseFlags([]string{"-addr", "0.0.0.0:9", "-token", "", "-dir", t.TempDir()}, &b)
	require.NoError(t, err)
	err = run(context.Background(), o, &b)
	require.True(t, errors.Is(err, serve.ErrConfig), "%v", err)
	require.Contains(t, err.Error(), "bearer token is required")
}

func TestRejectsArguments(t *testing.T) {
	var b bytes.Buffer
	_, err := parseFlags([]string{"extra"}, &b)
	require.ErrorContains(t, err, "unexpected arguments")
}
