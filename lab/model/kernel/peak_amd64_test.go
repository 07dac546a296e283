//go:build amd64 && !purego

package kernel

import (
	"github.com/lm2lm/lm2lm/lab/model/kernel/internal/asm"
	"golang.org/x/sys/cpu"
)

// peakLoops returns the FMA-peak loops this CPU runs, widest first, each
// with the float32 lanes of its vectors (12 FMAs of that width per
// iteration; see FMAPeak512 in internal/asmgen).
func peakLoops() []peakLoop {
	var out []peakLoop
	if cpu.X86.HasAVX512F {
		out = append(out, peakLoop{"zmm", asm.FMAPeak512, 16})
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		out = append(out, peakLoop{"ymm", asm.FMAPeak256, 8})
	}
	return out
}
