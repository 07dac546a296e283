package lab

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"

	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/records"
)

// Regions of the held-out splits: one in-distribution region and three out
// of distribution, each a Space (SplitRegions). RegionOf reads a task's
// region from its ID.
const (
	// RegionIn is the training space itself (DefaultSpace): fresh draws.
	RegionIn = "in-distribution"
	// RegionStarved has budgets of ¼ to 1× the lowest training budget
	// (Space.OutOfDistribution): the V2 test split's out-of-distribution
	// half.
	RegionStarved = "compute-starved"
	// RegionRich has budgets of 1 to 4× the highest training budget
	// (Space.ComputeRich).
	RegionRich = "compute-rich"
	// RegionCorpora has the training space's recipes and budgets on
	// corpora no training task reads: the Debian corpora
	// (Space.Corpora = TestCorpora or ValCorpora).
	RegionCorpora = "new-corpora"
)

// RegionNames are the regions in the order a split lists them.
var RegionNames = []string{RegionIn, RegionStarved, RegionRich, RegionCorpora}

// TestCorpora are the corpora of the new-corpora region of the V3 test
// split: the test halves of the Debian corpora (corpus.DebianSources).
var TestCorpora = Corpora{Prose: corpus.Licences, Code: corpus.DebconfPerl, Markup: corpus.ManPages}

// ValCorpora are the corpora of the new-corpora region of the V3
// validation split: the validation halves, files disjoint from
// TestCorpora's.
var ValCorpora = Corpora{Prose: corpus.LicencesVal, Code: corpus.DebconfPerlVal, Markup: corpus.ManPagesVal}

// Names of the V3 held-out splits.
const (
	V3TestName = "v3-test"
	V3ValName  = "v3-val"
)

// ComputeRich returns sp with budgets of 1 to 4× its highest budget, a
// region above the training range (the mirror of OutOfDistribution's ¼
// to 1× of the lowest). Architectures whose steps fall outside
// [MinSteps, MaxSteps] are redrawn as in sp, so the region's models are
// larger on average.
func (sp Space) ComputeRich() Space {
	sp.Budget = [2]float64{sp.Budget[1], 4 * sp.Budget[1]}
	return sp
}

// Region is a named part of the task distribution.
type Region struct {
	Name  string // one of RegionNames
	Space Space
}

// SplitRegions returns the four regions around the training space sp, in
// RegionNames order: sp itself, sp.OutOfDistribution(), sp.ComputeRich(),
// and sp on the corpora c.
func SplitRegions(sp Space, c Corpora) []Region {
	corp := sp
	corp.Corpora = c
	return []Region{{RegionIn, sp}, {RegionStarved, sp.OutOfDistribution()}, {RegionRich, sp.ComputeRich()}, {RegionCorpora, corp}}
}

// SplitSizes are the tasks per family of each region of a split.
type SplitSizes struct {
	In  int // per family in the in-distribution region
	Out int // per family in each out-of-distribution region
}

// DefaultSplitSizes: 6 in-distribution and 2 per out-of-distribution
// region per family; over the four V2 families 24 + 3 × 8 = 48 tasks, half
// in distribution.
func DefaultSplitSizes() SplitSizes { return SplitSizes{In: 6, Out: 2} }

// Split is a held-out split over regions: tasks whose IDs are
// "<name>/<region>/<family>/<index>", e.g. "v3-test/compute-rich/mdm/01",
// listed region by region (RegionNames order), then by index, then by
// family (V2Families order). Every task has records.HeldOut as Split.
type Split struct {
	Name  string
	Tasks []TaskSpec
}

// Region returns the split's tasks of region name.
func (s Split) Region(name string) []TaskSpec {
	var out []TaskSpec
	for _, t := range s.Tasks {
		if RegionOf(t.ID) == name {
			out = append(out, t)
		}
	}
	return out
}

// Contains reports whether id is a task of the split.
func (s Split) Contains(id string) bool { return strings.HasPrefix(id, s.Name+"/") }

// V3Test returns the V3 test split: GenerateSplit("v3-test",
// SplitRegions(DefaultSpace(), TestCorpora), DefaultSplitSizes()), 48
// tasks. Its tasks are evaluated with policies trained on the V2 suite's
// training split (SuiteV2(DefaultSuiteSeed).Train).
func V3Test() Split {
	return GenerateSplit(V3TestName, SplitRegions(DefaultSpace(), TestCorpora), DefaultSplitSizes())
}

// V3Val returns the V3 validation split, where settings are chosen: the
// same regions and sizes as V3Test, with ValCorpora, under its own name
// (so other generator streams).
func V3Val() Split {
	return GenerateSplit(V3ValName, SplitRegions(DefaultSpace(), ValCorpora), DefaultSplitSizes())
}

// SplitNamed returns the V3 split of that name (V3TestName or V3ValName)
// and false for any other name.
func SplitNamed(name string) (Split, bool) {
	switch name {
	case V3TestName:
		return V3Test(), true
	case V3ValName:
		return V3Val(), true
	}
	return Split{}, false
}

// GenerateSplit draws a split named name (no "/") over regions: the first
// region gets sizes.In tasks per family, every other sizes.Out. Each task
// is drawn from its own stream, rand.NewPCG(SplitStream(id)), so a task
// does not change when a region grows and two splits of different names
// share no stream. The same arguments give the same split.
func GenerateSplit(name string, regions []Region, sizes SplitSizes) Split {
	s := Split{Name: name}
	for r, reg := range regions {
		n := sizes.Out
		if r == 0 {
			n = sizes.In
		}
		for i := 0; i < n; i++ {
			for _, fam := range V2Families {
				id := fmt.Sprintf("%s/%s/%s/%02d", name, reg.Name, fam, i)
				t := reg.Space.Sample(newRand(SplitStream(id)), fam)
				t.ID, t.Split = id, records.HeldOut
				s.Tasks = append(s.Tasks, t)
			}
		}
	}
	return s
}

// SplitStream returns the PCG seed of a split task's generator: the
// FNV-1a hashes of the split's name (the ID up to its first "/") and of
// the whole ID. The V2 suite's streams (GenerateSuite) have the suite
// seed (a small integer) as first word instead.
func SplitStream(id string) (uint64, uint64) {
	name, _, _ := strings.Cut(id, "/")
	return fnv64a(name), fnv64a(id)
}

func fnv64a(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// RegionOf returns the region of a held-out task from its ID: the second
// element of a split's ID ("v3-test/compute-rich/mdm/01" → RegionRich),
// and for the V2 suite's held-out parts RegionIn (val, test-in) or
// RegionStarved (val-out, test-out). Any other ID (a training task, a V1
// task) returns "".
func RegionOf(id string) string {
	parts := strings.Split(id, "/")
	if len(parts) != 4 {
		return ""
	}
	switch parts[1] {
	case RegionIn, RegionStarved, RegionRich, RegionCorpora:
		return parts[1]
	case "val", "test-in":
		return RegionIn
	case "val-out", "test-out":
		return RegionStarved
	}
	return ""
}

func newRand(a, b uint64) *rand.Rand { return rand.New(rand.NewPCG(a, b)) }
