package cards_test

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

func TestCatalogueIsValidData(t *testing.T) {
	cat := cards.Catalogue()
	// At least 24 cards (the paper curates 40; METHOD.md §1 Vocabulary).
	require.GreaterOrEqual(t, len(cat), 24)
	seen := map[string]bool{}
	for _, c := range cat {
		require.NotEmpty(t, c.Mechanism)
		require.False(t, seen[c.Mechanism], "duplicate card %s", c.Mechanism)
		seen[c.Mechanism] = true
		require.NotEqual(t, records.NoChange, c.Mechanism)
		require.NotEmpty(t, c.Description, c.Mechanism)
		require.NotNil(t, c.Prior, "%s has no prior", c.Mechanism)
		require.Greater(t, c.Prior.Std, 0.0, c.Mechanism)
		require.False(t, math.IsNaN(c.Prior.Mean), c.Mechanism)
		require.NotEmpty(t, c.Params, "%s has no parameters", c.Mechanism)
		for _, ps := range c.Params {
			require.NotEmpty(t, ps.Choices, "%s.%s", c.Mechanism, ps.Name)
			require.Contains(t, []string{cards.Float, cards.Int, cards.Enum}, ps.Kind)
			for _, ch := range ps.Choices {
				if ps.Kind == cards.Enum {
					continue
				}
				x, err := strconv.ParseFloat(ch, 64)
				require.NoError(t, err)
				require.Equal(t, strconv.FormatFloat(x, 'g', -1, 64), ch, "choice not canonical")
				require.True(t, x >= ps.Min && x <= ps.Max, "%s.%s choice %s outside [%g, %g]", c.Mechanism, ps.Name, ch, ps.Min, ps.Max)
			}
		}
		got, ok := cards.Lookup(c.Mechanism)
		require.True(t, ok)
		require.Equal(t, c, got)
	}
	require.Equal(t, len(cat), len(cards.Mechanisms()))
}

func TestEveryChoiceApplies(t *testing.T) {
	for _, obj := range []model.Objective{model.Autoregressive, model.MaskedDiffusion, model.CentreMasked} {
		ref := model.DefaultConfig()
		ref.Objective = obj
		for _, c := range cards.Catalogue() {
			ps := cards.Proposals(c)
			n := 1
			for _, p := range c.Params {
				n *= len(p.Choices)
			}
			require.Len(t, ps, n)
			for _, p := range ps {
				cfg, err := cards.Apply(ref, p)
				require.NoError(t, err, "%s on %s", p.Key(), obj)
				require.NoError(t, cfg.Validate())
			}
			// The representative proposal really changes the default recipe.
			cfg, err := cards.Apply(ref, cards.Representative(c))
			require.NoError(t, err)
			require.NotEqual(t, ref, cfg, "representative of %s is a no-op", c.Mechanism)
		}
	}
}

func TestApplyEdits(t *testing.T) {
	ref := model.DefaultConfig() // LR 2e-3, Batch 64, Steps 1000, Embed 16, Hidden 128, Context 8, Layers 1
	tests := []struct {
		text string
		edit func(c *model.Config)
	}{
		{"none", func(c *model.Config) {}},
		{"lr-scale factor=2", func(c *model.Config) { c.LR = 4e-3 }},
		{"lr-warmup-boost factor=4 warmup_frac=0.05", func(c *model.Config) { c.LR, c.Warmup = 8e-3, 50 }},
		{"batch-size factor=0.5", func(c *model.Config) { c.Batch, c.Steps = 32, 2000 }},
		{"batch-size factor=4", func(c *model.Config) { c.Batch, c.Steps = 256, 250 }},
		{"batch-size factor=0.25", func(c *model.Config) { c.Batch, c.Steps = 16, 4000 }},
		{"batch-size-sqrt-lr factor=2", func(c *model.Config) { c.Batch, c.Steps, c.LR = 128, 500, 2e-3*math.Sqrt2 }},
		{"batch-size-sqrt-lr factor=0.5", func(c *model.Config) { c.Batch, c.Steps, c.LR = 32, 2000, 2e-3*math.Sqrt(0.5) }},
		{"width factor=2", func(c *model.Config) { c.Hidden = 256 }},
		{"width factor=0.5", func(c *model.Config) { c.Hidden = 64 }},
		{"width factor=1.5", func(c *model.Config) { c.Hidden = 192 }},
		{"width factor=0.3", func(c *model.Config) { c.Hidden = 38 }}, // 38.4 rounds down
		{"embed-dim factor=0.125", func(c *model.Config) { c.Embed = 2 }},
		{"context factor=0.5", func(c *model.Config) { c.Context = 4 }},
		{"context factor=1.5", func(c *model.Config) { c.Context = 12 }},
		{"depth add=-1", func(c *model.Config) { c.Layers = 0 }},
		{"depth add=2", func(c *model.Config) { c.Layers = 3 }},
		{"residual-depth add=0", func(c *model.Config) { c.Layers, c.Residual = 2, true }},
		{"residual-depth add=-1", func(c *model.Config) { c.Layers, c.Residual = 2, true }},
		{"model-scale factor=1.5", func(c *model.Config) { c.Embed, c.Hidden = 24, 192 }},
		{"warmup-cosine warmup_frac=0.1 min_frac=0", func(c *model.Config) { c.Warmup, c.Schedule, c.MinLRFrac = 100, "cosine", 0 }},
		{"wsd decay_frac=0.2", func(c *model.Config) { c.Schedule, c.DecayFrac, c.MinLRFrac = "wsd", 0.2, 0 }},
		{"deep-normed add=2 norm=layernorm", func(c *model.Config) { c.Layers, c.Residual, c.Norm = 3, true, "layernorm" }},
		{"adamw decay=0.1", func(c *model.Config) { c.Optimizer, c.WeightDecay = "adamw", 0.1 }},
		{"sgd-momentum lr_factor=10 momentum=0.5", func(c *model.Config) { c.Optimizer, c.Beta1, c.LR = "momentum", 0.5, 0.02 }},
		{"init-scale factor=0.5", func(c *model.Config) { c.InitScale = 0.5 }},
		{"activation name=GELU", func(c *model.Config) { c.Activation = "gelu" }},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			p, err := cards.Parse(tt.text)
			require.NoError(t, err)
			got, err := cards.Apply(ref, p)
			require.NoError(t, err)
			want := ref
			tt.edit(&want)
			if d := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= 1e-15 })); d != "" {
				t.Errorf("Apply (-want +got):\n%s", d)
			}
		})
	}
}

// A relative size card whose result leaves the card's range is infeasible
// (ErrOutOfRange naming the card and its parameter); the reference is
// returned unchanged.
func TestApplyRejectsOutOfRangeSizes(t *testing.T) {
	ref := model.DefaultConfig() // Hidden 128, Embed 16, Context 8, Batch 64, Layers 1
	for _, tt := range []struct{ text, reason string }{
		{"width factor=8", "hidden width 128 → 1024 outside the card's range 8..512"},
		{"width factor=0.125", ""}, // 16 units: in range
		{"embed-dim factor=0.125", ""},
		{"context factor=0.125", "context 8 → 1 outside the card's range 2..32"},
		{"context factor=8", "context 8 → 64 outside the card's range 2..32"},
		{"batch-size factor=0.125", ""}, // 8 windows, the card's minimum
		{"batch-size factor=16", "outside float in [0.125, 8]"},
		{"batch-size-sqrt-lr factor=8", ""},
		{"depth add=-2", "layers 1 → -1 outside the card's range 0..6"},
		{"depth add=6", "layers 1 → 7 outside the card's range 0..6"},
		{"residual-depth add=6", "layers 1 → 7 outside the card's range 2..6"},
		{"deep-normed add=-6 norm=rmsnorm", ""}, // at least 2 layers
	} {
		p, err := cards.Parse(tt.text)
		if err == nil {
			var got model.Config
			got, err = cards.Apply(ref, p)
			if err != nil {
				require.Equal(t, ref, got, tt.text)
			}
		}
		if tt.reason == "" {
			require.NoError(t, err, tt.text)
			continue
		}
		require.ErrorIs(t, err, cards.ErrOutOfRange, tt.text)
		require.ErrorIs(t, err, builder.ErrInfeasible, tt.text)
		require.ErrorContains(t, err, tt.reason, tt.text)
		var pe *cards.ProposalError
		require.True(t, errors.As(err, &pe))
		require.Equal(t, strings.Fields(tt.text)[0], pe.Mechanism)
	}
	ref.Batch = 32
	_, err := cards.Apply(ref, records.Proposal{Mechanism: "batch-size", Params: map[string]string{"factor": "0.125"}})
	require.ErrorContains(t, err, "cards: batch-size factor: batch 32 → 4 outside the card's range 8..512")
}

func TestApplyRejectsInvalidResult(t *testing.T) {
	// Every choice is valid on the lab's references (TestEveryChoiceApplies);
	// on a reference the model rejects, Apply reports the model's reason as
	// an infeasible proposal instead of returning a broken configuration.
	ref := model.DefaultConfig()
	ref.Embed = 0
	_, err := cards.Apply(ref, records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "2"}})
	require.ErrorIs(t, err, cards.ErrInvalidConfig)
	require.ErrorIs(t, err, builder.ErrInfeasible)
	require.ErrorIs(t, err, model.ErrInvalidConfig)
	require.ErrorContains(t, err, "Embed")
}

func TestRoundTripEveryChoice(t *testing.T) {
	for _, c := range cards.Catalogue() {
		for _, p := range cards.Proposals(c) {
			got, err := cards.Parse(cards.Render(p))
			require.NoError(t, err, cards.Render(p))
			require.Equal(t, p, got)
			require.Equal(t, p.Key(), got.Key())
		}
	}
	p := records.Proposal{Mechanism: "adamw", Params: map[string]string{"decay": "0.1"}, Text: "decoupled decay\nregularises the embedding"}
	got, err := cards.Parse(cards.Render(p))
	require.NoError(t, err)
	require.Equal(t, p, got)
	none, err := cards.Parse(cards.Render(records.Proposal{Mechanism: records.NoChange}))
	require.NoError(t, err)
	require.True(t, none.IsNoChange())
}

func TestParseForms(t *testing.T) {
	want := records.Proposal{Mechanism: "lr-warmup-boost", Params: map[string]string{"factor": "2", "warmup_frac": "0.05"}}
	for _, s := range []string{
		"lr-warmup-boost factor=2 warmup_frac=0.05",
		"  LR-Warmup-Boost  warmup_frac=5e-2   factor=2.0  ",
		"lr-warmup-boost(factor=2, warmup_frac=0.05)",
		"lr-warmup-boost{factor=2,warmup_frac=0.05}",
		"lr-warmup-boost: factor = 2; warmup_frac =0.050",
		"\n\n lr-warmup-boost factor=2 warmup_frac=0.05\r\n",
	} {
		got, err := cards.Parse(s)
		require.NoError(t, err, "%q", s)
		require.Equal(t, want, got, "%q", s)
	}
	got, err := cards.Parse("norm kind=RMSNorm\n  because deep nets like it  \n")
	require.NoError(t, err)
	require.Equal(t, records.Proposal{Mechanism: "norm", Params: map[string]string{"kind": "rmsnorm"}, Text: "because deep nets like it"}, got)
}

func TestParseInfeasible(t *testing.T) {
	tests := []struct {
		text     string
		sentinel error
		reason   string
	}{
		{"", cards.ErrSyntax, "empty"},
		{"   \n\t\n", cards.ErrSyntax, "empty"},
		{"=2", cards.ErrSyntax, "card name"},
		{"teleport speed=9", cards.ErrUnknownCard, "no such card"},
		{"lr-scale", cards.ErrMissingParam, "factor"},
		{"lr-scale factor=2 colour=red", cards.ErrUnknownParam, "colour"},
		{"lr-scale factor=1000", cards.ErrOutOfRange, "outside float in [0.01, 100]"},
		{"lr-scale factor=-1", cards.ErrOutOfRange, "outside"},
		{"lr-scale factor=NaN", cards.ErrBadValue, "finite"},
		{"lr-scale factor=inf", cards.ErrBadValue, "finite"},
		{"lr-scale factor=two", cards.ErrBadValue, "not a finite number"},
		{"depth add=2.5", cards.ErrBadValue, "integer"},
		{"depth add=9", cards.ErrOutOfRange, "outside int in [-6, 6]"},
		{"depth layers=2", cards.ErrUnknownParam, "has add"},
		{"width factor=16", cards.ErrOutOfRange, "outside float in [0.125, 8]"},
		{"activation name=sigmoid", cards.ErrOutOfRange, "not one of gelu, relu, silu, tanh"},
		{"lr-scale factor=2 factor=3", cards.ErrSyntax, "twice"},
		{"lr-scale factor", cards.ErrSyntax, "name=value"},
		{"lr-scale(factor=2", cards.ErrSyntax, "unbalanced"},
		{"lr-scale f@ctor=2", cards.ErrSyntax, "bad parameter name"},
		{"none factor=2", cards.ErrUnknownParam, "no parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, err := cards.Parse(tt.text)
			require.ErrorIs(t, err, tt.sentinel)
			require.ErrorIs(t, err, builder.ErrInfeasible)
			require.ErrorContains(t, err, tt.reason)
			var pe *cards.ProposalError
			require.True(t, errors.As(err, &pe))
		})
	}
	// Check and Apply reject the same proposals given as structs.
	_, err := cards.Apply(model.DefaultConfig(), records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "0"}})
	require.ErrorIs(t, err, cards.ErrOutOfRange)
	_, err = cards.Check(records.Proposal{Mechanism: "LR-scale", Params: map[string]string{"Factor": "2", "factor": "3"}})
	require.ErrorIs(t, err, cards.ErrSyntax)
}

// maxErrorLen bounds the error text of any proposal: the card, the
// parameter and a quoted value through records.Excerpt (each at most
// 4·MaxExcerpt bytes once quoted, plus its length) and the catalogue's own
// words.
const maxErrorLen = 1024

func TestParseErrorsQuoteExcerpts(t *testing.T) {
	// A megabyte of hostile text in any part of a proposal gives an
	// error of at most maxErrorLen bytes that still names what it
	// quotes by its first bytes and its length.
	mb, zeros := strings.Repeat("9", 1<<20), strings.Repeat("0", 1<<20)
	tests := []struct {
		text     string
		sentinel error
		want     string
	}{
		{"lr-scale factor=" + mb, cards.ErrBadValue, "cards: lr-scale factor: \"" + mb[:records.MaxExcerpt] + "…(1048576 bytes)\" is not a finite number"},
		{"lr-scale factor=1000." + zeros, cards.ErrOutOfRange, "cards: lr-scale factor: 1000." + zeros[:records.MaxExcerpt-5] + "…(1048581 bytes) outside float in [0.01, 100]"},
		{"lr-scale factor=x" + mb, cards.ErrBadValue, "not a finite number"},
		{"depth add=0.5" + mb, cards.ErrBadValue, "not an integer"},
		{"activation name=g" + mb, cards.ErrOutOfRange, "not one of gelu"},
		{"lr-scale factor=2 f@" + mb + "=1", cards.ErrSyntax, "bad parameter name"},
		{"lr-scale factor=2 " + mb, cards.ErrSyntax, "expected name=value"},
		{"lr-scale factor=2 p" + mb + "=1", cards.ErrUnknownParam, "card has no such parameter"},
		{"m" + mb + " factor=2", cards.ErrUnknownCard, "(1048577 bytes)"},
		{"=" + mb, cards.ErrSyntax, "a proposal starts with a card name"},
		{"lr-scale(" + mb, cards.ErrSyntax, "unbalanced"},
	}
	for _, tt := range tests {
		_, err := cards.Parse(tt.text)
		require.ErrorIs(t, err, tt.sentinel, tt.want)
		require.ErrorContains(t, err, tt.want)
		require.LessOrEqual(t, len(err.Error()), maxErrorLen, tt.want)
	}
	// Check quotes struct fields the same way.
	_, err := cards.Check(records.Proposal{Mechanism: "lr-scale", Params: map[string]string{"factor": "\x00" + mb}})
	require.ErrorIs(t, err, cards.ErrBadValue)
	require.LessOrEqual(t, len(err.Error()), maxErrorLen)
}

func FuzzParse(f *testing.F) {
	f.Add("lr-scale factor=" + strings.Repeat("9", 5000))
	f.Add("activation name=" + strings.Repeat("\xff", 300))
	f.Add("lr-scale factor=2")
	f.Add("lr-warmup-boost(factor=4, warmup_frac=0.1)\nrationale")
	f.Add("none")
	f.Add("deep-normed{add=1,norm=LayerNorm}")
	f.Add("depth add=-1")
	f.Add("residual-depth add=+2")
	f.Add("activation: name = gelu")
	f.Add("depth add=1e0")
	f.Add("\n\nwidth factor=0x2\n\n\nx")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := cards.Parse(s)
		if err != nil {
			if !errors.Is(err, builder.ErrInfeasible) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInfeasible", s, err)
			}
			if n := len(err.Error()); n > maxErrorLen {
				t.Fatalf("Parse of %d bytes: error of %d bytes, want ≤ %d", len(s), n, maxErrorLen)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Parse(%q) accepted an invalid proposal: %v", s, err)
		}
		q, err := cards.Parse(cards.Render(p))
		if err != nil {
			t.Fatalf("Parse(Render(%#v)) = %v", p, err)
		}
		if d := cmp.Diff(p, q); d != "" {
			t.Fatalf("round trip of %q (-first +second):\n%s", s, d)
		}
		if _, err := cards.Apply(model.DefaultConfig(), p); err != nil && !errors.Is(err, builder.ErrInfeasible) {
			t.Fatalf("Apply(%q) = %v", s, err)
		}
	})
}

func ExampleParse() {
	p, err := cards.Parse("LR-Warmup-Boost(factor=4.0, warmup_frac=5e-2)\nA higher rate is stable after warm-up.")
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Key())
	fmt.Println(cards.Render(p))
	_, err = cards.Parse("lr-scale factor=1000")
	fmt.Println(err, errors.Is(err, builder.ErrInfeasible))
	// Output:
	// lr-warmup-boost{factor=4,warmup_frac=0.05}
	// lr-warmup-boost factor=4 warmup_frac=0.05
	// A higher rate is stable after warm-up.
	// cards: lr-scale factor: 1000 outside float in [0.01, 100] true
}

func TestAllIsEveryCardsProposalsInOrder(t *testing.T) {
	a := records.Card{Mechanism: "a", Params: []records.ParamSpec{{Name: "x", Choices: []string{"1", "2"}}}}
	b := records.Card{Mechanism: "b", Params: []records.ParamSpec{{Name: "y", Choices: []string{"u", "v", "w"}}}}
	got := cards.All([]records.Card{a, b})
	var keys []string
	for _, p := range got {
		keys = append(keys, p.Key())
	}
	require.Equal(t, []string{
		records.Proposal{Mechanism: "a", Params: map[string]string{"x": "1"}}.Key(),
		records.Proposal{Mechanism: "a", Params: map[string]string{"x": "2"}}.Key(),
		records.Proposal{Mechanism: "b", Params: map[string]string{"y": "u"}}.Key(),
		records.Proposal{Mechanism: "b", Params: map[string]string{"y": "v"}}.Key(),
		records.Proposal{Mechanism: "b", Params: map[string]string{"y": "w"}}.Key(),
	}, keys)
	require.Empty(t, cards.All(nil))
	n := 0
	for _, c := range cards.Catalogue() {
		n += len(cards.Proposals(c))
	}
	require.Len(t, cards.All(cards.Catalogue()), n)
}
