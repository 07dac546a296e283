package lab

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

// FamilyARMarkup is the V2 suite's autoregressive family on the Go
// documentation's HTML (corpus.GoDoc); bits per byte.
const FamilyARMarkup = "ar-markup"

// V2Families are the families of the V2 suite, each with the same number of
// tasks in every part: three autoregressive families, one per corpus, and
// masked diffusion (FamilyMDM) over all three corpora.
var V2Families = []string{FamilyARProse, FamilyARCode, FamilyARMarkup, FamilyMDM}

// DefaultSuiteSeed is the seed of the default V2 suite.
const DefaultSuiteSeed = 1

// Space is the documented distribution of the task generator over reference
// recipes. Every task draws, independently:
//
//   - optimiser: Adam 45%, AdamW (decay 0.1) 20%, Lion (β2 0.99) 15%, SGD
//     with momentum 0.9 and gradient clip 1 20% (unclipped SGD at the hot
//     end of the range would leave references that diverge);
//   - peak learning rate: the optimiser's nominal rate × 10^u, u uniform in
//     LogLRRel, from too low to too hot. The nominal rates (Adam/AdamW 8e-3,
//     Lion 8e-4, momentum 0.15) are near the best rate of these short
//     budgets, so that references are about as often too hot as too cold:
//     measured with the landscape sweep, "lr-scale factor=2" helped on all
//     16 validation tasks with Adam centred at 2e-3 and on 13 of 16 at
//     5e-3, a nearly context-free landscape;
//   - architecture: hidden width 16/32/64/128 (35/30/20/15%), embedding
//     8/16/32, depth 1/1/2/3 (residual with probability ½ when deeper than
//     1), norm none 70%, layernorm 15%, rmsnorm 15%, activation tanh or
//     relu (½ each; GELU and SiLU cost about 3.5× the CPU at the same
//     FLOPs, so they are left to the cards), init scale 1 (80%) or ½ (a
//     scale of 2 starts above twice the uniform loss, which the model
//     counts as divergence);
//   - context 2/4/8 (50/30/20%; masked diffusion 4/8: its evaluation costs
//     Context²), batch 8/16/32/64 (30/30/25/15%);
//   - schedule constant 40%, cosine 30%, linear 10%, WSD 20% (final rate 0
//     or 10% of the peak), warm-up 0/0/2/5/10% of the steps;
//   - regularisation: dropout 0 (80%) or 0.05/0.1/0.2, L2 weight decay 0
//     (75%, AdamW always 0.1) or 1e-4/1e-3, gradient clip off (60%) or
//     0.5/1/5;
//   - compute budget log-uniform in Budget FLOPs; the reference trains
//     model.BudgetSteps of its configuration, and architectures whose steps
//     fall outside [MinSteps, MaxSteps] are redrawn;
//   - data: the whole training split with probability FullData, otherwise
//     a slice log-uniform in DataBytes (rounded to 1 KiB, corpus.Slice);
//   - corpus: the family's, from Corpora (by default the built-in
//     Opticks, Go source and Go documentation; the V3 splits' new-corpora
//     region sets Debian corpora, SplitRegions).
//
// The size distributions are centred so that a reference is about as
// often too large for its budget as too small: with FLOP budgets a smaller
// model, context or batch trains more steps, and with the first lab's
// earlier sizes (width 32–256, context 4/8/16, batch 16–128, rates from
// 1/20 to 8× nominal) halving the context, the width or the batch helped on
// most training tasks and doubling them hurt on most (`go run
// ./examples/sweep -landscape -part train` prints each card's mean and
// counts). The centres were moved on the training part only, until the
// learning rate's two directions and the size cards' halving and doubling
// each helped somewhere and hurt somewhere; the landscape report is read
// on the validation part.
//
// Masked-diffusion tasks draw their corpus uniformly from the three
// built-in corpora. Library choices throughout: ranges where a reference
// run trains and costs well under a CPU second (one training task of the
// default suite, v2s1/train/ar-prose/09, diverges and the drivers leave
// it out, naming it).
type Space struct {
	LogLRRel  [2]float64 // range of u in LR = nominal·10^u
	Budget    [2]float64 // training FLOPs, log-uniform in [lo, hi)
	DataBytes [2]int     // training-slice sizes, log-uniform in [lo, hi]
	FullData  float64    // probability of the whole training split
	MinSteps  int        // fewest reference steps accepted
	MaxSteps  int        // most reference steps accepted
	// Corpora are the corpora of the families; the zero value is the
	// built-in ones (Opticks, GoSource, GoDoc).
	Corpora Corpora
}

// Corpora name the corpus of each autoregressive family: FamilyARProse
// trains on Prose, FamilyARCode on Code, FamilyARMarkup on Markup, and
// masked diffusion draws one of the three uniformly. An empty field is the
// built-in corpus of that kind (corpus.Opticks, corpus.GoSource,
// corpus.GoDoc). Each must be of its kind (corpus.KindOf).
type Corpora struct{ Prose, Code, Markup string }

// resolve returns c with empty fields set to the built-in corpora.
func (c Corpora) resolve() Corpora {
	if c.Prose == "" {
		c.Prose = corpus.Opticks
	}
	if c.Code == "" {
		c.Code = corpus.GoSource
	}
	if c.Markup == "" {
		c.Markup = corpus.GoDoc
	}
	return c
}

// DefaultSpace is the in-distribution space of the V2 suite: learning rates
// from 1/10 to 10× nominal, budgets of 0.5–4 GFLOPs (tens to thousands of
// steps, about 0.1–0.6 CPU s on the pure-Go build), slices of 1–32 KiB
// (over a hundred epochs down to below one; median 1.3 over the training
// part, 15 of 63 tasks at 5 or more: slices of 2–256 KiB had left a median
// of 0.2 epochs and regularisation helping almost nowhere) or the whole
// corpus (30%).
func DefaultSpace() Space {
	return Space{LogLRRel: [2]float64{-1, 1}, Budget: [2]float64{5e8, 4e9}, DataBytes: [2]int{1 << 10, 32 << 10},
		FullData: 0.3, MinSteps: 48, MaxSteps: 3000}
}

// OutOfDistribution returns the test suite's out-of-distribution space:
// sp with budgets of ¼ to 1× the lowest training budget, a compute-starved
// region that training, validation and the in-distribution test never
// cover.
func (sp Space) OutOfDistribution() Space {
	sp.Budget = [2]float64{sp.Budget[0] / 4, sp.Budget[0]}
	return sp
}

// Suite is a generated task suite: disjoint training, validation and test
// parts; the test part has an in-distribution half (TestIn, drawn from the
// training space) and an out-of-distribution half (TestOut, from
// Space.OutOfDistribution), and so has validation (Validation from the
// training space, ValidationOut from the out-of-distribution one), so that
// a setting meant to transfer out of distribution can be chosen without the
// test split. Training tasks have records.Train as Split, all others
// records.HeldOut.
type Suite struct {
	Name                               string // e.g. "v2s1"
	Train, Validation, TestIn, TestOut []TaskSpec
	ValidationOut                      []TaskSpec
}

// All returns every task: training, validation (in-, then
// out-of-distribution), in- and out-of-distribution test, in that order.
func (s Suite) All() []TaskSpec {
	out := append(append([]TaskSpec(nil), s.Train...), s.Validation...)
	out = append(out, s.ValidationOut...)
	return append(append(out, s.TestIn...), s.TestOut...)
}

// Val returns the validation tasks, in-distribution first.
func (s Suite) Val() []TaskSpec {
	return append(append([]TaskSpec(nil), s.Validation...), s.ValidationOut...)
}

// Test returns the test tasks, in-distribution first.
func (s Suite) Test() []TaskSpec { return append(append([]TaskSpec(nil), s.TestIn...), s.TestOut...) }

// SuiteSizes are the tasks per family of each part of a suite.
type SuiteSizes struct{ Train, Validation, ValidationOut, TestIn, TestOut int }

// DefaultSuiteSizes: 16 training, 4 + 1 validation, 2 + 2 test tasks per
// family; over the four V2 families 64 training, 16 + 4 validation and 16
// test tasks (8 in-distribution, 8 out-of-distribution).
func DefaultSuiteSizes() SuiteSizes {
	return SuiteSizes{Train: 16, Validation: 4, ValidationOut: 1, TestIn: 2, TestOut: 2}
}

// SuiteV2 returns the default V2 suite of seed (DefaultSpace,
// DefaultSuiteSizes). The same seed gives the same suite.
func SuiteV2(seed uint64) Suite { return GenerateSuite(DefaultSpace(), DefaultSuiteSizes(), seed) }

// GenerateSuite draws a suite from sp. Task IDs are
// "v2s<seed>/<part>/<family>/<index>" with part train, val, val-out,
// test-in or test-out, e.g. "v2s1/val/ar-code/02"; each task is drawn from its own
// random stream derived from the seed and its ID, so a task does not change
// when other parts grow. The same (sp, sizes, seed) gives the same suite.
func GenerateSuite(sp Space, sizes SuiteSizes, seed uint64) Suite {
	s := Suite{Name: fmt.Sprintf("v2s%d", seed)}
	parts := []struct {
		name  string
		n     int
		space Space
		split records.Split
		dst   *[]TaskSpec
	}{
		{"train", sizes.Train, sp, records.Train, &s.Train},
		{"val", sizes.Validation, sp, records.HeldOut, &s.Validation},
		{"val-out", sizes.ValidationOut, sp.OutOfDistribution(), records.HeldOut, &s.ValidationOut},
		{"test-in", sizes.TestIn, sp, records.HeldOut, &s.TestIn},
		{"test-out", sizes.TestOut, sp.OutOfDistribution(), records.HeldOut, &s.TestOut},
	}
	for _, p := range parts {
		for i := 0; i < p.n; i++ {
			for _, fam := range V2Families {
				id := fmt.Sprintf("%s/%s/%s/%02d", s.Name, p.name, fam, i)
				rng := rand.New(rand.NewPCG(suiteStream(seed, id[len(s.Name):])))
				t := p.space.Sample(rng, fam)
				t.ID, t.Split = id, p.split
				*p.dst = append(*p.dst, t)
			}
		}
	}
	return s
}

// suiteStream is the PCG seed of a suite task's generator: the suite seed
// and the FNV-1a hash of the ID without the suite's name.
func suiteStream(seed uint64, rest string) (uint64, uint64) { return seed, fnv64a(rest) }

// pick returns the index drawn from the weights (which sum to about 1).
func pick(rng *rand.Rand, w ...float64) int {
	u := rng.Float64()
	for i, x := range w {
		if u < x {
			return i
		}
		u -= x
	}
	return len(w) - 1
}

func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo)))
}

// Sample draws one task of family from sp (see Space); ID and Split are
// left to the caller, Ref is "generated". A family outside V2Families is
// treated as autoregressive on sp.Corpora's prose corpus.
func (sp Space) Sample(rng *rand.Rand, family string) TaskSpec {
	t := TaskSpec{Family: family, Ref: "generated"}
	obj := model.Autoregressive
	cor := sp.Corpora.resolve()
	switch family {
	case FamilyARCode:
		t.Corpus = cor.Code
	case FamilyARMarkup:
		t.Corpus = cor.Markup
	case FamilyMDM:
		obj = model.MaskedDiffusion
		t.Corpus = []string{cor.Prose, cor.Code, cor.Markup}[rng.IntN(3)]
	default:
		t.Corpus = cor.Prose
	}
	c := model.DefaultConfig()
	c.Objective = obj
	sampleOptimiser(rng, &c, sp.LogLRRel)
	sampleSchedule(rng, &c)
	t.Budget = logUniform(rng, sp.Budget[0], sp.Budget[1])
	warmFrac := []float64{0, 0, 0.02, 0.05, 0.1}[rng.IntN(5)]
	// Redraw the architecture until the budget pays for an accepted number
	// of steps; after 1000 draws keep the last (never seen with
	// DefaultSpace).
	for try := 0; try < 1000; try++ {
		sampleArchitecture(rng, &c)
		c.Steps = model.BudgetSteps(c, t.Budget)
		if c.Steps >= sp.MinSteps && c.Steps <= sp.MaxSteps {
			break
		}
	}
	c.Warmup = int(math.Round(warmFrac * float64(c.Steps)))
	c.EvalWindows = 2048
	if obj == model.MaskedDiffusion {
		c.EvalWindows = 1024
	}
	if rng.Float64() >= sp.FullData {
		kib := math.Round(logUniform(rng, float64(sp.DataBytes[0]), float64(sp.DataBytes[1])) / 1024)
		t.DataBytes = int(max(kib, 1)) << 10
	}
	t.Config = c
	return t
}

func sampleOptimiser(rng *rand.Rand, c *model.Config, logLR [2]float64) {
	u := logLR[0] + rng.Float64()*(logLR[1]-logLR[0])
	nominal := 8e-3
	switch pick(rng, 0.45, 0.2, 0.15, 0.2) {
	case 0:
		c.Optimizer = "adam"
	case 1:
		c.Optimizer, c.WeightDecay = "adamw", 0.1
	case 2:
		c.Optimizer, c.Beta2, nominal = "lion", 0.99, 8e-4
	default:
		c.Optimizer, c.Beta1, c.ClipNorm, nominal = "momentum", 0.9, 1, 0.15
	}
	c.LR = nominal * math.Pow(10, u)
	if c.Optimizer != "adamw" && rng.Float64() >= 0.75 {
		c.WeightDecay = []float64{1e-4, 1e-3}[rng.IntN(2)]
	}
	if rng.Float64() >= 0.6 && c.ClipNorm == 0 {
		c.ClipNorm = []float64{0.5, 1, 5}[rng.IntN(3)]
	}
	if rng.Float64() >= 0.8 {
		c.Dropout = []float64{0.05, 0.1, 0.2}[rng.IntN(3)]
	}
}

func sampleSchedule(rng *rand.Rand, c *model.Config) {
	c.Schedule = []string{"constant", "cosine", "linear", "wsd"}[pick(rng, 0.4, 0.3, 0.1, 0.2)]
	if c.Schedule != "constant" {
		c.MinLRFrac = []float64{0, 0.1}[rng.IntN(2)]
	}
}

func sampleArchitecture(rng *rand.Rand, c *model.Config) {
	c.Hidden = []int{16, 32, 64, 128}[pick(rng, 0.35, 0.3, 0.2, 0.15)]
	c.Embed = []int{8, 16, 32}[rng.IntN(3)]
	c.Layers = []int{1, 1, 2, 3}[rng.IntN(4)]
	c.Residual = c.Layers > 1 && rng.IntN(2) == 0
	c.Norm = []string{"none", "layernorm", "rmsnorm"}[pick(rng, 0.7, 0.15, 0.15)]
	c.Activation = []string{"tanh", "relu"}[rng.IntN(2)]
	c.InitScale = []float64{1, 0.5}[pick(rng, 0.8, 0.2)]
	if c.Objective == model.MaskedDiffusion {
		c.Context = []int{4, 8}[rng.IntN(2)]
	} else {
		c.Context = []int{2, 4, 8}[pick(rng, 0.5, 0.3, 0.2)]
	}
	c.Batch = []int{8, 16, 32, 64}[pick(rng, 0.3, 0.3, 0.25, 0.15)]
}
