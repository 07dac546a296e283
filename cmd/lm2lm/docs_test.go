package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/envconfig"
)

// TestPageConfigParses: the example config of docs/own-environment.md
// parses strictly and validates, and the page names every key of the
// format, so that the page cannot drift from the code.
func TestPageConfigParses(t *testing.T) {
	b, err := os.ReadFile("../../docs/own-environment.md")
	require.NoError(t, err)
	page := string(b)
	_, rest, ok := strings.Cut(page, "```yaml\n")
	require.True(t, ok, "no yaml block")
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	c, err := envconfig.Parse([]byte(block), t.TempDir())
	require.NoError(t, err)
	c = c.Resolve()
	require.NoError(t, c.Validate())
	cards, err := c.Cards()
	require.NoError(t, err)
	require.Len(t, cards, 2)
	require.Len(t, c.Tasks, 3)

	// The commented Slurm and OpenAI sections parse too, uncommented.
	var un []string
	for _, l := range strings.Split(block, "\n") {
		if s := strings.TrimSpace(l); strings.HasPrefix(s, "# ") && strings.Contains(s, ":") && !strings.HasPrefix(s, "# with ") {
			l = strings.Replace(l, "# ", "", 1)
		}
		un = append(un, l)
	}
	full := strings.Join(un, "\n")
	full = strings.Replace(full, "  kind: local ", "  kind: slurm ", 1)
	full = strings.Replace(full, "  kind: embedded ", "  kind: openai ", 1)
	full = strings.Replace(full, "  gres: gpu:1               # --gres for every job; or slot_gres: gpu (→ gpu:<training.slots>)", "  gres: gpu:1", 1)
	c, err = envconfig.Parse([]byte(full), t.TempDir())
	require.NoError(t, err, "%s", full)
	c = c.Resolve()
	require.NoError(t, c.Validate())
	require.Equal(t, "gpu", c.Executor.Slurm.Partition)
	require.Equal(t, "MY_LLM_KEY", c.WorldModel.OpenAI.APIKeyEnv)

	for _, key := range yamlKeys(reflect.TypeFor[envconfig.Config]()) {
		require.True(t, strings.Contains(page, key+":"), "the page does not explain %s", key)
	}
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		keys = append(keys, name)
		ft := f.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == t.PkgPath() {
			keys = append(keys, yamlKeys(ft)...)
		}
	}
	return keys
}
