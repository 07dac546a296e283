package lab_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

var update = flag.Bool("update", false, "rewrite testdata/splits.golden")

// The V3 splits: 48 tasks each, 24 in distribution and 8 in each of the
// three out-of-distribution regions, every family in every region, each
// task inside its region's space.
func TestV3SplitsShape(t *testing.T) {
	sp := lab.DefaultSpace()
	for _, tc := range []struct {
		split lab.Split
		name  string
		c     lab.Corpora
	}{{lab.V3Test(), lab.V3TestName, lab.TestCorpora}, {lab.V3Val(), lab.V3ValName, lab.ValCorpora}} {
		s := tc.split
		require.Equal(t, tc.name, s.Name)
		require.Len(t, s.Tasks, 48)
		want := map[string]int{lab.RegionIn: 24, lab.RegionStarved: 8, lab.RegionRich: 8, lab.RegionCorpora: 8}
		for _, reg := range lab.SplitRegions(sp, tc.c) {
			tasks := s.Region(reg.Name)
			require.Len(t, tasks, want[reg.Name], reg.Name)
			require.ElementsMatch(t, lab.V2Families, lab.Families(tasks), reg.Name)
			for _, x := range tasks {
				require.True(t, strings.HasPrefix(x.ID, s.Name+"/"+reg.Name+"/"), x.ID)
				require.True(t, s.Contains(x.ID))
				require.Equal(t, reg.Name, lab.RegionOf(x.ID))
				require.Equal(t, records.HeldOut, x.Split, x.ID)
				require.GreaterOrEqual(t, x.Budget, reg.Space.Budget[0], x.ID)
				require.Less(t, x.Budget, reg.Space.Budget[1], x.ID)
				require.Equal(t, x.Config.Steps, model.BudgetSteps(x.Config, x.Budget), x.ID)
				require.GreaterOrEqual(t, x.Config.Steps, sp.MinSteps, x.ID)
				require.LessOrEqual(t, x.Config.Steps, sp.MaxSteps, x.ID)
				cs := []string{corpus.Opticks, corpus.GoSource, corpus.GoDoc}
				if reg.Name == lab.RegionCorpora {
					cs = []string{tc.c.Prose, tc.c.Code, tc.c.Markup}
				}
				require.Contains(t, cs, x.Corpus, x.ID)
				switch x.Family {
				case lab.FamilyARProse:
					require.Equal(t, corpus.KindProse, corpus.KindOf(x.Corpus), x.ID)
				case lab.FamilyARCode:
					require.Equal(t, corpus.KindCode, corpus.KindOf(x.Corpus), x.ID)
				case lab.FamilyARMarkup:
					require.Equal(t, corpus.KindMarkup, corpus.KindOf(x.Corpus), x.ID)
				}
			}
		}
		cfg := lab.DefaultConfig()
		cfg.Tasks = append(append([]lab.TaskSpec(nil), lab.SuiteV2(lab.DefaultSuiteSeed).Train...), s.Tasks...)
		require.NoError(t, cfg.Validate())
	}
	for _, name := range []string{lab.V3TestName, lab.V3ValName} {
		s, ok := lab.SplitNamed(name)
		require.True(t, ok)
		require.Equal(t, name, s.Name)
	}
	_, ok := lab.SplitNamed("v2-val")
	require.False(t, ok)
	// The regions in Space terms.
	rich := sp.ComputeRich()
	require.Equal(t, [2]float64{4e9, 16e9}, rich.Budget)
	require.Equal(t, [2]float64{1.25e8, 5e8}, sp.OutOfDistribution().Budget)
	regs := lab.SplitRegions(sp, lab.TestCorpora)
	require.Equal(t, lab.RegionNames, []string{regs[0].Name, regs[1].Name, regs[2].Name, regs[3].Name})
	require.Equal(t, sp, regs[0].Space)
	require.Equal(t, sp.Budget, regs[3].Space.Budget)
	require.Equal(t, lab.TestCorpora, regs[3].Space.Corpora)
}

// No V3 task shares an ID, or a recipe, with any task of another split:
// the V2 suites under seeds 1 (training, v2-val, the V2 test split) and 2
// (v2-val2), the V1 suite, and the other V3 split. The new-corpora
// region's corpora are read by no other split.
func TestV3SplitsDisjoint(t *testing.T) {
	test, val := lab.V3Test(), lab.V3Val()
	others := append(append(lab.SuiteV2(1).All(), lab.SuiteV2(2).All()...), lab.SuiteV1()...)
	recipe := func(x lab.TaskSpec) string {
		return fmt.Sprintf("%#v|%g|%d|%s", x.Config, x.Budget, x.DataBytes, x.Corpus)
	}
	ids, recipes := map[string]string{}, map[string]string{}
	for _, x := range others {
		ids[x.ID], recipes[recipe(x)] = x.ID, x.ID
	}
	for _, x := range append(append([]lab.TaskSpec(nil), test.Tasks...), val.Tasks...) {
		require.NotContains(t, ids, x.ID)
		require.NotContains(t, recipes, recipe(x), "%s repeats %s", x.ID, recipes[recipe(x)])
		ids[x.ID], recipes[recipe(x)] = x.ID, x.ID
	}
	used := map[string][]string{}
	for _, x := range others {
		used[x.Corpus] = append(used[x.Corpus], "other")
	}
	for _, x := range val.Tasks {
		used[x.Corpus] = append(used[x.Corpus], lab.V3ValName)
	}
	for _, x := range test.Tasks {
		used[x.Corpus] = append(used[x.Corpus], lab.V3TestName)
	}
	for _, c := range []string{lab.TestCorpora.Prose, lab.TestCorpora.Code, lab.TestCorpora.Markup} {
		require.NotEmpty(t, used[c], c)
		require.Equal(t, []string{lab.V3TestName}, slices.Compact(used[c]), c)
	}
	for _, c := range []string{lab.ValCorpora.Prose, lab.ValCorpora.Code, lab.ValCorpora.Markup} {
		require.NotEmpty(t, used[c], c)
		require.Equal(t, []string{lab.V3ValName}, slices.Compact(used[c]), c)
	}
}

// RegionOf reads the region of V3 and V2 held-out IDs and nothing else.
func TestRegionOf(t *testing.T) {
	for id, want := range map[string]string{
		"v3-test/compute-rich/mdm/01":        lab.RegionRich,
		"v3-val/new-corpora/ar-code/00":      lab.RegionCorpora,
		"v3-test/in-distribution/ar-prose/5": lab.RegionIn,
		"v2s1/test-in/ar-code/01":            lab.RegionIn,
		"v2s2/val/mdm/03":                    lab.RegionIn,
		"v2s1/test-out/mdm/00":               lab.RegionStarved,
		"v2s1/val-out/ar-prose/00":           lab.RegionStarved,
		"v2s1/train/ar-prose/00":             "",
		"ar-prose/opticks/base-300":          "",
		"v3-test/elsewhere/mdm/01":           "",
		"":                                   "",
	} {
		require.Equal(t, want, lab.RegionOf(id), id)
	}
}

// The splits are stable: every task's ID and a fingerprint of its whole
// spec match testdata/splits.golden (regenerate with -update only when a
// change of the splits is intended; the V2 test split must never change).
func TestSplitsGolden(t *testing.T) {
	var b strings.Builder
	line := func(x lab.TaskSpec) {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%#v", x)))
		fmt.Fprintf(&b, "%s %s %.4g %d %x\n", x.ID, x.Corpus, x.Budget, x.Config.Steps, sum[:6])
	}
	for _, x := range lab.SuiteV2(lab.DefaultSuiteSeed).Test() {
		line(x)
	}
	for _, s := range []lab.Split{lab.V3Test(), lab.V3Val()} {
		for _, x := range s.Tasks {
			line(x)
		}
	}
	const path = "testdata/splits.golden"
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), b.String())
}

// A task of the new-corpora region trains: its reference runs on the
// Debian corpus give a finite loss well below the uniform one (log2 96 ≈
// 6.58 bits per byte) and a positive seed noise. -short trains the
// cheapest such task of the test split; the full run every kind.
func TestNewCorporaTaskTrains(t *testing.T) {
	tasks := lab.V3Test().Region(lab.RegionCorpora)
	var pick []lab.TaskSpec
	for _, fam := range []string{lab.FamilyARProse, lab.FamilyARCode, lab.FamilyARMarkup} {
		var best lab.TaskSpec
		for _, x := range tasks {
			if x.Family == fam && (best.ID == "" || x.Budget*float64(x.Config.EvalWindows) < best.Budget*float64(best.Config.EvalWindows)) {
				best = x
			}
		}
		pick = append(pick, best)
	}
	slices.SortFunc(pick, func(a, b lab.TaskSpec) int { return int(math.Copysign(1, a.Budget-b.Budget)) })
	if testing.Short() {
		pick = pick[:1]
	}
	cfg := lab.DefaultConfig()
	cfg.Tasks, cfg.RefSeeds, cfg.Parallel = pick, []uint64{1, 2, 3}, 1
	l, err := lab.New(cfg, records.NewMemStore())
	require.NoError(t, err)
	for _, x := range pick {
		task, err := l.Task(context.Background(), x.ID)
		if errors.Is(err, corpus.ErrCorpusMissing) {
			t.Skipf("a Debian corpus is not on this system: %v", err)
		}
		require.NoError(t, err)
		require.NoError(t, task.Validate())
		require.Less(t, task.RefLoss, 5.0, task.ID)
		require.Greater(t, task.RefLoss, 0.5, task.ID)
		require.Greater(t, task.SeedNoise, 0.0, task.ID)
		t.Logf("%s: b_e %.3f bits/byte, σ_e %.4f", task.ID, task.RefLoss, task.SeedNoise)
	}
}

func ExampleV3Test() {
	s := lab.V3Test()
	for _, r := range lab.RegionNames {
		fmt.Println(r, len(s.Region(r)))
	}
	fmt.Println(s.Tasks[0].ID, lab.RegionOf(s.Tasks[47].ID), s.Tasks[47].Corpus)
	// Output:
	// in-distribution 24
	// compute-starved 8
	// compute-rich 8
	// new-corpora 8
	// v3-test/in-distribution/ar-prose/00 new-corpora man-pages
}

// RegionOf reads task IDs from records: any string gives "" or a region,
// and an ID built from a region gives that region back.
func FuzzRegionOf(f *testing.F) {
	for _, s := range []string{"v3-test/compute-rich/mdm/01", "v2s1/test-out/mdm/00", "v2s1/train/ar-code/03", "a/b/c", "////", "v3-val/new-corpora/x/y/z", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		r := lab.RegionOf(id)
		if r != "" && !slices.Contains(lab.RegionNames, r) {
			t.Fatalf("RegionOf(%q) = %q, not a region", id, r)
		}
		if r != "" && strings.Count(id, "/") != 3 {
			t.Fatalf("RegionOf(%q) = %q for an ID of %d parts", id, r, strings.Count(id, "/")+1)
		}
		for _, reg := range lab.RegionNames {
			built := "s/" + reg + "/" + strings.ReplaceAll(id, "/", "_") + "/00"
			if got := lab.RegionOf(built); got != reg {
				t.Fatalf("RegionOf(%q) = %q, want %q", built, got, reg)
			}
		}
	})
}
