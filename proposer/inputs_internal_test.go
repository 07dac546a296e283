package proposer

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/records"
)

// inputs are three descriptor inputs of the tests below.
var inputs = []DescriptorInput{{Name: "log10_lr", Center: -2, Scale: 0.5}, {Name: "width", Center: 4, Scale: 1}, {Name: "steps", Center: 7, Scale: 2}}

// describe gives a task the descriptors of the inputs: log10_lr and width
// drawn, steps absent on a third of the tasks (its input is then 0).
func describe(rng *rand.Rand, t records.Task) records.Task {
	t.Descriptors = map[string]float64{"log10_lr": -3 + 2*rng.Float64(), "width": math.Exp2(float64(4 + rng.IntN(5)))}
	if rng.IntN(3) > 0 {
		t.Descriptors["steps"] = float64(100 + rng.IntN(3000))
	}
	return t
}

// The inputs are (asinh(v) − Center)/Scale, clamped to ±3, and 0 for a
// missing name or a value that is not finite (PolicyConfig.DescriptorInputs).
func TestDescriptorInputsValues(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.Hidden, cfg.DescriptorInputs = 2, inputs
	p := newRandomPolicy(t, cfg, 1)
	task := records.Task{Descriptors: map[string]float64{"log10_lr": -2.5, "width": 1e9, "other": 5}}
	x := p.lay.descriptorInputs(task)
	require.InDelta(t, (math.Asinh(-2.5)+2)/0.5, x[0], 1e-15) // −1.29…
	require.Equal(t, 3.0, x[1], "asinh(1e9) − 4 = 17.4 is clamped")
	require.Zero(t, x[2], "a missing name")
	task.Descriptors["steps"] = math.NaN()
	require.Zero(t, p.lay.descriptorInputs(task)[2], "a value that is not finite")
	cfg.DescriptorInputs = nil
	require.Nil(t, newRandomPolicy(t, cfg, 1).lay.descriptorInputs(task))
}

// The descriptor inputs' weights Ud sit after every other parameter, so a
// policy without inputs keeps its layout and its draws; with inputs the
// other parameters start the same and Ud is drawn after them.
func TestDescriptorInputsLayout(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.Hidden, cfg.InitStd = 4, 0.3
	plain := newRandomPolicy(t, cfg, 7)
	cfg.DescriptorInputs = inputs
	with := newRandomPolicy(t, cfg, 7)
	require.Equal(t, plain.lay.nParams, with.lay.udOff)
	require.Equal(t, plain.lay.nParams+len(inputs)*4, with.lay.nParams)
	require.Equal(t, plain.theta, with.theta[:with.lay.udOff])
	for _, u := range with.theta[with.lay.udOff:] {
		require.NotZero(t, u)
	}
}

func TestDescriptorInputsConfig(t *testing.T) {
	for _, c := range []struct {
		hidden int
		in     []DescriptorInput
		want   string
	}{
		{0, inputs, "Hidden > 0"},
		{2, []DescriptorInput{{Name: "", Scale: 1}}, "empty or repeated"},
		{2, []DescriptorInput{{Name: "a", Scale: 1}, {Name: "a", Scale: 1}}, "empty or repeated"},
		{2, []DescriptorInput{{Name: "a", Center: math.Inf(1), Scale: 1}}, "Center"},
		{2, []DescriptorInput{{Name: "a", Scale: 0}}, "Scale"},
		{2, []DescriptorInput{{Name: "a", Scale: math.NaN()}}, "Scale"},
		{2, make([]DescriptorInput, maxDescriptorInputs+1), "at most"},
	} {
		cfg := DefaultPolicyConfig()
		cfg.Hidden, cfg.DescriptorInputs = c.hidden, c.in
		err := cfg.Validate()
		require.ErrorIs(t, err, ErrConfig, c.want)
		require.ErrorContains(t, err, c.want)
	}
	cfg := DefaultPolicyConfig()
	cfg.Hidden, cfg.DescriptorInputs = 2, inputs
	require.NoError(t, cfg.Validate())
}

// ∂ log π/∂Ud[d, i] = ∂ log π/∂a_i · x_d: the log-prob and DAPO gradients
// at the descriptor inputs' weights match central differences (with an
// input clamped and one missing among the states).
func TestDescriptorInputsGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := DefaultPolicyConfig()
	cfg.InitStd, cfg.DescriptorInputs = 0.5, inputs
	p := newHiddenPolicy(t, cfg, 5, 91)
	requireDescribedGradients(t, p, cfg, p.lay.udOff, p.lay.nParams, 1)
}

// requireDescribedGradients checks, on four described states drawn with a
// fixed source, the log-prob gradient at temperature temp, and then the
// DAPO gradient of a described batch, against central differences at the
// parameters in [lo, hi) where they are non-zero (some must be), and the
// log-prob gradient at random others too (checkGradient).
func requireDescribedGradients(t *testing.T, p *Policy, cfg PolicyConfig, lo, hi int, temp float64) {
	t.Helper()
	nonZero := func(grad []float64) []int {
		var idx []int
		for i := lo; i < hi; i++ {
			if grad[i] != 0 {
				idx = append(idx, i)
			}
		}
		return idx
	}
	rng := rand.New(rand.NewPCG(92, 93))
	for trial := range 4 {
		s := randomState(rng, p.cat)
		s.Task = describe(rng, s.Task)
		smp, err := p.Propose(context.Background(), s, 1, rng)
		require.NoError(t, err)
		toks, err := p.lay.encode(smp[0])
		require.NoError(t, err)
		state := p.lay.stateFeatures(s, cfg.FamilyBuckets)
		f, grad, _ := weightedLogProb(p, state, p.lay.descriptorInputs(s.Task), toks, temp, rng)
		idx := nonZero(grad)
		require.NotEmpty(t, idx, "trial %d", trial)
		requireFiniteDifferences(t, p, f, grad, idx, 1e-7, 1e-6)
		checkGradient(t, p, f, grad, rng)
	}
	batch := dapoBatch(t, p, rng, 16)
	for i := range batch {
		batch[i].State.Task = describe(rng, batch[i].State.Task)
	}
	_, grad, f := dapoLoss(t, p, batch)
	idx := nonZero(grad)
	require.Greater(t, len(idx), 5)
	requireFiniteDifferences(t, p, f, grad, idx, 1e-7, 1e-6)
}

// What the inputs are for: a card that is right below a learning rate and
// wrong above it. Supervised on four training recipes (log10 lr −4.0,
// −3.2, −1.1, −0.6), the policy with the input puts most of its mass on
// the right card at two recipes it never saw (−2.4 and −1.6); the binned
// descriptor features alone cannot, as those recipes fall in bins no
// training state turned on (bins −10, −9, −5, −3 against −8 and −6).
// unseenRecipes supervises a policy of cfg (its hidden layer drawn from
// rng, which may be nil without one) on the four training recipes of the
// "hot rate wants slower" task for 300 steps and returns its probability
// of the right card at the two unseen recipes (log10 lr −2.4 and −1.6).
func unseenRecipes(t *testing.T, cfg PolicyConfig, rng *rand.Rand) []float64 {
	t.Helper()
	cat := []records.Card{{Mechanism: "slower"}, {Mechanism: "faster"}}
	state := func(lr float64) records.State {
		return records.State{Task: records.Task{ID: "t", Family: "ar-prose", Split: records.Train, Metric: records.BitsPerByte,
			RefLoss: 2, SeedNoise: 0.01, Descriptors: map[string]float64{"log10_lr": lr}}}
	}
	right := func(lr float64) int { // a hot rate wants "slower"
		if lr > -2 {
			return 0
		}
		return 1
	}
	p, err := NewPolicy(cat, cfg, rng)
	require.NoError(t, err)
	var items []Item
	for _, lr := range []float64{-4, -3.2, -1.1, -0.6} {
		items = append(items, Item{State: state(lr), Sample: Sample{Proposal: records.Proposal{Mechanism: cat[right(lr)].Mechanism}}})
	}
	for range 300 {
		_, err := p.Supervise(context.Background(), items)
		require.NoError(t, err)
	}
	var out []float64
	for _, lr := range []float64{-2.4, -1.6} {
		out = append(out, p.CardProbs(state(lr))[right(lr)])
	}
	return out
}

func TestDescriptorInputsGeneraliseToUnseenValues(t *testing.T) {
	run := func(cfg PolicyConfig) []float64 { return unseenRecipes(t, cfg, rand.New(rand.NewPCG(5, 6))) }
	cfg := DefaultPolicyConfig()
	cfg.Hidden, cfg.DescriptorBuckets = 8, 256
	binned := run(cfg)
	cfg.DescriptorInputs = []DescriptorInput{{Name: "log10_lr", Center: -2, Scale: 0.5}}
	smooth := run(cfg)
	t.Logf("P(right card) at unseen recipes: binned %.3f, with the input %.3f", binned, smooth)
	for i := range smooth {
		require.Greater(t, smooth[i], 0.8, "with the input, recipe %d", i)
		require.Less(t, binned[i], 0.6, "binned only, recipe %d", i)
	}
}

// StandardisedInputs centres and scales each varying descriptor's asinh
// over the tasks that have it, in name order, skipping constant names and
// values that are not finite.
func TestStandardisedInputs(t *testing.T) {
	tasks := []records.Task{
		{Descriptors: map[string]float64{"b": 0, "a": 1, "k": 7}},
		{Descriptors: map[string]float64{"b": math.Sinh(2), "a": 1, "k": 7, "c": math.Inf(1)}},
		{Descriptors: map[string]float64{"b": math.Sinh(4), "k": 7, "c": 3}},
	}
	// b: asinh values 0, 2, 4: mean 2, population sd √(8/3).
	require.Equal(t, []DescriptorInput{{Name: "b", Center: 2, Scale: math.Sqrt(8.0 / 3)}}, StandardisedInputs(tasks))
	require.Nil(t, StandardisedInputs(nil))
}
