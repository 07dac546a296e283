package records

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// NoChange is the mechanism direction of a proposal that changes nothing
// (METHOD.md §1 Reward 2: such a proposal earns the no-change reward).
const NoChange = "none"

// FreeForm is the reserved mechanism of a free-form proposal: a change
// outside any catalogue, described by its Text alone (METHOD.md §1 Known
// weaknesses: the paper's action space is closed). Such a proposal has no
// Params, its Text must not be empty, and its canonical key comes from its
// normalised Text (see Key). Only a builder that implements proposals as
// code (builder/overlay) can run one; the catalogue stays the default.
// All free-form proposals share this one mechanism direction for the
// diversity bonus (library choice: there is no card to name the direction,
// and counting each wording as a direction of its own would reward
// rewording).
const FreeForm = "free_form"

// Proposal is a change to a training recipe: the a of METHOD.md §1
// Vocabulary. Mechanism is the mechanism direction (the card it
// instantiates, e.g. "lr-scale"); Params are its structured parameters by
// name; Text is free text (a rationale or an LLM's wording) that never takes
// part in the canonical key and must be treated as data, never as code.
type Proposal struct {
	Mechanism string            `json:"mechanism"`
	Params    map[string]string `json:"params,omitempty"`
	Text      string            `json:"text,omitempty"`
}

// IsNoChange reports whether p is the no-change proposal.
func (p Proposal) IsNoChange() bool { return CanonicalName(p.Mechanism) == NoChange }

// IsFreeForm reports whether p is a free-form proposal (mechanism FreeForm).
func (p Proposal) IsFreeForm() bool { return CanonicalName(p.Mechanism) == FreeForm }

// NormalisedText is the form of a free-form proposal's Text that its key
// is derived from: CanonicalName of the text (trimmed, lower-cased, inner
// runs of white space collapsed to one space), so that rewrapping or
// recasing a text does not make a new proposal.
func (p Proposal) NormalisedText() string { return CanonicalName(p.Text) }

// textKey is the key part of a free-form proposal's text: "sha256:" and
// the first 16 hex digits of the SHA-256 of its normalised text.
func (p Proposal) textKey() string {
	h := sha256.Sum256([]byte(p.NormalisedText()))
	return "sha256:" + hex.EncodeToString(h[:8])
}

// Validate reports the first problem with p, wrapping ErrInvalid.
func (p Proposal) Validate() error {
	if strings.TrimSpace(p.Mechanism) == "" {
		return fmt.Errorf("%w: proposal has an empty mechanism", ErrInvalid)
	}
	if p.IsFreeForm() {
		switch {
		case p.NormalisedText() == "":
			return fmt.Errorf("%w: free-form proposal has an empty text", ErrInvalid)
		case len(p.Params) > 0:
			return fmt.Errorf("%w: free-form proposal has parameters; its text is the whole change", ErrInvalid)
		}
	}
	seen := make(map[string]string, len(p.Params))
	for k, v := range p.Params {
		if strings.TrimSpace(k) == "" {
			return fmt.Errorf("%w: proposal %s: empty parameter name", ErrInvalid, Excerpt(p.Mechanism))
		}
		if other, dup := seen[CanonicalName(k)]; dup {
			return fmt.Errorf("%w: proposal %s: parameter names %q and %q are the same name", ErrInvalid, Excerpt(p.Mechanism), Excerpt(other), Excerpt(k))
		}
		seen[CanonicalName(k)] = k
		// A range error (an overflow such as "1e999" or "0x1p99999")
		// parses to ±Inf: out of range is not finite either.
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); (err == nil || errors.Is(err, strconv.ErrRange)) && !stat.Finite(f) {
			return fmt.Errorf("%w: proposal %s: parameter %s = %q is not finite", ErrInvalid, Excerpt(p.Mechanism), Excerpt(k), Excerpt(v))
		}
	}
	return nil
}

// Key returns the canonical key of p: equal for the same change however its
// parameters are ordered or formatted, different for different changes. It
// is used to detect duplicates within a group (METHOD.md §1 Reward 3) and to
// skip runs that already have a result.
//
// Canonicalisation: the mechanism and parameter names are trimmed and
// lower-cased; values that parse as numbers are written in the shortest
// form that round-trips a float64 ("0.0010", "1e-3" and "+.001" are one
// value); other values are trimmed and lower-cased with inner runs of
// white space collapsed. Parameters are sorted by name. A mechanism, name
// or value that contains one of the delimiters {}=," is written as a Go
// quoted string, so the key parses back unambiguously and distinct changes
// never share a key. Text is ignored, except in a free-form proposal
// (mechanism FreeForm), whose key is "free_form{text=sha256:…}" with the
// first 16 hex digits of the SHA-256 of NormalisedText: the text is the
// change. The result looks like "lr-scale{factor=2}" and is safe to print.
func (p Proposal) Key() string {
	var b strings.Builder
	b.WriteString(quoteKeyPart(CanonicalName(p.Mechanism)))
	b.WriteByte('{')
	// Sorting pairs (not names) keeps the key deterministic even for an
	// invalid proposal whose names collide after canonicalisation.
	pairs := make([][2]string, 0, len(p.Params))
	for k, v := range p.Params {
		pairs = append(pairs, [2]string{quoteKeyPart(CanonicalName(k)), quoteKeyPart(CanonicalValue(v))})
	}
	if p.IsFreeForm() {
		pairs = append(pairs, [2]string{"text", p.textKey()})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	for i, kv := range pairs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
	}
	b.WriteByte('}')
	return b.String()
}

// CanonicalName is the canonical form of a mechanism or parameter name in
// Key: trimmed, lower-cased, inner runs of white space collapsed to one
// space.
func CanonicalName(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// CanonicalValue is the canonical form of a parameter value in Key: a value
// that parses as a number is written by FormatNumber, any other value as
// CanonicalName writes it.
func CanonicalValue(v string) string {
	t := strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		return FormatNumber(f)
	}
	return CanonicalName(t)
}

// FormatNumber is the canonical number format of the library: the shortest
// decimal form that round-trips a float64 (strconv's 'g' with precision
// −1), with −0 written as 0. Keys, catalogue choices, the embedded world
// model's features and rendered proposals all write numbers with it, so
// "0.0010", "1e-3" and "+.001" are one value everywhere.
func FormatNumber(x float64) string {
	if x == 0 {
		x = 0 // fold -0 into 0
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// quoteKeyPart quotes a name or value that holds one of the key's
// delimiters, so that distinct parameter sets never collide.
func quoteKeyPart(s string) string {
	if strings.ContainsAny(s, "{}=,\"") {
		return strconv.Quote(s)
	}
	return s
}

// MaxExcerpt is how many bytes of an outside string (a proposal's
// mechanism, parameter or key, a task ID, a model's answer) an error
// message quotes at most. Library choice: enough to recognise the value,
// while a megabyte of hostile input cannot make a megabyte of error text.
const MaxExcerpt = 64

// MaxErrorExcerpt bounds ErrorExcerpt (library choice: 1 KiB holds an
// error chain's first line whole, with a URL and a server's message, while
// a reply still cannot grow without bound).
const MaxErrorExcerpt = 1 << 10

// ErrorExcerpt returns an error's text for a reply, a status or a log line:
// its first line (an error chain's cause is on it) whole when it fits in
// MaxErrorExcerpt bytes, else cut on a rune boundary and marked as Excerpt
// marks it, followed by how many more lines there were. The library's
// errors quote outside input through Excerpt already, so what this keeps
// is the library's own words and the cause.
func ErrorExcerpt(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	first, rest, more := strings.Cut(s, "\n")
	if len(first) > MaxErrorExcerpt {
		cut := MaxErrorExcerpt
		for cut > 0 && first[cut]&0xC0 == 0x80 {
			cut--
		}
		first = first[:cut] + "…(" + strconv.Itoa(len(first)) + " bytes)"
	}
	if more {
		first += " (+" + strconv.Itoa(strings.Count(rest, "\n")+1) + " more lines)"
	}
	return first
}

// Excerpt returns s when it is at most MaxExcerpt bytes long, otherwise its
// first MaxExcerpt bytes (cut on a rune boundary) followed by "…" and the
// full length. Every error of the library that quotes outside input quotes
// it through Excerpt.
func Excerpt[S ~string](s S) string {
	if len(s) <= MaxExcerpt {
		return string(s)
	}
	cut := MaxExcerpt
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return string(s[:cut]) + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
