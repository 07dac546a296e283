package lab

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/lm2lm/lm2lm/records"
	"math"

	"github.com/lm2lm/lm2lm/lab/corpus"
	"github.com/lm2lm/lm2lm/lab/model"
)

// Descriptor names: the lab's records.Task.Descriptors, the structured twin
// of TaskSpec.Description. One-hot groups hold 1 for the task's
// value and 0 for the others.
const (
	DescLog10LR         = "log10_lr"           // log10 of the reference peak learning rate
	DescWidth           = "width"              // hidden units per layer
	DescEmbed           = "embed"              // embedding width per symbol
	DescDepth           = "depth"              // hidden layers
	DescContext         = "context"            // window length in symbols
	DescBatch           = "batch"              // windows per step
	DescSteps           = "steps"              // optimiser steps of the reference run
	DescLog10Budget     = "log10_budget_flops" // log10 training FLOPs (TaskSpec.Budget, or model.TrainFLOPs without one)
	DescLog10Params     = "log10_params"       // log10 trainable parameters (model.Params)
	DescTokensPerParam  = "tokens_per_param"   // training windows (steps·batch) per parameter
	DescEpochs          = "epochs"             // training windows per training symbol: passes over the data
	DescLog10DataBytes  = "log10_data_bytes"   // log10 training symbols (the slice, or the whole training split)
	DescWarmupFrac      = "warmup_frac"        // warm-up steps / steps
	DescWeightDecay     = "weight_decay"       // weight-decay coefficient
	DescDropout         = "dropout"            // dropout rate
	DescClipNorm        = "clip_norm"          // gradient-norm clip (0 = off)
	DescLabelSmoothing  = "label_smoothing"    // label-smoothing ε
	DescResidual        = "residual"           // 1 with residual connections
	DescNorm            = "norm"               // 1 with a layernorm or rmsnorm
	DescObjectivePrefix = "objective_"         // one-hot: objective_ar, objective_mdm, objective_centre
	DescCorpusPrefix    = "corpus_"            // one-hot: corpus_prose, corpus_code, corpus_markup
	DescOptPrefix       = "opt_"               // one-hot: opt_adam, opt_adamw, opt_sgd, opt_momentum, opt_lion
	DescSchedulePrefix  = "schedule_"          // one-hot: schedule_constant, schedule_cosine, schedule_linear, schedule_wsd
)

// Descriptors returns the task's named numeric descriptors (the Desc*
// names) for a training split of trainSymbols symbols before slicing; every
// value is finite.
func (s TaskSpec) Descriptors(trainSymbols int) map[string]float64 {
	c := s.Config
	data := trainSymbols
	if s.DataBytes > 0 && s.DataBytes < trainSymbols {
		data = s.DataBytes
	}
	budget := s.Budget
	if budget == 0 {
		budget = model.TrainFLOPs(c)
	}
	params := float64(model.Params(c))
	windows := float64(c.Steps) * float64(c.Batch)
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	d := map[string]float64{
		DescLog10LR: math.Log10(c.LR), DescWidth: float64(c.Hidden), DescEmbed: float64(c.Embed),
		DescDepth: float64(c.Layers), DescContext: float64(c.Context), DescBatch: float64(c.Batch),
		DescSteps: float64(c.Steps), DescLog10Budget: math.Log10(budget), DescLog10Params: math.Log10(params),
		DescTokensPerParam: windows / params, DescEpochs: windows / float64(max(data, 1)),
		DescLog10DataBytes: math.Log10(float64(max(data, 1))), DescWarmupFrac: float64(c.Warmup) / float64(c.Steps),
		DescWeightDecay: c.WeightDecay, DescDropout: c.Dropout, DescClipNorm: c.ClipNorm,
		DescLabelSmoothing: c.LabelSmoothing, DescResidual: b2f(c.Residual && c.Layers > 1), DescNorm: b2f(c.Norm != "none"),
	}
	for _, o := range []model.Objective{model.Autoregressive, model.MaskedDiffusion, model.CentreMasked} {
		d[DescObjectivePrefix+string(o)] = b2f(c.Objective == o)
	}
	for _, k := range []string{corpus.KindProse, corpus.KindCode, corpus.KindMarkup} {
		d[DescCorpusPrefix+k] = b2f(s.kind() == k)
	}
	for _, o := range []string{"adam", "adamw", "sgd", "momentum", "lion"} {
		d[DescOptPrefix+o] = b2f(c.Optimizer == o)
	}
	for _, sc := range []string{"constant", "cosine", "linear", "wsd"} {
		d[DescSchedulePrefix+sc] = b2f(c.Schedule == sc)
	}
	return d
}

// descriptors returns spec's descriptors over its loaded corpus.
func (l *Lab) descriptors(spec TaskSpec) map[string]float64 {
	l.mu.Lock()
	n := len(l.corpora[spec.Corpus].data.Train)
	l.mu.Unlock()
	return spec.Descriptors(n)
}

// Effects is the lab as an rwm.Effector: what a proposal does to a task's
// descriptors, from the configuration it builds, without training.
type Effects struct {
	lab *Lab
	id  string
}

// effectsVersion names how Effects computes an effect (the descriptors of
// the configuration a proposal builds); it changes when that code does.
const effectsVersion = "v1"

// Effects returns the lab's Effector. An effect depends on the task's spec
// and the catalogue; a task's ID names its spec (the generator derives
// every split's specs from their IDs, lab/testdata/splits.golden pins
// them; as for rwm's evidence fingerprints, a context must not hold two
// different tasks under one ID), so the ID digests the catalogue and
// effectsVersion, not the lab's task list: a prior fitted over one lab
// (rwm.Prior records the ID) loads over a lab of other tasks, such as the
// V3 splits'.
func (l *Lab) Effects() Effects {
	h := sha256.New()
	fmt.Fprintf(h, "lab effects %s\n", effectsVersion)
	for _, c := range Catalogue() {
		fmt.Fprintf(h, "%s %+v\n", c.Mechanism, c.Params)
	}
	return Effects{lab: l, id: "lab.Effects/" + hex.EncodeToString(h.Sum(nil)[:8])}
}

// ID names the catalogue and the version of the effects' computation.
func (e Effects) ID() string { return e.id }

// Effect returns the descriptors of task t after proposal p (the
// configuration p builds on t's reference, under its compute budget). It
// fails for an unknown task or a proposal the task cannot build
// (cards.ErrOutOfRange, an unknown parameter, …).
func (e Effects) Effect(t records.Task, p records.Proposal) (map[string]float64, error) {
	spec, err := e.lab.Spec(t.ID)
	if err != nil {
		return nil, err
	}
	cfg, err := spec.apply(p)
	if err != nil {
		return nil, err
	}
	if _, err := e.lab.data(spec); err != nil {
		return nil, err
	}
	spec.Config = cfg
	return e.lab.descriptors(spec), nil
}
