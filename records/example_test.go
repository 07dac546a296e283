package records_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/lm2lm/lm2lm/records"
)

func ExampleProposal_Key() {
	a := records.Proposal{Mechanism: "LR-Scale", Params: map[string]string{"Factor": "2.0", "warmup": " Linear "}}
	b := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"warmup": "linear", "factor": "2e0"}}
	c := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2,warmup=linear"}}
	fmt.Println(a.Key())
	fmt.Println(a.Key() == b.Key())
	fmt.Println(c.Key())
	// Output:
	// lr-scale{factor=2,warmup=linear}
	// true
	// lr-scale{factor="2,warmup=linear"}
}

var exampleTask = records.Task{ID: "ar-prose/0", Family: "ar-prose", Split: records.Train,
	Metric: records.BitsPerByte, RefLoss: 2.125, SeedNoise: 0.0125}

func ExampleMemStore() {
	ctx := context.Background()
	s := records.NewMemStore()
	p := records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}}
	err := s.Append(ctx,
		records.Record{Task: exampleTask, Proposal: p, Gain: 0.03125, Loss: 2.09375, Source: records.Real, Seeds: []uint64{1}},
		records.Record{Task: exampleTask, Proposal: records.Proposal{Mechanism: "none"}, Loss: 2.125, Source: records.Predicted},
	)
	fmt.Println(err)

	rs, _ := s.Scan(ctx, records.Filter{Key: "lr-scale{factor=2.0}"}) // no match: filters take canonical keys
	fmt.Println(len(rs))
	rs, _ = s.Scan(ctx, records.Filter{Key: records.Proposal{Mechanism: "LR-Scale", Params: map[string]string{"factor": "2.0"}}.Key()})
	fmt.Println(len(rs), rs[0].Gain)

	_, seen, _ := records.Seen(ctx, s, exampleTask.ID, p.Key(), 1)
	fmt.Println(seen)
	// Output:
	// <nil>
	// 0
	// 1 0.03125
	// true
}

func ExampleOpenFile() {
	dir, _ := os.MkdirTemp("", "records-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "records.jsonl")
	ctx := context.Background()

	s, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	r := records.Record{Task: exampleTask, Proposal: records.Proposal{Mechanism: "warmup", Params: map[string]string{"steps": "100"}},
		Gain: -0.0625, Loss: 2.1875, Source: records.Real, Seeds: []uint64{7}}
	fmt.Println(s.Append(ctx, r)) // durable once it returns

	_, err = records.OpenFile(path, records.DefaultFileConfig())
	fmt.Println(err != nil && errors.Is(err, records.ErrLocked))
	s.Close()

	s, _ = records.OpenFile(path, records.DefaultFileConfig())
	defer s.Close()
	rs, _ := s.Scan(ctx, records.Filter{TaskID: exampleTask.ID})
	fmt.Println(len(rs), rs[0].Proposal.Key(), rs[0].Gain)
	// Output:
	// <nil>
	// true
	// 1 warmup{steps=100} -0.0625
}

func ExamplePool_Sample() {
	var rs []records.Record
	for i, src := range []records.Source{records.Real, records.Synthetic, records.Synthetic, records.Real} {
		rs = append(rs, records.Record{Task: exampleTask, Source: src, Loss: 2.125,
			Proposal: records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": fmt.Sprint(i + 1)}}})
	}
	pool, _ := records.NewPool(rs...)
	ev, _ := pool.Evidence() // synthetic records are never evidence
	fmt.Println("evidence:", ev.Len())

	rng := rand.New(rand.NewPCG(1, 2))
	for range 3 {
		s := pool.Sample(rng, exampleTask, records.MaxHistory) // 0..4 records, oldest first
		var h []string
		for _, r := range s.History {
			h = append(h, r.Proposal.Params["factor"]+"/"+string(r.Source))
		}
		fmt.Println(len(h), h)
	}
	// Output:
	// evidence: 2
	// 3 [1/real 3/synthetic 4/real]
	// 1 [1/real]
	// 2 [2/synthetic 4/real]
}
