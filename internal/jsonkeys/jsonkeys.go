// Package jsonkeys finds a key that a JSON object repeats: encoding/json
// keeps the last of them silently, so a parser of outside text that must
// not be fooled by a second value (an LLM answer, a subprocess's result
// file) checks first.
package jsonkeys

import (
	"encoding/json"
	"io"
	"strings"
	"unicode"
)

// Repeated reads the JSON text of dec to its end and returns the first key
// that an object repeats at any depth, and true; or "", false when none
// does. With fold, keys are compared as encoding/json matches them to
// struct fields (Unicode case folding: "Loss", "LOSS" and "loss" are one
// key, and "ſeeds" is "seeds"); without it, byte for byte. The text must
// be valid JSON (check json.Valid first: a truncated text may read as a
// clean end). A token error
// of dec is returned as it is. The caller configures dec (UseNumber keeps
// numbers beyond float64 from failing here).
func Repeated(dec *json.Decoder, fold bool) (string, bool, error) {
	type frame struct {
		obj    bool
		keys   map[string]bool
		expect bool // the next token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].expect {
			if k, ok := tok.(string); ok {
				top, f := stack[n-1], k
				if fold {
					f = Fold(k)
				}
				if top.keys[f] {
					return k, true, nil
				}
				top.keys[f] = true
				top.expect = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, keys: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: in an object, a key comes next.
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].expect = true
		}
	}
}

// Fold maps each rune of k to the least rune of its Unicode case-folding
// orbit, so that keys equal under folding map to one string.
func Fold(k string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, k)
}
