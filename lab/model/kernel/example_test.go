package kernel_test

import (
	"fmt"

	"github.com/lm2lm/lm2lm/lab/model/kernel"
)

func ExampleKernel_MulNN() {
	k := kernel.Generic()
	a := []float32{1, 2, 3, 4, 5, 6} // 2×3
	b := []float32{1, 0, 0, 1, 1, 1} // 3×2
	c := make([]float32, 4)          // 2×2
	k.MulNN(c, a, b, 2, 3, 2, false)
	fmt.Println(c, k.FLOPs())
	// Output: [4 5 10 11] 24
}
