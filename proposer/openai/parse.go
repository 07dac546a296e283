package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/lm2lm/lm2lm/internal/oaichat"
	"github.com/lm2lm/lm2lm/records"
)

// ParseError is an answer that is not a usable proposal.
type ParseError struct {
	Field  string // the offending field; "" for the whole answer
	Detail string
	Err    error // one of the package's parse errors
}

// Error implements error.
func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *ParseError) Unwrap() error { return e.Err }

// ParseProposal reads a proposal from an LLM answer: the one balanced JSON
// object of content (prose and code fences around it are ignored; a second
// object, or a repeated key, is ErrAmbiguous: see oaichat.OneJSONObject)
// with
//
//   - "mechanism": required, a non-empty string;
//   - "params": optional object whose values are strings, numbers (kept as
//     written) or booleans;
//   - "rationale": optional string (ignored here; the caller keeps the whole
//     answer as Proposal.Text).
//
// With a non-empty catalogue the mechanism must name a card (case and
// surrounding space ignored) and every parameter of the card must be given
// one of its Choices (compared as records.Proposal.Key compares values); no
// other parameter may appear. The result then carries the card's spelling
// of the mechanism, parameter names and choices. The no-change proposal
// ("none") is accepted, without parameters, when allowNoChange is set. The
// result passes records.Proposal.Validate. Errors are *ParseError.
func ParseProposal(content string, catalogue []records.Card, allowNoChange bool) (records.Proposal, error) {
	obj, err := oaichat.OneJSONObject(content)
	if err != nil {
		sentinel, detail := ErrAmbiguous, err.Error()
		if errors.Is(err, oaichat.ErrNoObject) {
			sentinel, detail = ErrNoJSON, "no balanced, valid JSON object"
		}
		if strings.TrimSpace(content) == "" {
			detail = "empty answer"
		}
		return records.Proposal{}, &ParseError{Detail: detail, Err: sentinel}
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader([]byte(obj)))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return records.Proposal{}, &ParseError{Detail: err.Error(), Err: ErrNoJSON}
	}
	var mech string
	if raw, ok := fields["mechanism"]; !ok || json.Unmarshal(raw, &mech) != nil || strings.TrimSpace(mech) == "" {
		return records.Proposal{}, &ParseError{Field: "mechanism", Detail: "want a non-empty string", Err: ErrBadField}
	}
	p := records.Proposal{Mechanism: strings.TrimSpace(mech)}
	if raw, ok := fields["params"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		var params map[string]json.RawMessage
		if err := json.Unmarshal(raw, &params); err != nil {
			return records.Proposal{}, &ParseError{Field: "params", Detail: "want an object", Err: ErrBadField}
		}
		if len(params) > 0 {
			p.Params = make(map[string]string, len(params))
		}
		for k, v := range params {
			s, err := scalar(v)
			if err != nil {
				return records.Proposal{}, &ParseError{Field: "params." + k, Detail: err.Error(), Err: ErrBadField}
			}
			p.Params[strings.TrimSpace(k)] = s
		}
	}
	if raw, ok := fields["rationale"]; ok && string(bytes.TrimSpace(raw)) != "null" {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return records.Proposal{}, &ParseError{Field: "rationale", Detail: "want a string", Err: ErrBadField}
		}
	}
	if p.IsNoChange() {
		if !allowNoChange {
			return records.Proposal{}, &ParseError{Field: "mechanism", Detail: "the no-change proposal is not allowed", Err: ErrNotInCatalogue}
		}
		return records.Proposal{Mechanism: records.NoChange}, nil
	}
	if len(catalogue) > 0 {
		var err error
		if p, err = inCatalogue(p, catalogue); err != nil {
			return records.Proposal{}, err
		}
	}
	if err := p.Validate(); err != nil {
		return records.Proposal{}, &ParseError{Detail: err.Error(), Err: ErrInvalidProposal}
	}
	return p, nil
}

// scalar renders a JSON string, number or boolean as a parameter value.
func scalar(raw json.RawMessage) (string, error) {
	t := string(bytes.TrimSpace(raw))
	switch {
	case strings.HasPrefix(t, `"`):
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return strings.TrimSpace(s), nil
	case t == "true" || t == "false":
		return t, nil
	case t == "null" || strings.HasPrefix(t, "{") || strings.HasPrefix(t, "["):
		return "", fmt.Errorf("want a string, number or boolean, got %s", oaichat.Truncate(t, 40))
	default:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil {
			return "", err
		}
		return n.String(), nil
	}
}

func canonMech(s string) string { return records.Proposal{Mechanism: s}.Key() }

func sameValue(a, b string) bool {
	return records.Proposal{Mechanism: "v", Params: map[string]string{"v": a}}.Key() ==
		records.Proposal{Mechanism: "v", Params: map[string]string{"v": b}}.Key()
}

func inCatalogue(p records.Proposal, catalogue []records.Card) (records.Proposal, error) {
	want := canonMech(p.Mechanism)
	for _, c := range catalogue {
		if canonMech(c.Mechanism) != want {
			continue
		}
		out := records.Proposal{Mechanism: c.Mechanism}
		if len(c.Params) > 0 {
			out.Params = make(map[string]string, len(c.Params))
		}
		used := map[string]bool{}
		names := make([]string, 0, len(p.Params))
		for k := range p.Params {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, ps := range c.Params {
			var v string
			found := false
			for _, k := range names {
				if !used[k] && strings.EqualFold(k, strings.TrimSpace(ps.Name)) {
					v, found = p.Params[k], true
					used[k] = true
					break
				}
			}
			if !found {
				return records.Proposal{}, &ParseError{Field: "params." + ps.Name, Detail: "missing parameter of card " + c.Mechanism, Err: ErrNotInCatalogue}
			}
			choice := ""
			for _, ch := range ps.Choices {
				if sameValue(ch, v) {
					choice = ch
					break
				}
			}
			if choice == "" {
				return records.Proposal{}, &ParseError{Field: "params." + ps.Name, Err: ErrNotInCatalogue,
					Detail: fmt.Sprintf("%q is not one of %q", oaichat.Truncate(v, 40), ps.Choices)}
			}
			out.Params[ps.Name] = choice
		}
		var extra []string
		for _, k := range names {
			if !used[k] {
				extra = append(extra, k)
			}
		}
		if len(extra) > 0 {
			return records.Proposal{}, &ParseError{Field: "params." + extra[0], Detail: "not a parameter of card " + c.Mechanism, Err: ErrNotInCatalogue}
		}
		return out, nil
	}
	return records.Proposal{}, &ParseError{Field: "mechanism", Detail: fmt.Sprintf("%q is not a card", oaichat.Truncate(p.Mechanism, 40)), Err: ErrNotInCatalogue}
}
