package grader_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lm2lm/lm2lm/builder/grader"
)

func ExampleGrader_Grade() {
	// A task as data: inputs, hidden answers, metric, leaderboard.
	dir, _ := os.MkdirTemp("", "grader-example-")
	defer os.RemoveAll(dir)
	files := map[string]string{
		"train.csv":   "id,f0,target\n1,1,0\n2,8,1\n",
		"test.csv":    "id,f0\n3,2\n4,9\n",
		"answers.csv": "id,target\n3,0\n4,1\n",
	}
	for name, s := range files {
		_ = os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644)
	}
	task := grader.Task{ID: "threshold", Dir: dir, Inputs: []string{"train.csv", "test.csv"}, Answers: "answers.csv",
		Metric: grader.Accuracy, Leaderboard: []grader.Entry{{Name: "constant", Score: 0.5}, {Name: "best", Score: 1}}}
	g, err := grader.New(grader.DefaultConfig(), task)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, code := range []string{
		"print('hello'",  // syntax error
		"import nope",    // runtime error
		"print('hello')", // ran, no submission
		"import csv\nrows = list(csv.DictReader(open('test.csv')))\nwith open('submission.csv', 'w') as f:\n" +
			"    f.write('id,target\\n')\n    for r in rows:\n        f.write('%s,%d\\n' % (r['id'], int(r['f0']) > 5))\n",
	} {
		gr, err := g.Grade(context.Background(), task, code)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-11s %.2f\n", gr.Status, gr.Score)
	}
	// Output:
	// syntax_err  0.00
	// runtime_err 0.10
	// ran_no_sub  0.20
	// valid       0.88
}
