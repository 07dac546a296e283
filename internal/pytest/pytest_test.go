package pytest

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportTorch agrees with whether Debian's python3-torch is there.
func TestImportTorch(t *testing.T) {
	_, err := os.Stat("/usr/lib/python3/dist-packages/torch/__init__.py")
	if err != nil {
		require.Error(t, importTorch(), "no torch package, yet %s imported torch", Python)
		return
	}
	require.NoError(t, importTorch())
}
