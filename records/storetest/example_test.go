package storetest_test

import (
	"fmt"

	"github.com/lm2lm/lm2lm/records/storetest"
)

// Record gives valid, varied records for tests of any package.
func ExampleRecord() {
	for i := range 3 {
		r := storetest.Record(i)
		fmt.Println(r.Task.ID, r.Proposal.Key(), r.Source, r.Validate() == nil)
	}
	// Output:
	// ar-prose/0 lr-scale{schedule=cosine,value=0.5} real true
	// ar-code/1 warmup{value=0.75} predicted true
	// mdm/0 weight-decay{schedule=constant,value=1} synthetic true
}
