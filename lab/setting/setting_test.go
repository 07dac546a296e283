package setting_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm"
	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

func TestNewWorld(t *testing.T) {
	l, err := lab.New(lab.DefaultConfig(), records.NewMemStore())
	require.NoError(t, err)
	lw, err := setting.Library().NewWorld(l)
	require.NoError(t, err)
	plain, ok := lw.(*rwm.Embedded)
	require.True(t, ok, "library: the embedded model itself, untuned")
	c := plain.Config()
	require.Zero(t, c.DescriptorWeight)
	require.Nil(t, c.Effects)
	require.Equal(t, lab.Catalogue(), c.Cards)
	require.Len(t, c.Priors, len(rwm.PriorsFromCards(lab.Catalogue())))

	vw, err := setting.Validated().NewWorld(l)
	require.NoError(t, err)
	tuned, ok := vw.(*rwm.Tuned)
	require.True(t, ok, "validated: rwm.Tuned")
	b := tuned.Base()
	require.Equal(t, 1.0, b.DescriptorWeight)
	require.Equal(t, l.Effects().ID(), b.Effects.ID())
	want := rwm.DefaultEmbeddedConfig()
	want.DescriptorWeight = 1
	want = rwm.WithEffects(want, l.Effects())
	require.Equal(t, want.EffectSigmas, b.EffectSigmas)
	require.Equal(t, want.LossSigmas, b.LossSigmas)
	require.True(t, strings.HasPrefix(tuned.ID(), "rwm.Tuned/"))
}

// The validated setting is the one chosen on lab v2's validation splits;
// its numbers are the chosen ones, written out by hand.
func TestValidated(t *testing.T) {
	v := setting.Validated()
	require.Equal(t, setting.Setting{Name: "validated",
		World:     setting.World{Descriptors: 1, Effects: true, Tune: true},
		Policy:    setting.Policy{LR: 0.02, DescriptorBuckets: 256, Hidden: 32, TrainTemperature: 2, EvalTemperature: 0.5},
		Trainer:   setting.Trainer{HeldOutTask: true},
		Baselines: setting.Baselines{RerankHistory: true}}, v)
	require.True(t, v.RerankConfig().History, "the rerank baselines read each state's history")
	require.Equal(t, baseline.DefaultRerankConfig().N, v.RerankConfig().N)
	require.False(t, setting.Library().RerankConfig().History, "the library's rerank reads M alone")
	pc := v.PolicyConfig()
	want := proposer.DefaultPolicyConfig()
	want.Adam.LR, want.DescriptorBuckets, want.Hidden, want.Temperature = 0.02, 256, 32, 2
	require.Equal(t, want, pc)
	require.NoError(t, v.Validate())
	cfg := lm2lm.DefaultConfig()
	v.ApplyTrainer(&cfg)
	require.True(t, cfg.HeldOutTask)
}

// Library is every library default: its policy configuration is
// proposer.DefaultPolicyConfig exactly and its trainer lm2lm.DefaultConfig.
func TestLibraryIsEveryDefault(t *testing.T) {
	l := setting.Library()
	require.Equal(t, "library", l.Name)
	require.Equal(t, setting.World{}, l.World)
	require.Equal(t, proposer.DefaultPolicyConfig(), l.PolicyConfig())
	require.Equal(t, 0.05, l.Policy.LR)
	require.Equal(t, 1.0, l.Policy.EvalTemperature)
	require.Nil(t, l.HiddenSource(1), "no hidden layer, no draws")
	cfg := lm2lm.DefaultConfig()
	l.ApplyTrainer(&cfg)
	require.Equal(t, lm2lm.DefaultConfig(), cfg)
	require.NoError(t, l.Validate())
}

func TestLookup(t *testing.T) {
	for _, n := range setting.Names() {
		s, err := setting.Lookup(n)
		require.NoError(t, err)
		require.Equal(t, n, s.Name)
	}
	require.Equal(t, []string{"validated", "library", "prior-local", "local"}, setting.Names())
	_, err := setting.Lookup("chosen")
	require.ErrorIs(t, err, setting.ErrUnknown)
	require.EqualError(t, err, `setting: unknown name: setting "chosen"; valid: validated, library, prior-local, local`)
	_, err = setting.Lookup(strings.Repeat("x", 500))
	require.ErrorIs(t, err, setting.ErrUnknown)
	require.Less(t, len(err.Error()), 160, "the name is quoted as a bounded excerpt")
	_, err = setting.LookupProfile("huge")
	require.True(t, errors.Is(err, setting.ErrUnknown))
	require.EqualError(t, err, `setting: unknown name: profile "huge"; valid: tiny, short, default, paper`)
}

func TestHiddenSourceFollowsTheSeed(t *testing.T) {
	v := setting.Validated()
	a, b, c := v.HiddenSource(3), v.HiddenSource(3), v.HiddenSource(4)
	x, y, z := a.Uint64(), b.Uint64(), c.Uint64()
	require.Equal(t, x, y)
	require.NotEqual(t, x, z)
	p, err := v.NewPolicy(3)
	require.NoError(t, err)
	q, err := v.NewPolicy(3)
	require.NoError(t, err)
	pb, _ := p.MarshalBinary()
	qb, _ := q.MarshalBinary()
	require.Equal(t, pb, qb, "one seed, one initial policy")
}

func TestValidateRefusesBadParts(t *testing.T) {
	for name, mut := range map[string]func(*setting.Setting){
		"descriptor share above 1": func(s *setting.Setting) { s.World.Descriptors = 1.5 },
		"zero learning rate":       func(s *setting.Setting) { s.Policy.LR = 0 },
		"zero eval temperature":    func(s *setting.Setting) { s.Policy.EvalTemperature = 0 },
		"zero train temperature":   func(s *setting.Setting) { s.Policy.TrainTemperature = 0 },
		"too many hidden units":    func(s *setting.Setting) { s.Policy.Hidden = 5000 },
	} {
		s := setting.Validated()
		mut(&s)
		require.Error(t, s.Validate(), name)
	}
}

// The profile table, by hand: the paper's numbers for default and paper
// (METHOD.md §1), the drivers' small ones below.
func TestProfiles(t *testing.T) {
	require.Equal(t, []string{"tiny", "short", "default", "paper"}, setting.ProfileNames())
	type row struct{ steps, states, quota, m0, evalStates, hist, budget int }
	want := map[string]row{
		"tiny":    {16, 12, 8, 8, 1, 8, 4},
		"short":   {24, 48, 32, 24, 2, 8, 16},
		"default": {96, 128, 96, 100, 8, 8, 100},
		"paper":   {96, 277, 256, 100, 8, 8, 100},
	}
	for _, p := range setting.Profiles() {
		w := want[p.Name]
		require.Equal(t, w, row{p.Steps, p.States, p.Quota, p.M0, p.EvalStates, p.EvalHistory, p.CalibrationBudget()}, p.Name)
		require.NoError(t, p.Schedule.Validate(), p.Name)
		cfg := lm2lm.DefaultConfig()
		p.ApplyTrainer(&cfg)
		require.NoError(t, cfg.Validate(), p.Name)
		require.Equal(t, p.Steps, cfg.Steps)
		require.Equal(t, p.Quota, cfg.DAPO.Quota)
	}
	d, err := setting.LookupProfile("paper")
	require.NoError(t, err)
	require.Equal(t, calibrate.DefaultSchedule(), d.Schedule)
	require.Equal(t, lab.DefaultSuiteSizes(), d.Sizes)
	tiny, _ := setting.LookupProfile("tiny")
	require.Equal(t, lab.SuiteSizes{Train: 1, TestIn: 1}, tiny.Sizes)
	// ApplyTrainer copies the schedule: a trainer's config never aliases
	// the table.
	cfg := lm2lm.DefaultConfig()
	tiny.ApplyTrainer(&cfg)
	cfg.Schedule.Budgets[0] = 99
	again, _ := setting.LookupProfile("tiny")
	require.Equal(t, []int{4}, again.Schedule.Budgets)
}

// A setting's JSON is its content, field by field: what a result file
// records.
func TestSettingJSON(t *testing.T) {
	b, err := json.Marshal(setting.Validated())
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"validated","world":{"descriptors":1,"effects":true,"tune":true},
		"policy":{"lr":0.02,"description_buckets":0,"descriptor_buckets":256,"hidden":32,"train_temperature":2,"eval_temperature":0.5},
		"trainer":{"held_out_task":true},"baselines":{"rerank_history":true}}`, string(b))
	var back setting.Setting
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, setting.Validated(), back)
}

func TestLabWMRL(t *testing.T) {
	w := setting.LabWMRL()
	require.Equal(t, 32, w.MinPairs)
	require.Equal(t, 16, w.RefitEvery)
	require.Equal(t, 8.0, float64(w.HalfLife))
	require.Equal(t, 4, w.Warmup)
	require.NoError(t, w.Validate())
}

// PriorLocal is Validated with the prior (its hyperparameters kept) and
// the local correction; Local is Validated with the local correction. A
// prior with re-tuning is refused.
func TestPriorLocal(t *testing.T) {
	v, pl, l := setting.Validated(), setting.PriorLocal(), setting.Local()
	require.Equal(t, setting.World{Descriptors: 1, Effects: true, Prior: true, Local: true}, pl.World)
	require.Equal(t, setting.World{Descriptors: 1, Effects: true, Tune: true, Local: true}, l.World)
	require.Equal(t, v.Policy, pl.Policy)
	require.Equal(t, v.Trainer, pl.Trainer)
	require.Equal(t, v.Baselines, pl.Baselines)
	require.NoError(t, pl.Validate())
	bad := pl
	bad.World.Tune = true
	require.ErrorContains(t, bad.Validate(), "World.Prior with World.Tune")
	d, err := pl.PriorDigest()
	require.NoError(t, err)
	require.NotEmpty(t, d)
	d, err = v.PriorDigest()
	require.NoError(t, err)
	require.Empty(t, d)
}
