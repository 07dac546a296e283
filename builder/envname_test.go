package builder_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
)

func TestEnvName(t *testing.T) {
	for s, want := range map[string]bool{
		"HF_HOME": true, "_x": true, "a1": true, "CUDA_VISIBLE_DEVICES": true,
		"": false, "1A": false, "A-B": false, "A=B": false, "A B": false, "É": false, "A\x00": false,
	} {
		require.Equal(t, want, builder.EnvName(s), "%q", s)
	}
}
