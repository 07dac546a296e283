package grader

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// prepareSource builds the embedded tasks' files (see Prepare).
//
//go:embed prepare.py
var prepareSource string

// embedded describes the embedded tasks: scikit-learn's bundled datasets.
var embedded = map[string]struct {
	metric Metric
	what   string
	refs   []string // reference solutions of prepare.py, worst to best as intended
}{
	"iris":          {Accuracy, "Classify iris flowers into 3 species (target 0, 1, 2) from 4 measurements (f0..f3: sepal and petal length and width, cm).", classRefs},
	"wine":          {Accuracy, "Classify wines into 3 cultivars (target 0, 1, 2) from 13 chemical measurements (f0..f12).", classRefs},
	"breast-cancer": {Accuracy, "Classify breast tumours as malignant (target 0) or benign (target 1) from 30 features of cell nuclei (f0..f29).", classRefs},
	"diabetes":      {RMSE, "Predict a quantitative measure of diabetes progression one year after baseline (target, about 25..346) from 10 standardised baseline variables (f0..f9: age, sex, BMI, blood pressure, six blood serum measurements).", []string{"mean", "stump", "knn", "ridge"}},
	"digits":        {Accuracy, "Classify 8x8 images of handwritten digits (target 0..9) from 64 pixel intensities (f0..f63, 0..16).", classRefs},
}

var classRefs = []string{"majority", "stump", "knn", "logistic", "forest"}

// EmbeddedNames lists the embedded tasks, sorted: breast-cancer, diabetes,
// digits, iris, wine.
func EmbeddedNames() []string {
	out := make([]string, 0, len(embedded))
	for n := range embedded {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// description is the solver's task statement.
func description(name string) string {
	e := embedded[name]
	dir := "higher is better"
	if !e.metric.HigherIsBetter() {
		dir = "lower is better"
	}
	return fmt.Sprintf("Task sklearn/%s. %s The working directory holds train.csv (columns id, the features, target) "+
		"and test.csv (columns id and the features). Write submission.csv with the header id,target and one row per "+
		"test id. Metric: %s on the hidden test targets (%s). Python 3 with numpy and scikit-learn; no network.",
		name, e.what, e.metric, dir)
}

// Prepare makes the embedded tasks named (all when none) under root, one
// directory each, from the datasets scikit-learn ships inside its package
// (load_iris, load_wine, load_breast_cancer, load_diabetes, load_digits; no
// download). A quarter of each dataset (a fixed permutation, seed 0) is the
// hidden test set. Each task's leaderboard holds the scores of reference
// solutions of increasing quality (a constant predictor, a depth-1 tree,
// k-nearest neighbours, logistic or ridge regression, a random forest),
// fitted by one run of Debian's scikit-learn and scored by Score exactly
// as submissions are. The answers and reference predictions are readable
// by their owner only, and each task's Hide names the directory of
// scikit-learn's bundled datasets, so that a run can neither read the
// answers nor look its rows up in the public data (docs/sandbox.md). A
// task whose directory already holds a valid task.json with a Hide is
// loaded, not rebuilt. It runs cfg.Python.
func Prepare(ctx context.Context, root string, cfg Config, names ...string) ([]Task, error) {
	if len(names) == 0 {
		names = EmbeddedNames()
	}
	var missing []string
	for _, n := range names {
		if _, ok := embedded[n]; !ok {
			return nil, fmt.Errorf("%w: no embedded task %q", ErrTask, n)
		}
		if t, err := LoadTask(filepath.Join(root, n)); err != nil || len(t.Hide) == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		if err := runPrepare(ctx, root, cfg, missing); err != nil {
			return nil, err
		}
		for _, n := range missing {
			if err := finishTask(root, n); err != nil {
				return nil, err
			}
		}
	}
	tasks := make([]Task, len(names))
	for i, n := range names {
		t, err := LoadTask(filepath.Join(root, n))
		if err != nil {
			return nil, err
		}
		tasks[i] = t
	}
	return tasks, nil
}

func runPrepare(ctx context.Context, root string, cfg Config, names []string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("grader: prepare: %w", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("grader: prepare: %w", err)
	}
	cmd := exec.CommandContext(ctx, cfg.Python, append([]string{"-I", "-c", prepareSource, abs}, names...)...)
	cmd.Dir, cmd.Env = abs, env(abs)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("grader: prepare: %w", ctx.Err())
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%w: prepare %s: %w: %s", ErrTask, strings.Join(names, " "), err, oneLine(string(out), 400))
		}
		return fmt.Errorf("%w: %w", ErrStart, err)
	}
	return nil
}

// finishTask scores the reference predictions into the leaderboard and
// writes task.json.
func finishTask(root, name string) error {
	e := embedded[name]
	t := Task{ID: "sklearn/" + name, Description: description(name), Dir: filepath.Join(root, name),
		Inputs: []string{"train.csv", "test.csv"}, Answers: "answers.csv", Metric: e.metric}
	hide, err := os.ReadFile(filepath.Join(t.Dir, "hide.txt"))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrTask, t.ID, err)
	}
	for _, l := range strings.Split(string(hide), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			t.Hide = append(t.Hide, l)
		}
	}
	g := &Grader{answers: map[string]map[string]string{}}
	answers, err := g.answersOf(t)
	if err != nil {
		return err
	}
	for _, ref := range e.refs {
		f, err := os.Open(filepath.Join(t.Dir, "ref-"+ref+".csv"))
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrTask, t.ID, err)
		}
		sub, err := ReadTable(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%w: %s: reference %s: %w", ErrTask, t.ID, ref, err)
		}
		s, err := Score(t.Metric, answers, sub)
		if err != nil {
			return fmt.Errorf("%w: %s: reference %s: %w", ErrTask, t.ID, ref, err)
		}
		t.Leaderboard = append(t.Leaderboard, Entry{Name: ref, Score: s})
	}
	if err := t.Validate(); err != nil {
		return err
	}
	return t.Save()
}
