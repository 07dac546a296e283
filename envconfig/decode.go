package envconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// MaxFileBytes bounds a config or catalogue file. Library choice: a
// hand-written environment of hundreds of tasks and cards is a few tens of
// KiB; a larger file is a mistake.
const MaxFileBytes = 4 << 20

// decodeStrict decodes one YAML document from data into out (a pointer to a
// struct) strictly, and names the key path of the first problem:
//
//   - yaml.v3 parses the document into its node tree (comments allowed);
//   - a walk over the nodes, following out's yaml tags, refuses unknown
//     keys, keys given twice, anchors and aliases, and values of the wrong
//     type, each as an *Error naming its path (e.g. executor.slurm.gres);
//   - a final yaml.v3 decode with KnownFields(true) fills out, so the
//     library's own strict decoder has the last word.
func decodeStrict(data []byte, out any) error {
	if len(data) > MaxFileBytes {
		return &Error{Kind: ErrSyntax, Msg: fmt.Sprintf("file has %d bytes, want ≤ %d", len(data), MaxFileBytes)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return &Error{Kind: ErrSyntax, Msg: "empty file"}
		}
		return &Error{Kind: ErrSyntax, Msg: err.Error()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return &Error{Kind: ErrSyntax, Msg: "more than one YAML document"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) != 1 {
			return &Error{Kind: ErrSyntax, Msg: "empty document"}
		}
		root = root.Content[0]
	}
	v := reflect.ValueOf(out).Elem()
	if err := walk(root, v.Type(), ""); err != nil {
		return err
	}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(out); err != nil {
		return &Error{Kind: ErrSyntax, Msg: err.Error()}
	}
	return nil
}

// join appends a key to a path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// yamlFields maps the yaml keys of struct type t to their field types.
func yamlFields(t reflect.Type) (map[string]reflect.Type, []string) {
	m := map[string]reflect.Type{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
		names = append(names, name)
	}
	sort.Strings(names)
	return m, names
}

// kindName says what a node of type t must be.
func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "a mapping"
	case reflect.Slice:
		return "a list"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Uint64:
		if t == durationType {
			return "a duration such as 90s or 2h"
		}
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return "a value"
}

// walk checks node n against type t at path.
func walk(n *yaml.Node, t reflect.Type, path string) error {
	at := func(kind error, format string, args ...any) error {
		return &Error{Path: path, Line: n.Line, Kind: kind, Msg: fmt.Sprintf(format, args...)}
	}
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return at(ErrSyntax, "anchors and aliases are not supported")
	}
	if n.Tag == "!!merge" {
		return at(ErrSyntax, "merge keys are not supported")
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" && t.Kind() != reflect.Interface {
		return at(ErrType, "empty value, want %s (leave the key out for its default)", kindName(t))
	}
	switch {
	case t.Kind() == reflect.Struct && t != durationType, t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return at(ErrType, "want %s", kindName(t))
		}
		return walkMapping(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return at(ErrType, "want %s", kindName(t))
		}
		for i, c := range n.Content {
			if err := walk(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case t.Kind() == reflect.Interface:
		// Free-form values (a recipe's): any YAML without aliases, whose
		// mapping keys are strings, so that it encodes as JSON.
		return walkAny(n, path)
	}
	if n.Kind != yaml.ScalarNode {
		return at(ErrType, "want %s", kindName(t))
	}
	if t.Kind() != reflect.String && t != durationType && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		return at(ErrType, "want %s, got the quoted string %q", kindName(t), excerpt(n.Value))
	}
	p := reflect.New(t)
	if err := n.Decode(p.Interface()); err != nil {
		return at(ErrType, "want %s, got %q", kindName(t), excerpt(n.Value))
	}
	return nil
}

// walkMapping checks the mapping node n against t, a struct (every key
// one of its yamlFields) or a map (keys of any name, not null), at path:
// every key a plain string given once, no merge key, and every value
// checked against its field's or the map's element type.
func walkMapping(n *yaml.Node, t reflect.Type, path string) error {
	isStruct := t.Kind() == reflect.Struct
	var fields map[string]reflect.Type
	var names []string
	if isStruct {
		fields, names = yamlFields(t)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || (!isStruct && k.Tag == "!!null") {
			return &Error{Path: path, Line: n.Line, Kind: ErrSyntax, Msg: "a key must be a plain string"}
		}
		kp := join(path, k.Value)
		if k.Value == "<<" {
			return &Error{Path: kp, Line: k.Line, Kind: ErrSyntax, Msg: "merge keys are not supported"}
		}
		if line, dup := seen[k.Value]; dup {
			return &Error{Path: kp, Line: k.Line, Kind: ErrDuplicateKey, Msg: fmt.Sprintf("key given twice (first at line %d)", line)}
		}
		seen[k.Value] = k.Line
		var vt reflect.Type
		if isStruct {
			ft, ok := fields[k.Value]
			if !ok {
				msg := "unknown key; known keys: " + strings.Join(names, ", ")
				if hint, ok := unknownHints[k.Value]; ok {
					msg = "unknown key; " + hint
				}
				return &Error{Path: kp, Line: k.Line, Kind: ErrUnknownKey, Msg: msg}
			}
			vt = ft
		} else {
			vt = t.Elem()
		}
		if err := walk(val, vt, kp); err != nil {
			return err
		}
	}
	return nil
}

// walkAny checks a free-form value.
func walkAny(n *yaml.Node, path string) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return &Error{Path: path, Line: n.Line, Kind: ErrSyntax, Msg: "anchors and aliases are not supported"}
	}
	switch n.Kind {
	case yaml.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			kp := join(path, k.Value)
			if k.Kind != yaml.ScalarNode || k.Tag == "!!null" || k.Value == "<<" {
				return &Error{Path: kp, Line: k.Line, Kind: ErrSyntax, Msg: "a key must be a plain string"}
			}
			if line, dup := seen[k.Value]; dup {
				return &Error{Path: kp, Line: k.Line, Kind: ErrDuplicateKey, Msg: fmt.Sprintf("key given twice (first at line %d)", line)}
			}
			seen[k.Value] = k.Line
			if err := walkAny(n.Content[i+1], kp); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := walkAny(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return &Error{Path: path, Line: n.Line, Kind: ErrType, Msg: err.Error()}
		}
	}
	return nil
}

// unknownHints explain keys people are likely to try.
var unknownHints = map[string]string{
	"api_key": "the file never holds a key: name the environment variable that holds it in api_key_env",
	"token":   "the file never holds a token: give token_file, or set LM2LM_TOKEN",
}

func excerpt(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
