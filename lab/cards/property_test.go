package cards_test

import (
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
		if _, err := cards.Apply(model.DefaultConfig(), got); err != nil {
			rt.Fatalf("Apply(%s): %v", got.Key(), err)
		}
	})
}
