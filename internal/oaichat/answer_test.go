package oaichat

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOneJSONObject(t *testing.T) {
	obj := `{"a": 1, "b": {"c": [1, {"d": 2}]}}`
	for _, c := range []struct {
		in   string
		want string
		err  error
	}{
		{obj, obj, nil},
		{"prose " + obj + " more prose {not json}", obj, nil},
		{"```json\n" + obj + "\n```", obj, nil},
		{obj + obj, "", ErrNotOneObject},
		{`{"a": 1} and {"a": 2}`, "", ErrNotOneObject},
		{`{"a": 1, "a": 2}`, "", ErrDuplicateKey},
		{`{"x": {"a": 1, "a": 2}}`, "", ErrDuplicateKey},
		{`{"x": [{"a": 1}, {"a": 2}]}`, `{"x": [{"a": 1}, {"a": 2}]}`, nil}, // same key in sibling objects
		{`{"a": "{\"a\": 1}"}`, `{"a": "{\"a\": 1}"}`, nil},
		{"nothing", "", ErrNoObject},
		{strings.Repeat("{", 100000), "", nil}, // bounded work, then no object or an error
	} {
		got, err := OneJSONObject(c.in)
		if c.err == nil && c.want == "" {
			require.Error(t, err)
			continue
		}
		require.ErrorIs(t, err, c.err, c.in)
		require.Equal(t, c.want, got)
	}
	_, err := OnlyJSONObject("prose " + obj)
	require.ErrorIs(t, err, ErrNotOneObject)
	_, err = OnlyJSONObject(`{"a": 1`)
	require.ErrorIs(t, err, ErrNoObject)
	got, err := OnlyJSONObject(" \n" + obj + "\n")
	require.NoError(t, err)
	require.Equal(t, obj, got)
}

// FuzzOneJSONObject: whatever the answer, the readers return a valid JSON
// object without repeated keys that occurs in the answer, or a classified
// error; and the returned object reads back as itself.
func FuzzOneJSONObject(f *testing.F) {
	for _, s := range []string{`{"gain": 1}`, `x {"a": {"b": 1}} y`, `{"a":1}{"a":2}`, `{"a":1,"a":2}`,
		`{"a": "}{"} {`, "```json\n{\"k\": [1, 2]}\n```", `{{{{`, `}{"a":1}`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, read := range map[string]func(string) (string, error){"OneJSONObject": OneJSONObject, "OnlyJSONObject": OnlyJSONObject} {
			obj, err := read(s)
			if err != nil {
				if !errors.Is(err, ErrNoObject) && !errors.Is(err, ErrNotOneObject) && !errors.Is(err, ErrDuplicateKey) {
					t.Fatalf("%s(%q): unclassified error %v", name, s, err)
				}
				continue
			}
			if !strings.Contains(s, obj) || !json.Valid([]byte(obj)) || !strings.HasPrefix(obj, "{") {
				t.Fatalf("%s(%q) = %q: not a JSON object of the answer", name, s, obj)
			}
			if err := NoDuplicateKeys(obj); err != nil {
				t.Fatalf("%s(%q) = %q with a repeated key: %v", name, s, obj, err)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(obj), &m); err != nil {
				t.Fatalf("%s(%q) = %q: not an object: %v", name, s, obj, err)
			}
			if again, err := OneJSONObject(obj); err != nil || again != obj {
				t.Fatalf("%s(%q) = %q, which reads back as %q, %v", name, s, obj, again, err)
			}
		}
	})
}
