package grader

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func table(t *testing.T, s string) map[string]string {
	t.Helper()
	m, err := ReadTable(strings.NewReader(s))
	require.NoError(t, err)
	return m
}

func TestScore(t *testing.T) {
	answers := table(t, "id,target\n1,0\n2,1\n3,2\n4,1\n")
	tests := []struct {
		name   string
		metric Metric
		sub    string
		want   float64
	}{
		{"accuracy, all right", Accuracy, "id,target\n1,0\n2,1\n3,2\n4,1\n", 1},
		{"accuracy, half", Accuracy, "target,id\n0,1\n0,2\n2,3\n0,4\n", 0.5},
		{"accuracy, floats and float ids", Accuracy, "id,target,extra\n1.0,0.0,x\n2,1.0,y\n3,2,z\n4.0,2,w\n", 0.75},
		{"rmse", RMSE, "id,target\n1,1\n2,1\n3,0\n4,1\n", math.Sqrt((1 + 0 + 4 + 0) / 4.0)},
		{"rmse, exact", RMSE, "id,target\n1,0\n2,1\n3,2\n4,1\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Score(tt.metric, answers, table(t, tt.sub))
			require.NoError(t, err)
			require.InDelta(t, tt.want, got, 1e-12)
		})
	}
	for _, bad := range []struct {
		metric Metric
		sub    string
	}{
		{Accuracy, "id,target\n1,0\n2,1\n3,2\n"},           // a row missing
		{Accuracy, "id,target\n1,0\n2,1\n3,2\n4,1\n5,1\n"}, // an extra row
		{Accuracy, "id,target\n1,0\n2,1\n3,2\n9,1\n"},      // a wrong id
		{RMSE, "id,target\n1,0\n2,1\n3,2\n4,abc\n"},        // not a number
		{RMSE, "id,target\n1,0\n2,1\n3,2\n4,NaN\n"},        // not finite
		{RMSE, "id,target\n1,0\n2,1\n3,2\n4,inf\n"},
	} {
		_, err := Score(bad.metric, answers, table(t, bad.sub))
		require.ErrorIs(t, err, ErrSubmission, "%q", bad.sub)
	}
}

func TestReadTableErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"id,label\n1,0\n",
		"id,target\n1,0\n1,1\n",   // repeated id
		"id,target\n1,0\n1.0,1\n", // the same id written twice
		"id,target\n,0\n",         // empty id
		"id,target\n1,0,3\n",      // ragged
		"id,target\n\"1,0\n",      // bad quoting
	} {
		_, err := ReadTable(strings.NewReader(s))
		require.ErrorIs(t, err, ErrSubmission, "%q", s)
	}
	m := table(t, "\ufeffid,target\n 7 , 1 \n")
	require.Equal(t, map[string]string{"7": "1"}, m)
}

func FuzzReadTable(f *testing.F) {
	for _, s := range []string{"id,target\n1,0\n2,1\n", "target,id\n0.5,x\n", "id,target\n1.0,0\n1,1\n", "\"id\",\"target\"\n\"1\",\"a,b\"\n", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ReadTable(strings.NewReader(s))
		if err != nil {
			return
		}
		for k := range m {
			if k == "" || k != canonID(k) {
				t.Fatalf("ReadTable(%q) kept id %q", s, k)
			}
		}
		if v, err := Score(Accuracy, m, m); len(m) > 0 && (err != nil || v != 1) {
			t.Fatalf("a table scored against itself: %g, %v", v, err)
		}
	})
}

func TestTaskValidate(t *testing.T) {
	ok := Task{ID: "t", Inputs: []string{"train.csv"}, Answers: "answers.csv", Metric: RMSE, Leaderboard: []Entry{{"a", 1}}}
	require.NoError(t, ok.Validate())
	for _, edit := range []func(*Task){
		func(t *Task) { t.ID = "" },
		func(t *Task) { t.Metric = "auc" },
		func(t *Task) { t.Answers = "../answers.csv" },
		func(t *Task) { t.Inputs = []string{"answers.csv"} },
		func(t *Task) { t.Inputs = []string{"submission.csv"} },
		func(t *Task) { t.Inputs = []string{"/etc/passwd"} },
		func(t *Task) { t.Leaderboard = []Entry{{"nan", math.NaN()}} },
	} {
		bad := ok
		edit(&bad)
		require.ErrorIs(t, bad.Validate(), ErrTask, "%+v", bad)
	}
	// Record: b_e = 1 and the ladder metric, so that gain = ladder score.
	r := ok.Record()
	require.NoError(t, r.Validate())
	require.Equal(t, 1.0, r.RefLoss)
	require.InDelta(t, 1.0/6, r.SeedNoise, 1e-15)
}

func TestProposal(t *testing.T) {
	a, b := Proposal("knn", "print(1)\n"), Proposal("knn", "print(2)\n")
	require.NoError(t, a.Validate())
	require.NotEqual(t, a.Key(), b.Key(), "different code, different proposal")
	require.Equal(t, a.Key(), Proposal("knn", "print(1)\n").Key())
	require.Equal(t, "print(1)\n", a.Text)
	require.Len(t, a.Params["code"], 24)
}
