package cards

import (
	"strings"
	"unicode"

	"github.com/lm2lm/lm2lm/records"
)

// Render writes p in the catalogue's text form: the card name, then its
// parameters as name=value in name order, on one line; a non-empty Text
// follows on the next lines. Names are lower-cased and numbers written in
// the shortest form that round-trips, so Render(p) is canonical:
//
//	lr-warmup-boost factor=2 warmup_frac=0.05
//
// Render does not check p against the catalogue (Check does).
func Render(p records.Proposal) string {
	var b strings.Builder
	b.WriteString(records.CanonicalName(p.Mechanism))
	if len(p.Params) > 0 {
		norm := make(map[string]string, len(p.Params))
		for k, v := range p.Params {
			norm[records.CanonicalName(k)] = records.CanonicalValue(v)
		}
		for _, k := range sortedKeys(norm) {
			b.WriteByte(' ')
			b.WriteString(k)
			b.WriteByte('=')
			b.WriteString(norm[k])
		}
	}
	if t := strings.TrimSpace(p.Text); t != "" {
		b.WriteByte('\n')
		b.WriteString(t)
	}
	return b.String()
}

// Parse reads a proposal in the text form Render writes and checks it
// against the catalogue. The first non-empty line holds the proposal: a
// card name followed by name=value pairs separated by spaces or commas;
// the pairs may also be wrapped as in "lr-scale(factor=2)" or
// "lr-scale{factor=2}" (the form of records.Proposal.Key), and spaces around
// '=' are allowed. Names and enum values are case-insensitive. The
// remaining lines, trimmed, become Proposal.Text. The result is canonical:
// Parse(Render(p)) equals p. Errors wrap builder.ErrInfeasible.
func Parse(text string) (records.Proposal, error) {
	var line, rest string
	s := text
	for {
		l, r, found := strings.Cut(s, "\n")
		if strings.TrimSpace(l) != "" || !found {
			line, rest = l, r
			break
		}
		s = r
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return records.Proposal{}, perr(ErrSyntax, "", "", "empty proposal")
	}
	// Split off the card name: the leading run of name characters.
	end := strings.IndexFunc(line, func(r rune) bool { return !isNameRune(r) })
	if end < 0 {
		end = len(line)
	}
	mech := strings.ToLower(line[:end])
	if mech == "" {
		return records.Proposal{}, perr(ErrSyntax, line, "", "a proposal starts with a card name")
	}
	args := line[end:]
	args = strings.TrimSpace(args)
	if len(args) > 0 && (args[0] == '(' || args[0] == '{') {
		closer := map[byte]byte{'(': ')', '{': '}'}[args[0]]
		if args[len(args)-1] != closer {
			return records.Proposal{}, perr(ErrSyntax, mech, "", "unbalanced %q", args[:1])
		}
		args = args[1 : len(args)-1]
	} else if strings.HasPrefix(args, ":") {
		args = args[1:]
	}
	p := records.Proposal{Mechanism: mech, Text: strings.TrimSpace(rest)}
	for _, f := range splitArgs(args) {
		name, val, ok := strings.Cut(f, "=")
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		if !ok || name == "" || val == "" {
			return records.Proposal{}, perr(ErrSyntax, mech, "", "expected name=value, got %q", records.Excerpt(f))
		}
		if strings.IndexFunc(name, func(r rune) bool { return !isNameRune(r) }) >= 0 {
			return records.Proposal{}, perr(ErrSyntax, mech, "", "bad parameter name %q", records.Excerpt(name))
		}
		name = strings.ToLower(name)
		if p.Params == nil {
			p.Params = map[string]string{}
		}
		if _, dup := p.Params[name]; dup {
			return records.Proposal{}, perr(ErrSyntax, mech, name, "parameter given twice")
		}
		p.Params[name] = val
	}
	return Check(p)
}

// splitArgs splits "a=1, b = 2 c=3" into "a=1", "b=2", "c=3".
func splitArgs(s string) []string {
	// Glue spaces around '=' so that fields are whole pairs.
	var b strings.Builder
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' || unicode.IsSpace(r) })
	var out []string
	for i := 0; i < len(fields); i++ {
		b.Reset()
		b.WriteString(fields[i])
		for (strings.HasSuffix(b.String(), "=") || (i+1 < len(fields) && strings.HasPrefix(fields[i+1], "="))) && i+1 < len(fields) {
			i++
			b.WriteString(fields[i])
		}
		out = append(out, b.String())
	}
	return out
}

func isNameRune(r rune) bool {
	return r == '-' || r == '_' || r == '.' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
}
