// Package pytest holds the test helpers of the packages whose tests run
// Debian's Python with PyTorch: the interpreter's path and the check that
// skips a test without torch, or fails it under CI.
package pytest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Python is Debian's interpreter, which has python3-torch; another
// python3 earlier on PATH may not.
const Python = "/usr/bin/python3"

var (
	torchOnce sync.Once
	torchErr  error
)

// RequireTorch skips t when Python cannot import torch, saying what goes
// untested, unless CI is set: there (.ci/setup.sh installs Debian's
// python3-torch) a missing torch fails it.
func RequireTorch(t testing.TB, untested string) {
	t.Helper()
	torchOnce.Do(func() { torchErr = importTorch() })
	if torchErr == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%v; CI is set, and .ci/setup.sh installs Debian's python3-torch", torchErr)
	}
	t.Skipf("PyTorch is missing, so %s is not tested: %v (install Debian's python3-torch)", untested, torchErr)
}

func importTorch() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, Python, "-c", "import torch").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s cannot import torch: %v: %s", Python, err, strings.TrimSpace(string(out)))
	}
	return nil
}
