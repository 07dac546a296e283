package lab

import (
	"fmt"
	"math"
	"strings"

	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

// Model families of the default tasks (records.Task.Family): the unit of
// held-out generalisation (METHOD.md §1 Data and evaluation).
const (
	FamilyARProse = "ar-prose"      // autoregressive on the Opticks text; bits per byte
	FamilyARCode  = "ar-code"       // autoregressive on Go source; bits per byte
	FamilyMDM     = "mdm"           // true masked diffusion (random mask rate); nats per masked token
	FamilyCentre  = "centre-masked" // cheap diffusion variant (centre position masked); nats per masked token
)

// TaskSpec defines one task before its reference runs: family × corpus ×
// data regime × reference configuration × compute budget (METHOD.md §1
// Vocabulary, task e).
type TaskSpec struct {
	ID     string        // unique, e.g. "ar-prose/opticks/base-300"
	Family string        // model family; see HoldOutFamily
	Corpus string        // corpus.Opticks, corpus.GoSource, corpus.GoDoc or a text file's path
	Ref    string        // name of the reference configuration, e.g. "base"
	Split  records.Split // records.Train or records.HeldOut
	Config model.Config  // the reference configuration
	// Kind is what the corpus is (corpus.KindProse, KindCode, KindMarkup);
	// "" = corpus.KindOf(Corpus), so it is required for a file corpus. A
	// task is described by its corpus's kind, never by a path.
	Kind string
	// Budget is the training compute in FLOPs (model.StepFLOPs: forward and
	// backward matrix multiplies): every proposal's run trains
	// model.BudgetSteps of its own configuration, so a wider model or a
	// larger batch trains fewer steps. Config.Steps must equal
	// model.BudgetSteps(Config, Budget). 0 = no compute budget: proposals
	// keep the steps they set (the V1 suite).
	Budget float64
	// DataBytes is the size of the training slice in symbols (= bytes),
	// cut from the corpus's training split by corpus.Slice; 0 = the whole
	// split. Validation always uses the whole validation split, disjoint
	// from every slice.
	DataBytes int
}

// kind returns the corpus kind of s.
func (s TaskSpec) kind() string {
	if s.Kind != "" {
		return s.Kind
	}
	return corpus.KindOf(s.Corpus)
}

// validate reports the first problem with s's data and budget fields.
func (s TaskSpec) validate() error {
	switch k := s.kind(); {
	case k == "":
		return fmt.Errorf("task %s: corpus %q needs a Kind (%s, %s or %s)", s.ID, s.Corpus, corpus.KindProse, corpus.KindCode, corpus.KindMarkup)
	case k != corpus.KindProse && k != corpus.KindCode && k != corpus.KindMarkup:
		return fmt.Errorf("task %s: Kind %q, want %s, %s or %s", s.ID, k, corpus.KindProse, corpus.KindCode, corpus.KindMarkup)
	case s.DataBytes < 0:
		return fmt.Errorf("task %s: DataBytes = %d, want ≥ 0", s.ID, s.DataBytes)
	case s.Budget < 0 || math.IsNaN(s.Budget) || math.IsInf(s.Budget, 0):
		return fmt.Errorf("task %s: Budget = %g FLOPs, want finite ≥ 0", s.ID, s.Budget)
	case s.Budget > 0 && model.BudgetSteps(s.Config, s.Budget) != s.Config.Steps:
		return fmt.Errorf("task %s: Config.Steps = %d but the budget of %.4g FLOPs pays for %d steps", s.ID, s.Config.Steps, s.Budget, model.BudgetSteps(s.Config, s.Budget))
	}
	return nil
}

// apply returns s's reference configuration edited by p under s's compute
// budget: the card's edit, then (with a budget) the steps the budget pays
// for, the warm-up keeping its fraction (model.WithBudget).
func (s TaskSpec) apply(p records.Proposal) (model.Config, error) {
	c, err := cards.Apply(s.Config, p)
	if err != nil || s.Budget == 0 {
		return c, err
	}
	return model.WithBudget(c, s.Budget), nil
}

// Metric returns the task's metric: bits per byte for autoregressive
// models, nats per (masked) token for the diffusion objectives.
func (s TaskSpec) Metric() records.Metric {
	if s.Config.Objective == model.Autoregressive {
		return records.BitsPerByte
	}
	return records.NatsPerToken
}

// Description returns the text a person or an LLM reads about the task.
func (s TaskSpec) Description() string {
	c := s.Config
	obj := map[model.Objective]string{
		model.Autoregressive:  "autoregressive next-symbol prediction",
		model.MaskedDiffusion: "masked diffusion (random mask rate per window, loss on masked positions)",
		model.CentreMasked:    "centre-masked prediction (only the window's centre is masked)",
	}[c.Objective]
	src := map[string]string{
		corpus.Opticks:  "Newton's Opticks (English prose)",
		corpus.GoSource: "Go standard-library source code",
		corpus.GoDoc:    "the Go documentation's HTML (markup)",
	}[s.Corpus]
	if src == "" {
		src = "a text file of " + s.kind()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Tiny byte-level MLP language model (%d folded symbols), %s, on %s", c.Vocab, obj, src)
	if s.DataBytes > 0 {
		fmt.Fprintf(&b, ", a training slice of %d KiB", s.DataBytes>>10)
	}
	b.WriteString(". ")
	fmt.Fprintf(&b, "Reference %q: context %d, embedding %d, %d %s layer(s) of %d, norm %s, residual %t, ",
		s.Ref, c.Context, c.Embed, c.Layers, c.Activation, c.Hidden, c.Norm, c.Residual)
	fmt.Fprintf(&b, "%s lr %g (%s schedule, warm-up %d), β1 %g, β2 %g, weight decay %g, dropout %g, clip %g, batch %d, %d steps. ",
		c.Optimizer, c.LR, c.Schedule, c.Warmup, c.Beta1, c.Beta2, c.WeightDecay, c.Dropout, c.ClipNorm, c.Batch, c.Steps)
	if s.Budget > 0 {
		fmt.Fprintf(&b, "Compute budget %.3g training FLOPs: a change that makes a step dearer trains fewer steps. ", s.Budget)
	}
	fmt.Fprintf(&b, "Metric: validation %s (lower is better).", s.Metric())
	return b.String()
}

// refConfig is a named reference configuration of a family.
type refConfig struct {
	name string
	edit func(*model.Config)
}

// Reference configurations are deliberately untuned (room to improve):
// "base" is the lab's measured baseline, "slow" learns too slowly (a low
// learning rate and narrow layers), "hot" runs at a high learning rate
// with a small batch.
var (
	arRefs = []refConfig{
		{"base", func(*model.Config) {}},
		{"slow", func(c *model.Config) { c.LR, c.Embed, c.Hidden = 5e-4, 8, 64 }},
		{"hot", func(c *model.Config) { c.LR, c.Batch = 8e-3, 32 }},
	}
	diffusionRefs = arRefs
)

// heldOutRef names the reference configuration held out in each family.
var heldOutRef = map[string]string{
	FamilyARProse: "hot",
	FamilyARCode:  "base",
	FamilyMDM:     "slow",
	FamilyCentre:  "base",
}

// DefaultTasks returns the 24 default tasks: for each of the two
// autoregressive families the three reference configurations at 300 and 600
// steps, and for each of the two diffusion families the three reference
// configurations on both corpora at 300 steps. One task per family is held
// out, at the longer budget for AR and on Go source for diffusion, with a
// different reference configuration per family (heldOutRef) so that the
// held-out set spans the references: 20 training and 4 held-out tasks.
// Library choice: holding out the same reference in every family would make
// the held-out set systematically unlike the training set (all "hot"
// references punish every learning-rate increase that helps elsewhere).
// Budgets are chosen so that a run takes about a second or less on one core.
//
// This is the V1 suite (SuiteV1); DefaultTasks returns it until the main
// job moves to the generated V2 suite (SuiteV2).
func DefaultTasks() []TaskSpec { return SuiteV1() }

// SuiteV1 returns the 24 hand-written tasks of the first lab (see
// DefaultTasks): fixed step budgets, whole corpora, three reference
// configurations per family.
func SuiteV1() []TaskSpec {
	var out []TaskSpec
	add := func(family, corp string, obj model.Objective, ref refConfig, steps int, split records.Split, tweak func(*model.Config)) {
		c := model.DefaultConfig()
		c.Objective = obj
		tweak(&c)
		ref.edit(&c)
		c.Steps = steps
		out = append(out, TaskSpec{
			ID:     fmt.Sprintf("%s/%s/%s-%d", family, corp, ref.name, steps),
			Family: family, Corpus: corp, Ref: ref.name, Split: split, Config: c,
		})
	}
	none := func(*model.Config) {}
	for _, f := range []struct{ family, corpus string }{{FamilyARProse, corpus.Opticks}, {FamilyARCode, corpus.GoSource}} {
		for _, steps := range []int{300, 600} {
			for _, r := range arRefs {
				split := records.Train
				if r.name == heldOutRef[f.family] && steps == 600 {
					split = records.HeldOut
				}
				add(f.family, f.corpus, model.Autoregressive, r, steps, split, none)
			}
		}
	}
	// Masked diffusion predicts every position and is evaluated along the
	// greedy unmasking order, about four times the cost of AR per step and
	// far more per evaluated window: a narrower layer, a smaller batch and
	// fewer evaluation windows keep a run near a second.
	mdm := func(c *model.Config) { c.Hidden, c.Batch, c.EvalWindows = 64, 32, 1024 }
	for _, f := range []struct {
		family string
		obj    model.Objective
		tweak  func(*model.Config)
	}{{FamilyMDM, model.MaskedDiffusion, mdm}, {FamilyCentre, model.CentreMasked, none}} {
		for _, corp := range []string{corpus.Opticks, corpus.GoSource} {
			for _, r := range diffusionRefs {
				split := records.Train
				if r.name == heldOutRef[f.family] && corp == corpus.GoSource {
					split = records.HeldOut
				}
				add(f.family, corp, f.obj, r, 300, split, f.tweak)
			}
		}
	}
	return out
}

// HoldOutFamily returns a copy of specs in which every task of family is
// held out, for the generalisation experiment (METHOD.md §1 Data and
// evaluation: drop a whole family from training and evaluate on it). Other
// families keep their splits. The error wraps ErrUnknownFamily when no task
// belongs to family.
func HoldOutFamily(specs []TaskSpec, family string) ([]TaskSpec, error) {
	out := append([]TaskSpec(nil), specs...)
	n := 0
	for i := range out {
		if out[i].Family == family {
			out[i].Split = records.HeldOut
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownFamily, family)
	}
	return out, nil
}

// Families returns the distinct families of specs in first-seen order.
func Families(specs []TaskSpec) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range specs {
		if !seen[s.Family] {
			seen[s.Family] = true
			out = append(out, s.Family)
		}
	}
	return out
}
