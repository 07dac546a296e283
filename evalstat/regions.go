package evalstat

import (
	"fmt"
	"math/rand/v2"
)

// Regions returns the distinct strata of cells (their regions) in order
// of first appearance.
func Regions(cells []Cell) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range cells {
		if !seen[c.Stratum] {
			seen[c.Stratum] = true
			out = append(out, c.Stratum)
		}
	}
	return out
}

// InRegion returns the cells whose Stratum is region, in order.
func InRegion(cells []Cell, region string) []Cell {
	var out []Cell
	for _, c := range cells {
		if c.Stratum == region {
			out = append(out, c)
		}
	}
	return out
}

// SummarizeRegions summarises each region of cells apart (Regions order),
// each Summary with its Region set; the regions' replicates are drawn
// from rng in turn, so the result is deterministic for rng and the order
// of cells. Errors are Summarize's, naming the region.
func SummarizeRegions(cfg Config, method string, cells []Cell, rng *rand.Rand) ([]Summary, error) {
	if err := check(method, cells); err != nil {
		return nil, err
	}
	var out []Summary
	for _, r := range Regions(cells) {
		s, err := Summarize(cfg, method, InRegion(cells, r), rng)
		if err != nil {
			return nil, fmt.Errorf("region %q: %w", r, err)
		}
		s.Region = r
		out = append(out, s)
	}
	return out, nil
}

// CompareRegions compares method a against b on each region of a's cells
// apart (Regions(a) order, each Paired with its Region set), pairing
// cells of that region only; rng is used as in SummarizeRegions. Errors
// are Compare's, naming the region.
func CompareRegions(cfg Config, method string, a []Cell, against string, b []Cell, rng *rand.Rand) ([]Paired, error) {
	if err := check(method, a); err != nil {
		return nil, err
	}
	var out []Paired
	for _, r := range Regions(a) {
		p, err := Compare(cfg, method, InRegion(a, r), against, InRegion(b, r), rng)
		if err != nil {
			return nil, fmt.Errorf("region %q: %w", r, err)
		}
		p.Region = r
		out = append(out, p)
	}
	return out, nil
}
