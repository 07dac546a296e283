package serve_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBringYourOwnModelRecipes checks that docs/bring-your-own-model.md's
// short recipes use today's interfaces: the verl overrides are keys of
// verl's config as the simulator knows it (a removed key such as
// reward_model.reward_manager fails), the GRPOConfig arguments are
// GRPOConfig's, and the names imported from the adapters exist.
func TestBringYourOwnModelRecipes(t *testing.T) {
	if _, err := os.Stat(python); err != nil {
		t.Skip("the adapters run with Debian's " + python + ", which is missing here")
	}
	b, err := os.ReadFile("../docs/bring-your-own-model.md")
	require.NoError(t, err)
	doc := string(b)

	// verl: the main_ppo block's overrides.
	i := strings.Index(doc, "python3 -m verl.trainer.main_ppo")
	require.GreaterOrEqual(t, i, 0)
	end := strings.Index(doc[i:], "```")
	var overrides []string
	for _, f := range strings.Fields(strings.ReplaceAll(doc[i:i+end], "\\\n", " ")) {
		if strings.Contains(f, "=") {
			overrides = append(overrides, f)
		}
	}
	require.NotEmpty(t, overrides)

	// TRL: GRPOConfig(...)'s keyword arguments and the adapter imports.
	m := regexp.MustCompile(`(?s)args = GRPOConfig\((.*?)\)\s*#`).FindStringSubmatch(doc)
	require.NotNil(t, m, "no GRPOConfig(...) in the TRL recipe")
	literals := map[string]string{}
	for _, kv := range regexp.MustCompile(`(\w+)=("[^"]*"|[^,\s)]+)`).FindAllStringSubmatch(m[1], -1) {
		literals[kv[1]] = kv[2]
	}
	require.Contains(t, literals, "num_generations")
	imp := regexp.MustCompile(`from lm2lm_trl import ([\w, ]+)`).FindStringSubmatch(doc)
	require.NotNil(t, imp)

	sim, err := filepath.Abs("../adapters/python/sim")
	require.NoError(t, err)
	ov, _ := json.Marshal(overrides)
	lit, _ := json.Marshal(literals)
	d, _ := json.Marshal(sim)
	script := fmt.Sprintf(`import json, sys
sys.path.insert(0, %s)
import verl_sim, trl_sim
flat = verl_sim.parse_overrides(json.loads(%q))
assert flat["reward.reward_manager.name"] == "LM2LMRewardManager", flat["reward.reward_manager.name"]
mod = verl_sim.load_file(flat["reward.reward_manager.module.path"])
getattr(mod, flat["reward.reward_manager.name"])
getattr(verl_sim.load_file(flat["reward.custom_reward_function.path"]), flat["reward.custom_reward_function.name"])
print(json.dumps(trl_sim.check_config("grpo", json.loads(%q))))
from lm2lm_trl import %s
`, d, ov, lit, imp[1])
	out := runPython(t, "http://127.0.0.1:9", simToken, script)
	var got struct {
		Config map[string]any `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, "none", got.Config["scale_rewards"])
	require.Equal(t, 8.0, got.Config["num_generations"])
}
