package jsonkeys

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRepeated(t *testing.T) {
	for _, c := range []struct {
		js   string
		fold bool
		key  string
		rep  bool
	}{
		{`{"a":1,"b":2}`, false, "", false},
		{`{"a":1,"a":2}`, false, "a", true},
		{`{"a":{"b":1,"b":2}}`, false, "b", true},
		{`[{"a":1},{"a":2}]`, false, "", false},            // one key per object
		{`{"a":"a","b":["a","a"]}`, false, "", false},      // values are not keys
		{`{"Loss":1,"loss":2}`, false, "", false},          // byte for byte
		{`{"Loss":1,"loss":2}`, true, "loss", true},        // folded
		{`{"seeds":[1],"ſeeds":[2]}`, true, "ſeeds", true}, // ſ folds to s
		{`{"x":{"a":1},"y":{"a":2}}`, false, "", false},
	} {
		key, rep, err := Repeated(json.NewDecoder(strings.NewReader(c.js)), c.fold)
		if err != nil || key != c.key || rep != c.rep {
			t.Errorf("Repeated(%s, fold %v) = %q, %v, %v; want %q, %v, nil", c.js, c.fold, key, rep, err, c.key, c.rep)
		}
	}
	if _, _, err := Repeated(json.NewDecoder(strings.NewReader(`{"a" 1}`)), false); err == nil {
		t.Error("a syntax error: no error")
	}
}
