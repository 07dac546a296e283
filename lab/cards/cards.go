package cards

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/lab/model"
	"github.com/lm2lm/lm2lm/records"
)

// Parameter kinds of records.ParamSpec.Kind.
const (
	Float = "float"
	Int   = "int"
	Enum  = "enum"
)

// Sentinel errors. Each wraps builder.ErrInfeasible, so errors.Is(err,
// builder.ErrInfeasible) holds for every proposal the catalogue rejects.
var (
	ErrSyntax       = fmt.Errorf("cards: malformed proposal: %w", builder.ErrInfeasible)
	ErrUnknownCard  = fmt.Errorf("cards: unknown card: %w", builder.ErrInfeasible)
	ErrUnknownParam = fmt.Errorf("cards: unknown parameter: %w", builder.ErrInfeasible)
	ErrMissingParam = fmt.Errorf("cards: missing parameter: %w", builder.ErrInfeasible)
	ErrBadValue     = fmt.Errorf("cards: bad parameter value: %w", builder.ErrInfeasible)
	ErrOutOfRange   = fmt.Errorf("cards: parameter out of range: %w", builder.ErrInfeasible)
	// ErrInvalidConfig: the card applied cleanly but the resulting
	// configuration is invalid for the model (e.g. a context too short for
	// the objective); wraps model.ErrInvalidConfig's message.
	ErrInvalidConfig = fmt.Errorf("cards: resulting configuration invalid: %w", builder.ErrInfeasible)
)

// ProposalError is the reason a proposal is infeasible. Err is one of the
// package's sentinels (each wraps builder.ErrInfeasible).
type ProposalError struct {
	Mechanism string // the card named, as written
	Param     string // the parameter at fault; "" when none
	Reason    string // human-readable reason
	Err       error
}

// Error returns "cards: <card> [<param>]: <reason>", quoting the card and
// the parameter, as written, through records.Excerpt (the reason quotes
// outside values the same way), so that a megabyte of proposal text makes
// an error of at most a few hundred bytes.
func (e *ProposalError) Error() string {
	s := "cards: " + records.Excerpt(e.Mechanism)
	if e.Param != "" {
		s += " " + records.Excerpt(e.Param)
	}
	return s + ": " + e.Reason
}

// Unwrap returns the sentinel.
func (e *ProposalError) Unwrap() error { return e.Err }

func perr(sentinel error, mech, param, format string, args ...any) error {
	return &ProposalError{Mechanism: mech, Param: param, Reason: fmt.Sprintf(format, args...), Err: sentinel}
}

// values holds a checked proposal's parameters.
type values struct {
	num map[string]float64
	str map[string]string
}

func (v values) f(name string) float64 { return v.num[name] }
func (v values) i(name string) int     { return int(v.num[name]) }
func (v values) s(name string) string  { return v.str[name] }

// def is a card with its edit.
type def struct {
	card  records.Card
	apply func(c *model.Config, v values) error // an error is a *ProposalError without Mechanism
}

var (
	catalogue = buildCatalogue()
	byName    = func() map[string]*def {
		m := make(map[string]*def, len(catalogue))
		for i := range catalogue {
			m[catalogue[i].card.Mechanism] = &catalogue[i]
		}
		return m
	}()
)

// Catalogue returns the mechanism cards as data, in a fixed order, for
// proposers and prompts. The no-change proposal (records.NoChange) is
// accepted by Parse, Check and Apply but is not a card. The caller owns the
// returned slice.
func Catalogue() []records.Card {
	out := make([]records.Card, len(catalogue))
	for i, d := range catalogue {
		out[i] = cloneCard(d.card)
	}
	return out
}

// Lookup returns the card with the given mechanism name (case-insensitive).
func Lookup(mechanism string) (records.Card, bool) {
	d, ok := byName[records.CanonicalName(mechanism)]
	if !ok {
		return records.Card{}, false
	}
	return cloneCard(d.card), true
}

func cloneCard(c records.Card) records.Card {
	ps := make([]records.ParamSpec, len(c.Params))
	for i, p := range c.Params {
		p.Choices = append([]string(nil), p.Choices...)
		ps[i] = p
	}
	c.Params = ps
	if c.Prior != nil {
		pr := *c.Prior
		c.Prior = &pr
	}
	return c
}

// Representative returns the card's representative proposal: the first
// choice of every parameter (choices are listed with the most typical
// first).
func Representative(c records.Card) records.Proposal {
	p := records.Proposal{Mechanism: c.Mechanism}
	if len(c.Params) > 0 {
		p.Params = make(map[string]string, len(c.Params))
		for _, ps := range c.Params {
			p.Params[ps.Name] = ps.Choices[0]
		}
	}
	return p
}

// Proposals returns every combination of the card's parameter choices, in
// a fixed order (the first parameter varies slowest).
func Proposals(c records.Card) []records.Proposal {
	out := []records.Proposal{{Mechanism: c.Mechanism}}
	for _, ps := range c.Params {
		var next []records.Proposal
		for _, p := range out {
			for _, ch := range ps.Choices {
				q := records.Proposal{Mechanism: c.Mechanism, Params: make(map[string]string, len(p.Params)+1)}
				for k, v := range p.Params {
					q.Params[k] = v
				}
				q.Params[ps.Name] = ch
				next = append(next, q)
			}
		}
		out = next
	}
	return out
}

// All returns every proposal of the catalogue cat: each card's
// Proposals, in card order. It is the whole action space of a proposer
// over cat.
func All(cat []records.Card) []records.Proposal {
	var out []records.Proposal
	for _, c := range cat {
		out = append(out, Proposals(c)...)
	}
	return out
}

// Check validates p against the catalogue and returns it in canonical form
// (lower-case names, canonical number formatting, Text kept). The error
// wraps builder.ErrInfeasible and one of the package's sentinels.
func Check(p records.Proposal) (records.Proposal, error) {
	q, _, err := check(p)
	return q, err
}

func check(p records.Proposal) (records.Proposal, values, error) {
	mech := records.CanonicalName(p.Mechanism)
	v := values{num: map[string]float64{}, str: map[string]string{}}
	if mech == records.NoChange {
		if len(p.Params) > 0 {
			return p, v, perr(ErrUnknownParam, mech, "", "the no-change proposal takes no parameters")
		}
		return records.Proposal{Mechanism: records.NoChange, Text: p.Text}, v, nil
	}
	if mech == "" {
		return p, v, perr(ErrSyntax, p.Mechanism, "", "empty card name")
	}
	d, ok := byName[mech]
	if !ok {
		return p, v, perr(ErrUnknownCard, mech, "", "no such card (see the catalogue)")
	}
	specs := make(map[string]records.ParamSpec, len(d.card.Params))
	for _, ps := range d.card.Params {
		specs[ps.Name] = ps
	}
	got := make(map[string]string, len(p.Params))
	for k, raw := range p.Params {
		name := records.CanonicalName(k)
		if _, dup := got[name]; dup {
			return p, v, perr(ErrSyntax, mech, name, "parameter given twice")
		}
		ps, ok := specs[name]
		if !ok {
			return p, v, perr(ErrUnknownParam, mech, name, "card has no such parameter (has %s)", paramNames(d.card))
		}
		val, err := checkValue(mech, ps, raw, v)
		if err != nil {
			return p, v, err
		}
		got[name] = val
	}
	for _, ps := range d.card.Params {
		if _, ok := got[ps.Name]; !ok {
			return p, v, perr(ErrMissingParam, mech, ps.Name, "required (%s)", describeRange(ps))
		}
	}
	q := records.Proposal{Mechanism: mech, Text: p.Text}
	if len(got) > 0 {
		q.Params = got
	}
	return q, v, nil
}

func checkValue(mech string, ps records.ParamSpec, raw string, v values) (string, error) {
	t := strings.TrimSpace(raw)
	switch ps.Kind {
	case Enum:
		e := records.CanonicalName(t)
		for _, c := range ps.Choices {
			if c == e {
				v.str[ps.Name] = e
				return e, nil
			}
		}
		return "", perr(ErrOutOfRange, mech, ps.Name, "%q is not one of %s", records.Excerpt(t), strings.Join(ps.Choices, ", "))
	case Int, Float:
		x, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return "", perr(ErrBadValue, mech, ps.Name, "%q is not a finite number", records.Excerpt(t))
		}
		if ps.Kind == Int && x != math.Trunc(x) {
			return "", perr(ErrBadValue, mech, ps.Name, "%q is not an integer", records.Excerpt(t))
		}
		if x < ps.Min || x > ps.Max {
			return "", perr(ErrOutOfRange, mech, ps.Name, "%s outside %s", records.Excerpt(t), describeRange(ps))
		}
		if x == 0 {
			x = 0 // fold −0
		}
		v.num[ps.Name] = x
		return records.FormatNumber(x), nil
	}
	panic("cards: unknown parameter kind " + ps.Kind)
}

func describeRange(ps records.ParamSpec) string {
	if ps.Kind == Enum {
		return "one of " + strings.Join(ps.Choices, ", ")
	}
	return fmt.Sprintf("%s in [%s, %s]", ps.Kind, records.FormatNumber(ps.Min), records.FormatNumber(ps.Max))
}

func paramNames(c records.Card) string {
	var ns []string
	for _, p := range c.Params {
		ns = append(ns, p.Name)
	}
	if len(ns) == 0 {
		return "none"
	}
	return strings.Join(ns, ", ")
}

// Apply returns ref edited by p: the training configuration a proposal
// stands for, relative to a task's reference configuration. The no-change
// proposal returns ref unchanged. The size cards are relative to ref
// (width factor=2 doubles ref's hidden width, depth add=-1 removes a
// layer); a result outside the card's range is ErrOutOfRange. Infeasible
// proposals, and proposals whose result fails model.Config.Validate,
// return an error wrapping builder.ErrInfeasible with the reason.
func Apply(ref model.Config, p records.Proposal) (model.Config, error) {
	q, v, err := check(p)
	if err != nil {
		return ref, err
	}
	cfg := ref
	if q.Mechanism != records.NoChange {
		if err := byName[q.Mechanism].apply(&cfg, v); err != nil {
			var pe *ProposalError
			if errors.As(err, &pe) {
				pe.Mechanism = q.Mechanism
			}
			return ref, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return ref, &ProposalError{Mechanism: q.Mechanism, Reason: err.Error(), Err: errors.Join(ErrInvalidConfig, err)}
	}
	return cfg, nil
}

// Mechanisms returns the card names in catalogue order.
func Mechanisms() []string {
	out := make([]string, len(catalogue))
	for i, d := range catalogue {
		out[i] = d.card.Mechanism
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
