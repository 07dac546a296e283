package cards_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/lm2lm/lm2lm/lab/cards"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

// TestRandomValuesRoundTrip: any in-range value of any card (not only the
// listed choices), written with random case, spacing and separators, parses
// to the same canonical proposal as its rendering, and applies cleanly.
func TestRandomValuesRoundTrip(t *testing.T) {
	cat := cards.Catalogue()
	rapid.Check(t, func(rt *rapid.T) {
		c := rapid.SampledFrom(cat).Draw(rt, "card")
		p := records.Proposal{Mechanism: c.Mechanism, Params: map[string]string{}}
		var parts []string
		for _, ps := range c.Params {
			var v string
			switch ps.Kind {
			case cards.Enum:
				v = rapid.SampledFrom(ps.Choices).Draw(rt, ps.Name)
				if rapid.Bool().Draw(rt, "upper") {
					v = strings.ToUpper(v)
				}
			case cards.Int:
				v = strconv.Itoa(rapid.IntRange(int(ps.Min), int(ps.Max)).Draw(rt, ps.Name))
			default:
				v = strconv.FormatFloat(rapid.Float64Range(ps.Min, ps.Max).Draw(rt, ps.Name), 'e', 12, 64)
			}
			p.Params[ps.Name] = v
			sep := rapid.SampledFrom([]string{"=", " = ", "= "}).Draw(rt, "sep")
			parts = append(parts, ps.Name+sep+v)
		}
		join := rapid.SampledFrom([]string{" ", ", ", "; "}).Draw(rt, "join")
		text := strings.ToUpper(c.Mechanism[:1]) + c.Mechanism[1:] + " " + strings.Join(parts, join)
		got, err := cards.Parse(text)
		if err != nil {
			rt.Fatalf("Parse(%q): %v", text, err)
		}
		if got.Key() != p.Key() {
			rt.Fatalf("Parse(%q).Key() = %s, want %s", text, got.Key(), p.Key())
		}
		again, err := cards.Parse(cards.Render(got))
		if err != nil || again.Key() != got.Key() {
			rt.Fatalf("round trip of %q: %v %s", text, err, again.Key())
		}
		// Only a relative size card can leave its range on the default
		// recipe (e.g. context ×8); any other card applies.
		if _, err := cards.Apply(model.DefaultConfig(), got); err != nil && !(relativeSize[c.Mechanism] && errors.Is(err, cards.ErrOutOfRange)) {
			rt.Fatalf("Apply(%s): %v", got.Key(), err)
		}
	})
}

// relativeSize: the cards that scale or add to one size of the reference.
var relativeSize = map[string]bool{"width": true, "embed-dim": true, "context": true, "batch-size": true,
	"batch-size-sqrt-lr": true, "depth": true, "residual-depth": true, "deep-normed": true}

// sizeRange is each relative card's range of results (its description).
var sizeRange = map[string][2]int{"width": {8, 512}, "embed-dim": {2, 128}, "context": {2, 32},
	"batch-size": {8, 512}, "depth": {0, 6}}

// TestRelativeSizesInvert: on any reference in range, ×2 then ×½ (and a
// layer added then removed) gives the reference back, and ×½ is v/2 in
// integer division; out-of-range results are infeasible, never a panic.
func TestRelativeSizesInvert(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ref := model.DefaultConfig()
		ref.Hidden = rapid.IntRange(1, 600).Draw(rt, "hidden")
		ref.Embed = rapid.IntRange(1, 140).Draw(rt, "embed")
		ref.Context = rapid.IntRange(1, 40).Draw(rt, "context")
		ref.Batch = rapid.IntRange(1, 600).Draw(rt, "batch")
		ref.Layers = rapid.IntRange(0, 8).Draw(rt, "layers")
		card := rapid.SampledFrom([]string{"width", "embed-dim", "context", "batch-size", "depth"}).Draw(rt, "card")
		up, down := "factor=2", "factor=0.5"
		if card == "depth" {
			up, down = "add=1", "add=-1"
		}
		apply := func(c model.Config, edit string) (model.Config, error) {
			p, err := cards.Parse(card + " " + edit)
			if err != nil {
				rt.Fatalf("Parse(%s %s): %v", card, edit, err)
			}
			return cards.Apply(c, p)
		}
		size := func(c model.Config) int {
			return map[string]int{"width": c.Hidden, "embed-dim": c.Embed, "context": c.Context,
				"batch-size": c.Batch, "depth": c.Layers}[card]
		}
		half, err := apply(ref, down)
		if err != nil {
			if !errors.Is(err, cards.ErrOutOfRange) && !errors.Is(err, cards.ErrInvalidConfig) {
				rt.Fatalf("%s %s on %d: %v", card, down, size(ref), err)
			}
		} else if card != "depth" && size(half) != size(ref)/2 {
			rt.Fatalf("%s %s: %d → %d, want %d", card, down, size(ref), size(half), size(ref)/2)
		}
		big, err := apply(ref, up)
		if err != nil {
			if !errors.Is(err, cards.ErrOutOfRange) && !errors.Is(err, cards.ErrInvalidConfig) {
				rt.Fatalf("%s %s on %d: %v", card, up, size(ref), err)
			}
			return
		}
		r := sizeRange[card]
		if size(ref) < r[0] || size(ref) > r[1] || ref.Validate() != nil {
			return // the way back leaves the card's range (or the model's)
		}
		back, err := apply(big, down)
		if err != nil {
			rt.Fatalf("%s %s after %s on %d: %v", card, down, up, size(ref), err)
		}
		if back != ref {
			rt.Fatalf("%s %s then %s: %+v, want %+v", card, up, down, back, ref)
		}
	})
}
