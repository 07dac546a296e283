package proposer

import (
	"fmt"
	"strconv"

	"github.com/lm2lm/lm2lm/records"
)

// SyntheticCatalogue returns n cards "card-00", "card-01", … where card i
// has i mod 4 parameters and parameter j of card i has 2 + (i+j) mod 4
// choices, numeric for even j and enumerated for odd j. It exercises every
// shape the policy supports: cards without parameters, several parameters,
// numeric and enum choices.
func SyntheticCatalogue(n int) []records.Card {
	cat := make([]records.Card, n)
	for i := range cat {
		c := records.Card{Mechanism: fmt.Sprintf("card-%02d", i), Description: fmt.Sprintf("synthetic card %d", i)}
		for j := range i % 4 {
			ps := records.ParamSpec{Name: fmt.Sprintf("p%d", j), Kind: "enum"}
			if j%2 == 0 {
				ps.Kind = "float"
			}
			for k := range 2 + (i+j)%4 {
				if j%2 == 0 {
					ps.Choices = append(ps.Choices, strconv.FormatFloat(0.5*float64(k+1), 'g', -1, 64))
				} else {
					ps.Choices = append(ps.Choices, string(rune('a'+k)))
				}
			}
			c.Params = append(c.Params, ps)
		}
		cat[i] = c
	}
	return cat
}
