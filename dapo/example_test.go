package dapo_test

import (
	"fmt"

	"github.com/lm2lm/lm2lm/dapo"
)

func Example() {
	groups := [][]float64{{1, 0, 0, 0}, {0.7, 0.7, 0.7, 0.7}, {2, 1, 1, 0}}
	kept, rep, err := dapo.Select(groups, 2, 1e-9) // drop the flat group
	fmt.Println(kept, rep.Flat, err)

	adv := dapo.Advantages(groups[0], dapo.MeanCentered, 0)
	fmt.Println(adv)

	seqs := []dapo.Sequence{{OldLogProbs: []float64{-1, -2}, NewLogProbs: []float64{-1, -2}, Advantage: adv[0]}}
	loss, grad := dapo.Loss(dapo.DefaultLossConfig(), seqs)
	fmt.Println(loss, grad)
	// Output:
	// [0 2] 1 <nil>
	// [0.75 -0.25 -0.25 -0.25]
	// -0.75 [[-0.375 -0.375]]
}
