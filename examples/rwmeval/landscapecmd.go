package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// landscapeOptions are the flags of the -landscape mode.
type landscapeOptions struct {
	store string // the landscape records store (examples/sweep -landscape -store)
	part  string // lab.SuiteV2 part whose tasks are kept; "" = every task of the store
	out   string // directory of landscape-report.md
	rank  rankConfig
	// context, when set, is a second landscape store whose cells (of the
	// tasks of contextPart) form the models' context instead: the tasks of
	// store are then unseen tasks (rankTransfer), each with hist of its own
	// cells in its context.
	context, contextPart string
	hist                 int
	noise                []float64 // -oracle-noise: the noisy oracles' noise, σ_e units (rankTransfer)
	models               []string  // names of landscapeModels to rank; empty = the standard five
	// prior is a pretrained prior file (examples/priorcorpus) for the
	// models of priorKeys, fitted over a lab with priorPerFamily
	// pretraining tasks per family (PriorLab); "" = none.
	prior          string
	priorPerFamily int
}

// runLandscape ranks the world models on a landscape store and writes the
// report to stdout and to o.out/landscape-report.md.
func runLandscape(ctx context.Context, o landscapeOptions, stdout io.Writer) error {
	start := time.Now()
	rs, err := readStore(ctx, o.store)
	if err != nil {
		return err
	}
	keep, err := partFilter(o.part)
	if err != nil {
		return err
	}
	l, err := newLandscape(rs, keep)
	if err != nil {
		return fmt.Errorf("landscape store %s, -part %q: %w", o.store, o.part, err)
	}
	if o.context == "" && (o.contextPart != "" || o.hist != 0 || len(o.noise) > 0) {
		return fmt.Errorf("-context-part, -history and -oracle-noise rank unseen tasks: they need -context-landscape")
	}
	var pr *rwm.Prior
	if o.prior != "" {
		b, err := os.ReadFile(o.prior)
		if err != nil {
			return fmt.Errorf("-prior: %w", err)
		}
		if pr, err = rwm.ReadPrior(b); err != nil {
			return fmt.Errorf("-prior %s: %w", o.prior, err)
		}
	}
	models, err := landscapeModels(o.models, pr, o.priorPerFamily)
	if err != nil {
		return err
	}
	var b strings.Builder
	file := "landscape-report.md"
	if o.context == "" {
		rows, err := rankLandscape(ctx, l, models, o.rank)
		if err != nil {
			return fmt.Errorf("landscape store %s: %w", o.store, err)
		}
		fmt.Fprintf(&b, "## Ranking on the landscape %s\n\n", o.store)
		fmt.Fprintf(&b, "%d cells (task, proposal) measured on two seeds, on %d tasks; %d context draws per size, seed %d.\n",
			len(l.cells), len(l.tasks), o.rank.reps, o.rank.seed)
		fmt.Fprintf(&b, "Per task, the cells outside the context are predicted and scored against the seed the context does not hold: pairwise accuracy over pairs whose real gains differ by ≥ %g σ_e, and the mean real gain (σ_e, clipped to ±%d, infeasible −%d) of the %d predicted best; the bias on the top-rated is its prediction (clipped alike) minus its real gain. Figures: mean over tasks of the mean over draws; 95%% percentile-bootstrap interval over tasks (%d resamples).\n\n",
			pairThreshold, landClip, landClip, o.rank.k, o.rank.resamples)
		b.WriteString(landscapeTable(rows, o.rank.k))
	} else {
		file = "transfer-report.md"
		crs, err := readStore(ctx, o.context)
		if err != nil {
			return err
		}
		ckeep, err := partFilter(o.contextPart)
		if err != nil {
			return fmt.Errorf("-context-part: %w", err)
		}
		src, err := newLandscape(crs, ckeep)
		if err != nil {
			return fmt.Errorf("context store %s, -context-part %q: %w", o.context, o.contextPart, err)
		}
		rows, err := rankTransfer(ctx, l, src, models, o.rank, o.hist, o.noise)
		if err != nil {
			return fmt.Errorf("landscape store %s on context %s: %w", o.store, o.context, err)
		}
		fmt.Fprintf(&b, "## Ranking on unseen tasks: %s (%d tasks) on a context of %s (%d cells on %d other tasks)\n\n",
			o.store, len(l.tasks), o.context, len(src.cells), len(src.tasks))
		fmt.Fprintf(&b, "Each context: n random cells of the context store (one seed each) and, per task ranked, %d of its own cells (its history); %d draws per size, seed %d. Per task, its other cells are predicted (an oracle + noise s predicts the seed the draw holds plus s·N(0, 1)) and scored against the seed the draw does not hold: pairwise accuracy over pairs whose real gains differ by ≥ %g σ_e, and the mean real gain (σ_e, clipped to ±%d, infeasible −%d) of the %d predicted best; the bias on the top-rated is its prediction (clipped alike) minus its real gain. Figures: mean over tasks of the mean over draws; 95%% percentile-bootstrap interval over tasks (%d resamples).\n\n",
			o.hist, o.rank.reps, o.rank.seed, pairThreshold, landClip, landClip, o.rank.k, o.rank.resamples)
		b.WriteString(landscapeTable(rows, o.rank.k))
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.out, file), []byte(b.String()), 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\nrwmeval: done in %s; report in %s\n", b.String(), time.Since(start).Round(time.Second), filepath.Join(o.out, file))
	return err
}

// readStore returns every record of the file store at path. The store is
// opened (which locks it) and closed again.
func readStore(ctx context.Context, path string) ([]records.Record, error) {
	st, err := records.OpenFile(path, records.DefaultFileConfig())
	if err != nil {
		return nil, fmt.Errorf("landscape store: %w", err)
	}
	rs, err := st.Scan(ctx, records.Filter{})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("landscape store %s: %w", path, err)
	}
	return rs, nil
}

// partFilter keeps the task IDs of a part of lab.SuiteV2(lab.DefaultSuiteSeed),
// named as examples/sweep's -part: val, val-out, train, test-in or test-out;
// "" keeps every task (nil filter).
func partFilter(part string) (func(string) bool, error) {
	if part == "" {
		return nil, nil
	}
	s := lab.SuiteV2(lab.DefaultSuiteSeed)
	specs, ok := map[string][]lab.TaskSpec{"val": s.Validation, "val-out": s.ValidationOut, "train": s.Train, "test-in": s.TestIn, "test-out": s.TestOut}[part]
	if !ok {
		return nil, fmt.Errorf("-part %q, want val, val-out, train, test-in, test-out or empty (every task)", part)
	}
	ids := map[string]bool{}
	for _, t := range specs {
		ids[t.ID] = true
	}
	return func(id string) bool { return ids[id] }, nil
}

// landscapeModels returns the world models the report ranks, built as
// examples/compare builds its world model (catalogue priors and cards from
// lab.Catalogue(); METHOD.md §1 Research World Model). With no keys, the
// standard five:
//
//   - catalogue: the library setting's (setting.Library, rwm.DefaultEmbeddedConfig);
//   - desc (descriptors): DescriptorWeight 0.5 (the tasks' descriptors in
//     the kernel);
//   - desc-tuned: rwm.NewTuned around it (hyperparameters by marginal
//     likelihood on each context);
//   - fx (effects): DescriptorWeight 1 and rwm.WithEffects with the lab's
//     Effects (what a proposal does to the task's descriptors);
//   - fx-tuned: rwm.NewTuned around it, the validated setting's
//     (setting.Validated, the main job's and examples/compare's default).
//
// Other keys are fx-tuned with one fixed hyperparameter moved (TuneGrid
// does not search these; see variants), fx-tuned ranked by a quantile
// (quantileRank) and a fixed ranking (proposalMean): an ablation of the world
// model's kernel. Keys are checked; an unknown one is an error that lists
// the valid ones.
//
// With a pretrained prior p (rwm.ReadPrior of an examples/priorcorpus
// file), four more keys: fx-prior (the validated setting's configuration
// with p's hyperparameters and mean, rwm.Prior.Config: frozen, conditioned
// on the context's records), fx-tuned-prior (rwm.NewTuned around it: the
// validated setting with the prior), prior-mean (fx-prior without its
// context: the prior's mean alone) and fx-prior-clip (fx-prior reading its
// context's gains clipped to ±6 σ_e, rwm.EmbeddedConfig.ClipSigmas). Asking
// for them without p is an error.
//
// The lab behind Effects holds lab.SuiteV2(lab.DefaultSuiteSeed)'s
// training, validation and test tasks and no records (an effect needs no
// reference run), then, with p, the pretraining corpus's priorPerFamily
// tasks per family (PriorLab: the lab p was fitted over, whose Effects' ID
// p records; another is an error wrapping rwm.ErrPriorMismatch). A store
// of another suite's tasks gets no effect terms.
func landscapeModels(keys []string, p *rwm.Prior, priorPerFamily int) ([]rankModel, error) {
	lb, err := effectsLab(p, priorPerFamily)
	if err != nil {
		return nil, err
	}
	library, validated, err := settingModels(lb)
	if err != nil {
		return nil, err
	}
	base, eff := library.Config(), validated.Base()
	desc := base
	desc.DescriptorWeight = 0.5
	all := map[string]rankModel{
		"catalogue": {"catalogue", library},
		"fx-tuned":  {"effects, tuned", validated},
	}
	for _, m := range []struct {
		key, name string
		cfg       rwm.EmbeddedConfig
		tune      bool
	}{
		{"desc", "descriptors", desc, false},
		{"desc-tuned", "descriptors, tuned", desc, true},
		{"fx", "effects", eff, false},
	} {
		wm, err := setting.NewModel(m.cfg, m.tune)
		if err != nil {
			return nil, fmt.Errorf("world model %s: %w", m.key, err)
		}
		all[m.key] = rankModel{m.name, wm}
	}
	for _, v := range variants {
		c := eff
		v.set(&c)
		wm, err := setting.NewModel(c, true)
		if err != nil {
			return nil, fmt.Errorf("world model %s: %w", v.key, err)
		}
		all[v.key] = rankModel{"effects, tuned, " + v.name, wm}
	}
	all["proposal-mean"] = rankModel{"each proposal's mean gain in the context", proposalMean{}}
	all["fx-tuned-q90"] = rankModel{"effects, tuned, ranked by q90", quantileRank{all["fx-tuned"].model, Z90}}
	all["fx-tuned-q10"] = rankModel{"effects, tuned, ranked by q10", quantileRank{all["fx-tuned"].model, -Z90}}
	if p != nil {
		if err := addPriorModels(all, p, eff, priorPerFamily); err != nil {
			return nil, err
		}
	}
	return pickModels(all, keys, p != nil)
}

// effectsLab is the lab behind the world models' Effects:
// lab.SuiteV2(lab.DefaultSuiteSeed)'s training, validation and test tasks
// and, with p, the pretraining corpus's priorPerFamily tasks per family;
// no records.
func effectsLab(p *rwm.Prior, priorPerFamily int) (*lab.Lab, error) {
	su := lab.SuiteV2(lab.DefaultSuiteSeed)
	lcfg := lab.DefaultConfig()
	lcfg.Tasks = append(append(append([]lab.TaskSpec(nil), su.Train...), su.Val()...), su.Test()...)
	if p != nil {
		lcfg.Tasks = append(lcfg.Tasks, lab.PretrainTasks(priorPerFamily)...)
	}
	lb, err := lab.New(lcfg, records.NewMemStore())
	if err != nil {
		return nil, fmt.Errorf("lab for the effects: %w", err)
	}
	return lb, nil
}

// settingModels returns the library's and the validated setting's world
// models over lb, as the drivers build them (lab/setting): the others
// move one of their parts.
func settingModels(lb *lab.Lab) (*rwm.Embedded, *rwm.Tuned, error) {
	lw, err := setting.Library().NewWorld(lb)
	if err != nil {
		return nil, nil, fmt.Errorf("the library setting's world model: %w", err)
	}
	library, ok := lw.(*rwm.Embedded)
	if !ok {
		return nil, nil, fmt.Errorf("the library setting's world model is %T, want *rwm.Embedded", lw)
	}
	vw, err := setting.Validated().NewWorld(lb)
	if err != nil {
		return nil, nil, fmt.Errorf("the validated setting's world model: %w", err)
	}
	validated, ok := vw.(*rwm.Tuned)
	if !ok {
		return nil, nil, fmt.Errorf("the validated setting's world model is %T, want *rwm.Tuned", vw)
	}
	return library, validated, nil
}

// addPriorModels adds the world models of the pretrained prior p to all:
// fx-prior and fx-tuned-prior (the effects configuration eff with p's
// hyperparameters and mean, frozen or tuned), prior-mean (fx-prior without
// its context) and fx-prior-clip (fx-prior reading its context clipped to
// ±6 σ_e).
func addPriorModels(all map[string]rankModel, p *rwm.Prior, eff rwm.EmbeddedConfig, priorPerFamily int) error {
	pc, err := p.Config(eff)
	if err != nil {
		return fmt.Errorf("-prior over a lab of %d pretraining tasks per family: %w", priorPerFamily, err)
	}
	for _, m := range []struct {
		key, name string
		tune      bool
	}{{"fx-prior", "effects, pretrained prior", false}, {"fx-tuned-prior", "effects, tuned, pretrained prior", true}} {
		wm, err := setting.NewModel(pc, m.tune)
		if err != nil {
			return fmt.Errorf("world model %s: %w", m.key, err)
		}
		all[m.key] = rankModel{m.name, wm}
	}
	all["prior-mean"] = rankModel{"the pretrained prior's mean alone (no records)", noContext{all["fx-prior"].model}}
	cc := pc
	cc.ClipSigmas = 6
	wm, err := setting.NewModel(cc, false)
	if err != nil {
		return fmt.Errorf("world model fx-prior-clip: %w", err)
	}
	all["fx-prior-clip"] = rankModel{"effects, pretrained prior, context clipped to ±6 σ_e", wm}
	return nil
}

// pickModels returns the models of all that keys name, in their order
// (no keys: standardKeys). An unknown key is an error listing the valid
// ones; a prior's key without a prior (withPrior false) says it needs
// -prior.
func pickModels(all map[string]rankModel, keys []string, withPrior bool) ([]rankModel, error) {
	if len(keys) == 0 {
		keys = standardKeys
	}
	out := make([]rankModel, 0, len(keys))
	for _, k := range keys {
		m, ok := all[k]
		if !ok && !withPrior && slices.Contains(priorKeys, k) {
			return nil, fmt.Errorf("-models: %s needs -prior", k)
		}
		if !ok {
			return nil, fmt.Errorf("-models: unknown world model %q, want some of %s", k, strings.Join(modelKeys(), ", "))
		}
		out = append(out, m)
	}
	return out, nil
}

// variant is fx-tuned with one fixed hyperparameter moved.
type variant struct {
	key, name string
	set       func(*rwm.EmbeddedConfig)
}

// variants are the kernel ablations landscapeModels offers beside the
// standard five: the effect term's scale S (rwm.WithEffects: 2), the loss
// term's scale G (8) and lengthscale ℓ (4), the task offset (2) and the
// descriptor kernel's lengthscale (4), each below and above its setting or
// off; and the catalogue's priors off (every mechanism at MeanSigmas and
// SignalSigmas).
var variants = []variant{
	{"fx-S0", "no effect term", func(c *rwm.EmbeddedConfig) { c.EffectSigmas = 0 }},
	{"fx-S1", "effect S 1", func(c *rwm.EmbeddedConfig) { c.EffectSigmas = 1 }},
	{"fx-S4", "effect S 4", func(c *rwm.EmbeddedConfig) { c.EffectSigmas = 4 }},
	{"fx-G0", "no loss term", func(c *rwm.EmbeddedConfig) { c.LossSigmas = 0 }},
	{"fx-G4", "loss G 4", func(c *rwm.EmbeddedConfig) { c.LossSigmas = 4 }},
	{"fx-G16", "loss G 16", func(c *rwm.EmbeddedConfig) { c.LossSigmas = 16 }},
	{"fx-l2", "loss ℓ 2", func(c *rwm.EmbeddedConfig) { c.LossLengthscale = 2 }},
	{"fx-l8", "loss ℓ 8", func(c *rwm.EmbeddedConfig) { c.LossLengthscale = 8 }},
	{"fx-off0", "no task offset", func(c *rwm.EmbeddedConfig) { c.OffsetSigmas = 0 }},
	{"fx-off4", "task offset 4", func(c *rwm.EmbeddedConfig) { c.OffsetSigmas = 4 }},
	{"fx-dl2", "descriptor ℓ 2", func(c *rwm.EmbeddedConfig) { c.DescriptorLengthscale = 2 }},
	{"fx-dl8", "descriptor ℓ 8", func(c *rwm.EmbeddedConfig) { c.DescriptorLengthscale = 8 }},
	{"fx-np", "no catalogue priors", func(c *rwm.EmbeddedConfig) { c.Priors = nil }},
}

// standardKeys are the models a report ranks without -models.
var standardKeys = []string{"catalogue", "desc", "desc-tuned", "fx", "fx-tuned"}

// modelKeys lists the valid -models keys.
func modelKeys() []string {
	keys := slices.Clone(standardKeys)
	for _, v := range variants {
		keys = append(keys, v.key)
	}
	keys = append(keys, "fx-tuned-q90", "fx-tuned-q10", "proposal-mean")
	return append(keys, priorKeys...)
}

// priorKeys are the models of a pretrained prior (-prior).
var priorKeys = []string{"fx-prior", "fx-tuned-prior", "prior-mean", "fx-prior-clip"}

// noContext predicts with the inner model on no records: for a model with
// a pretrained prior, the prior's mean (and its prior variance).
type noContext struct{ inner rwm.WorldModel }

func (n noContext) Predict(ctx context.Context, q rwm.Query) (rwm.Prediction, error) {
	q.Evidence = records.Evidence{}
	return n.inner.Predict(ctx, q)
}

// proposalMean predicts a proposal's gain on any task by its mean gain in
// σ_e units (landGain: clipped, infeasible −landClip) over the context's
// records of the same proposal, on whichever tasks; 0 when the context has
// none. It reads no task at all: a fixed ranking learnt from the context,
// the yardstick a world model that reads the state should beat.
type proposalMean struct{}

func (proposalMean) Predict(_ context.Context, q rwm.Query) (rwm.Prediction, error) {
	key, sum, n := q.Proposal.Key(), 0.0, 0
	for i := range q.Evidence.Len() {
		r := q.Evidence.At(i)
		if r.Proposal.Key() != key || !(r.Task.SeedNoise > 0) {
			continue
		}
		sum += landGain(r)
		n++
	}
	if n == 0 {
		return rwm.Prediction{Valid: true}, nil
	}
	return rwm.Prediction{Gain: sum / float64(n) * q.Task.SeedNoise, Valid: true}, nil
}

// Z90 is rwm.Z90, the standard normal's 0.9 quantile.
const Z90 = rwm.Z90

// quantileRank ranks by a quantile of the inner model's predicted gain instead
// of its mean: mean + z·(High − Gain)/Z90 for z ≥ 0, mean + z·(Gain −
// Low)/Z90 below (z = ±Z90 gives q90 and q10, the optimistic and the
// pessimistic reward of METHOD.md §1 Reward; a prediction without an
// interval keeps its mean). It asks whether the world model's uncertainty
// ranks unseen tasks better than its mean.
type quantileRank struct {
	inner rwm.WorldModel
	z     float64
}

func (q quantileRank) Predict(ctx context.Context, query rwm.Query) (rwm.Prediction, error) {
	p, err := q.inner.Predict(ctx, query)
	if err != nil || !p.Valid || !p.HasInterval {
		return p, err
	}
	if q.z >= 0 {
		p.Gain += q.z * (p.High - p.Gain) / Z90
	} else {
		p.Gain += q.z * (p.Gain - p.Low) / Z90
	}
	p.Low, p.High = min(p.Low, p.Gain), max(p.High, p.Gain)
	return p, nil
}
