package grader

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/reward"
)

// logistic is a real solution: scaled logistic regression.
const logistic = `import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
tr = np.genfromtxt('train.csv', delimiter=',', names=True)
te = np.genfromtxt('test.csv', delimiter=',', names=True)
feats = [c for c in te.dtype.names if c != 'id']
X = np.column_stack([tr[c] for c in feats]); y = tr['target'].astype(int)
m = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(X, y)
p = m.predict(np.column_stack([te[c] for c in feats]))
with open('submission.csv', 'w') as f:
    f.write('id,target\n')
    for i, v in zip(te['id'].astype(int), p):
        f.write('%d,%d\n' % (i, v))
`

func TestEmbeddedTasks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs scikit-learn")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	cfg := DefaultConfig()
	root := t.TempDir()
	start := time.Now()
	tasks, err := Prepare(context.Background(), root, cfg)
	require.NoError(t, err, "is Debian's python3-sklearn installed?")
	t.Logf("prepared %d tasks in %v", len(tasks), time.Since(start).Round(time.Millisecond))
	require.Len(t, tasks, 5)
	for _, tk := range tasks {
		t.Logf("%-22s %-8s %v", tk.ID, tk.Metric, tk.Leaderboard)
		b := tk.Leaderboard
		// The constant predictor is the worst reference, the best fitted
		// model clearly better.
		worst, best := b[0].Score, b[len(b)-1].Score
		if tk.Metric.HigherIsBetter() {
			require.Greater(t, best, worst+0.2, tk.ID)
		} else {
			require.Less(t, best, 0.85*worst, tk.ID)
		}
		fi, err := os.Stat(filepath.Join(tk.Dir, "answers.csv"))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "answers readable by their owner only")
		require.Len(t, tk.Hide, 1)
		require.FileExists(t, filepath.Join(tk.Hide[0], "digits.csv.gz"))
	}
	again, err := Prepare(context.Background(), root, cfg, "iris")
	require.NoError(t, err)
	require.Equal(t, tasks[3], again[0]) // loaded, not rebuilt

	g, err := New(cfg, tasks...)
	require.NoError(t, err)
	iris, _ := g.Task("sklearn/iris")
	gr, err := g.Grade(context.Background(), iris, logistic)
	require.NoError(t, err)
	t.Logf("logistic on iris: %s in %v", gr.Summary(), gr.Wall.Round(time.Millisecond))
	require.Equal(t, reward.ValidSubmission, gr.Status, gr.Log)
	// The same model as the "logistic" reference: it ties that entry.
	require.InDelta(t, iris.Leaderboard[3].Score, gr.Metric, 1e-12)
	require.InDelta(t, iris.Percentile(gr.Metric), gr.Percentile, 0)
	require.Greater(t, gr.Score, 0.75)

	// Hostile: the digits' test ids were row indices of the dataset
	// scikit-learn ships, so the labels could be looked up by id; with
	// relabelled ids, by matching the features instead. The dataset is
	// masked in the run's mount namespace.
	digits, _ := g.Task("sklearn/digits")
	lookups := map[string]string{
		"by id": `import csv
from sklearn import datasets
y = datasets.load_digits().target
rows = list(csv.DictReader(open('test.csv')))
with open('submission.csv', 'w') as f:
    f.write('id,target\n')
    for r in rows:
        f.write('%s,%d\n' % (r['id'], y[int(r['id'])]))
`,
		"by features": `import csv
from sklearn import datasets
X, y = datasets.load_digits(return_X_y=True)
label = {tuple(float(v) for v in x): int(t) for x, t in zip(X, y)}
rows = list(csv.DictReader(open('test.csv')))
with open('submission.csv', 'w') as f:
    f.write('id,target\n')
    for r in rows:
        f.write('%s,%d\n' % (r['id'], label.get(tuple(float(r['f%d' % i]) for i in range(64)), 0)))
`,
	}
	for name, code := range lookups {
		gr, err := g.Grade(context.Background(), digits, code)
		require.NoError(t, err)
		t.Logf("labels %s on digits: %s", name, gr.Summary())
		if !gr.Sandbox.Mount {
			t.Skip("no mount namespace: the public dataset is not masked")
		}
		require.Equal(t, reward.RuntimeError, gr.Status, "the labels were looked up %s: %s", name, gr.Summary())
		require.Equal(t, "FileNotFoundError", gr.ErrorType)
	}
}
