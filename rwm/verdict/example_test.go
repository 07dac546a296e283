package verdict_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/lm2lm/lm2lm/internal/oaitest"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
	"github.com/lm2lm/lm2lm/rwm/verdict"
)

func ExampleModel_Predict() {
	// A stand-in server that foresees a crash on line 2 in one of eight checks.
	pred := `{"status":"%s","error_type":"%s","error_line":%d,"quality_bucket":"mid","confidence":0.9,"feedback":"-"}`
	ps := make([]string, 8)
	for i := range ps {
		ps[i] = fmt.Sprintf(pred, "valid", "", 0)
	}
	ps[5] = fmt.Sprintf(pred, "runtime_err", "KeyError", 2)
	srv := oaitest.NewServer(func(oaitest.Request) oaitest.Reply {
		return oaitest.Text(`{"reason":"reads a column that does not exist","predictions":[` + strings.Join(ps, ",") + `]}`)
	})
	defer srv.Close()

	cfg := verdict.DefaultConfig()
	cfg.BaseURL, cfg.Model = srv.URL(), "any-model" // or $OPENAI_BASE_URL, $LM2LM_MODEL
	m, err := verdict.New(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	task := records.Task{ID: "sklearn/iris", Family: "code/accuracy", Split: records.Train,
		Metric: records.LadderShortfall, RefLoss: 1, SeedNoise: 1.0 / 6, Description: "Classify iris flowers."}
	code := "import pandas as pd\ny = pd.read_csv('train.csv')['species']\n"
	p, err := m.Predict(context.Background(), rwm.Query{Task: task, Proposal: records.Proposal{Mechanism: "pandas", Text: code}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("score %.2f in [%.2f, %.4f]: %s\n", p.Gain, p.Low, p.High, p.Reason)
	// Output:
	// score 0.10 in [0.10, 0.8125]: runtime_err: reads a column that does not exist
}
