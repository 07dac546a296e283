package envconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/lm2lm/lm2lm/builder"
	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/records"
	rwmopenai "github.com/lm2lm/lm2lm/rwm/openai"
)

// Limits of Validate. Library choices: generous for a team's own
// environment, small enough that a typo (an extra zero) is caught before it
// pays for runs.
const (
	MaxSlots       = 4096
	MaxAttempts    = 10
	MaxSeeds       = 64
	MaxTasks       = 10000
	MaxM0          = 100000
	MaxConcurrency = 1024
	MaxGroupSize   = 64
)

// Parse decodes data strictly (see the package comment) without filling
// defaults; dir is the directory relative paths are relative to.
func Parse(data []byte, dir string) (Config, error) {
	var c Config
	if err := decodeStrict(data, &c); err != nil {
		return Config{}, err
	}
	c.dir = dir
	return c, nil
}

// Load reads, parses, resolves and validates the config file at path.
func Load(path string) (Config, error) {
	data, err := readFile(path, "")
	if err != nil {
		return Config{}, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return Config{}, err
	}
	c, err := Parse(data, filepath.Dir(abs))
	if err != nil {
		return Config{}, err
	}
	c = c.Resolve()
	return c, c.Validate()
}

func readFile(path, key string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{Path: key, Kind: ErrMissing, Msg: err.Error()}
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(&limitReader{f, MaxFileBytes + 1}); err != nil {
		return nil, &Error{Path: key, Kind: ErrSyntax, Msg: err.Error()}
	}
	return b.Bytes(), nil
}

type limitReader struct {
	f *os.File
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("file is larger than %d bytes", MaxFileBytes)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// abs makes p absolute against the config's directory ("" stays "").
func (c Config) abs(p string) string {
	if p == "" || filepath.IsAbs(p) || c.dir == "" {
		return p
	}
	return filepath.Join(c.dir, p)
}

// Defaults returns the defaults of every optional key, as Resolve fills
// them into an empty file.
func Defaults() Config { return Config{Version: Version}.Resolve() }

// Resolve returns c with every default filled in and relative paths made
// absolute against the config file's directory. It does not validate.
func (c Config) Resolve() Config {
	c = c.clone()
	if c.Out == "" {
		c.Out = "lm2lm-out"
	}
	c.Out = c.abs(c.Out)
	if c.Store == "" {
		c.Store = filepath.Join(c.Out, "records.jsonl")
	}
	c.Store = c.abs(c.Store)
	for i, a := range c.Training.Command {
		if strings.HasPrefix(a, "./") || strings.HasPrefix(a, "../") {
			c.Training.Command[i] = c.abs(a)
		}
	}
	c.Training.PassEnv, c.Training.Env = nilIfEmpty(c.Training.PassEnv), nilIfEmpty(c.Training.Env)
	if c.Training.Slots == 0 {
		c.Training.Slots = 1
	}
	if c.Executor.Kind == "" {
		c.Executor.Kind = Local
	}
	if c.Executor.Slots == 0 {
		c.Executor.Slots = 1
	}
	if c.Executor.MaxAttempts == 0 {
		c.Executor.MaxAttempts = 3
	}
	if s := c.Executor.Slurm; s != nil {
		if s.WorkDir == "" {
			s.WorkDir = filepath.Join(c.Out, "slurm-jobs")
		}
		s.WorkDir = c.abs(s.WorkDir)
		s.ExtraArgs = nilIfEmpty(s.ExtraArgs)
	}
	if len(c.Reference.Seeds) == 0 {
		c.Reference.Seeds = []uint64{1, 2, 3}
	}
	if c.Reference.MinSeedNoise == 0 {
		c.Reference.MinSeedNoise = 1e-6
	}
	for i := range c.Tasks {
		t := &c.Tasks[i]
		if t.Split == "" {
			t.Split = string(records.Train)
		}
		if t.Metric == "" {
			t.Metric = string(records.BitsPerByte)
		}
		if len(t.Seeds) == 0 {
			t.Seeds = slices.Clone(c.Reference.Seeds)
		}
	}
	c.Catalogue.File = c.abs(c.Catalogue.File)
	if c.WorldModel.Kind == "" {
		c.WorldModel.Kind = Embedded
	}
	if o := c.WorldModel.OpenAI; o != nil {
		if o.Concurrency == 0 {
			o.Concurrency = 8
		}
		if o.PromptVersion == "" {
			o.PromptVersion = rwmopenai.PromptVersion
		}
	}
	if c.M0.Size == 0 {
		c.M0.Size = 100
	}
	if c.M0.Seed == 0 {
		c.M0.Seed = 1
	}
	if len(c.Calibration.Steps) == 0 && len(c.Calibration.Budgets) == 0 {
		d := calibrate.DefaultSchedule()
		c.Calibration.Steps, c.Calibration.Budgets = d.Steps, d.Budgets
	}
	if c.Serve.Addr == "" {
		c.Serve.Addr = "127.0.0.1:8080"
	}
	if c.Serve.Dir == "" {
		c.Serve.Dir = filepath.Join(c.Out, "serve")
	}
	c.Serve.Dir = c.abs(c.Serve.Dir)
	c.Serve.TokenFile = c.abs(c.Serve.TokenFile)
	if c.Serve.GroupSize == 0 {
		c.Serve.GroupSize = 8
	}
	if c.Serve.Parallel == 0 {
		c.Serve.Parallel = 2
	}
	if c.Serve.Seed == 0 {
		c.Serve.Seed = 1
	}
	if c.Evaluate.K == 0 {
		c.Evaluate.K = 4
	}
	if c.Evaluate.StatesPerTask == 0 {
		c.Evaluate.StatesPerTask = 4
	}
	if c.Evaluate.Seed == 0 {
		c.Evaluate.Seed = 1
	}
	if p := c.Evaluate.Proposer; p != nil && p.Temperature == nil {
		one := 1.0
		p.Temperature = &one
	}
	return c
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// clone deep-copies the parts Resolve edits in place.
func (c Config) clone() Config {
	c.Training.Command = slices.Clone(c.Training.Command)
	if c.Executor.Slurm != nil {
		s := *c.Executor.Slurm
		c.Executor.Slurm = &s
	}
	if c.WorldModel.OpenAI != nil {
		o := *c.WorldModel.OpenAI
		c.WorldModel.OpenAI = &o
	}
	if c.Evaluate.Proposer != nil {
		p := *c.Evaluate.Proposer
		if p.Temperature != nil {
			t := *p.Temperature
			p.Temperature = &t
		}
		c.Evaluate.Proposer = &p
	}
	c.Tasks = slices.Clone(c.Tasks)
	return c
}

func bad(path string, kind error, format string, args ...any) error {
	return &Error{Path: path, Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// validID reports whether s is a task ID: 1-64 of letters, digits, - _ .
func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// Validate reports the first problem of a resolved config, naming its key.
// It checks the catalogue file only when it is inline (Cards reads a file).
func (c Config) Validate() error {
	if c.Version != Version {
		if c.Version == 0 {
			return bad("version", ErrMissing, "required: version: %d", Version)
		}
		return bad("version", ErrRange, "%d, want %d", c.Version, Version)
	}
	if !stat.Finite(c.PricePerDeviceHour) || c.PricePerDeviceHour < 0 {
		return bad("price_per_device_hour", ErrRange, "%g, want a finite number ≥ 0", c.PricePerDeviceHour)
	}
	if err := c.validateTraining(); err != nil {
		return err
	}
	if err := c.validateExecutor(); err != nil {
		return err
	}
	if err := validateSeeds("reference.seeds", c.Reference.Seeds); err != nil {
		return err
	}
	if !stat.Finite(c.Reference.MinSeedNoise) || c.Reference.MinSeedNoise <= 0 {
		return bad("reference.min_seed_noise", ErrRange, "%g, want a finite number > 0", c.Reference.MinSeedNoise)
	}
	if err := c.validateTasks(); err != nil {
		return err
	}
	switch {
	case c.Catalogue.File == "" && len(c.Catalogue.Cards) == 0:
		return bad("catalogue", ErrMissing, "required: give catalogue.file or catalogue.cards")
	case c.Catalogue.File != "" && len(c.Catalogue.Cards) > 0:
		return bad("catalogue", ErrRange, "give catalogue.file or catalogue.cards, not both")
	case len(c.Catalogue.Cards) > 0:
		if err := validateCards("catalogue.cards", c.Catalogue.Cards); err != nil {
			return err
		}
	}
	if err := c.validateWorld(); err != nil {
		return err
	}
	if c.M0.Size < 1 || c.M0.Size > MaxM0 {
		return bad("m0.size", ErrRange, "%d, want 1..%d", c.M0.Size, MaxM0)
	}
	s := calibrate.Schedule{Steps: c.Calibration.Steps, Budgets: c.Calibration.Budgets}
	if len(s.Steps) != len(s.Budgets) {
		return bad("calibration.budgets", ErrRange, "%d budgets for %d steps, want one per step", len(s.Budgets), len(s.Steps))
	}
	for i, st := range s.Steps {
		if st < 0 || (i > 0 && st <= s.Steps[i-1]) {
			return bad(fmt.Sprintf("calibration.steps[%d]", i), ErrRange, "%d: steps must be ≥ 0 and strictly increasing", st)
		}
		if s.Budgets[i] < 1 || s.Budgets[i] > MaxM0 {
			return bad(fmt.Sprintf("calibration.budgets[%d]", i), ErrRange, "%d, want 1..%d", s.Budgets[i], MaxM0)
		}
	}
	if err := s.Validate(); err != nil {
		return bad("calibration", ErrRange, "%v", err)
	}
	if err := c.validateServe(); err != nil {
		return err
	}
	return c.validateEvaluate()
}

func (c Config) validateEvaluate() error {
	e := c.Evaluate
	switch {
	case e.K < 1 || e.K > MaxGroupSize:
		return bad("evaluate.k", ErrRange, "%d, want 1..%d", e.K, MaxGroupSize)
	case e.StatesPerTask < 1 || e.StatesPerTask > MaxM0:
		return bad("evaluate.states_per_task", ErrRange, "%d, want 1..%d", e.StatesPerTask, MaxM0)
	}
	p := e.Proposer
	if p == nil {
		return nil
	}
	if err := validateEndpoint("evaluate.proposer", p.BaseURL, p.Model, p.APIKeyEnv); err != nil {
		return err
	}
	if p.Temperature != nil && (!stat.Finite(*p.Temperature) || *p.Temperature < 0 || *p.Temperature > 2) {
		return bad("evaluate.proposer.temperature", ErrRange, "%g, want 0..2", *p.Temperature)
	}
	return nil
}

func (c Config) validateTraining() error {
	t := c.Training
	if len(t.Command) == 0 {
		return bad("training.command", ErrMissing, "required: the training script's argv list, e.g. [python3, ./train.py]")
	}
	for i, a := range t.Command {
		if a == "" || strings.ContainsRune(a, 0) {
			return bad(fmt.Sprintf("training.command[%d]", i), ErrRange, "empty or holding a NUL byte")
		}
	}
	if len(t.Command) == 1 && strings.ContainsAny(t.Command[0], " \t") && !strings.Contains(t.Command[0], "/") {
		return bad("training.command", ErrRange, "%q looks like a shell string: give the argv list, e.g. [python3, ./train.py]", excerpt(t.Command[0]))
	}
	if t.Timeout < 0 {
		return bad("training.timeout", ErrRange, "%v, want ≥ 0 (0 = no limit)", t.Timeout)
	}
	for i, n := range t.PassEnv {
		if !builder.EnvName(n) {
			return bad(fmt.Sprintf("training.pass_env[%d]", i), ErrRange, "%q is not a variable name", excerpt(n))
		}
	}
	for i, e := range t.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || !builder.EnvName(k) {
			return bad(fmt.Sprintf("training.env[%d]", i), ErrRange, "%q, want NAME=value", excerpt(e))
		}
	}
	if t.Slots < 1 || t.Slots > MaxSlots {
		return bad("training.slots", ErrRange, "%d, want 1..%d", t.Slots, MaxSlots)
	}
	if len(t.Version) > records.MaxVersion || strings.IndexFunc(t.Version, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return bad("training.version", ErrRange, "%q, want at most %d bytes of printable text", excerpt(t.Version), records.MaxVersion)
	}
	return nil
}

func (c Config) validateExecutor() error {
	e := c.Executor
	switch e.Kind {
	case Local:
		if e.Slurm != nil {
			return bad("executor.slurm", ErrRange, "set only with executor.kind: slurm")
		}
	case Slurm:
		if e.Slurm == nil {
			return bad("executor.slurm", ErrMissing, "required with executor.kind: slurm (at least partition)")
		}
		s := e.Slurm
		if s.Partition == "" {
			return bad("executor.slurm.partition", ErrMissing, "required with executor.kind: slurm")
		}
		if s.GRES != "" && s.SlotGRES != "" {
			return bad("executor.slurm.slot_gres", ErrRange, "give gres or slot_gres, not both")
		}
		if s.CPUsPerTask < 0 || s.CPUsPerTask > MaxSlots {
			return bad("executor.slurm.cpus_per_task", ErrRange, "%d, want 0..%d", s.CPUsPerTask, MaxSlots)
		}
		if s.TimeLimit < 0 {
			return bad("executor.slurm.time_limit", ErrRange, "%v, want ≥ 0 (0 = the partition's)", s.TimeLimit)
		}
		for i, a := range s.ExtraArgs {
			if !strings.HasPrefix(a, "-") {
				return bad(fmt.Sprintf("executor.slurm.extra_args[%d]", i), ErrRange, "%q, want an sbatch option such as --constraint=a100", excerpt(a))
			}
		}
	default:
		return bad("executor.kind", ErrRange, "%q, want local or slurm", excerpt(e.Kind))
	}
	if e.Slots < 1 || e.Slots > MaxSlots {
		return bad("executor.slots", ErrRange, "%d, want 1..%d", e.Slots, MaxSlots)
	}
	if c.Training.Slots > e.Slots {
		return bad("training.slots", ErrRange, "%d, more than executor.slots (%d): no run could start", c.Training.Slots, e.Slots)
	}
	if e.MaxAttempts < 1 || e.MaxAttempts > MaxAttempts {
		return bad("executor.max_attempts", ErrRange, "%d, want 1..%d", e.MaxAttempts, MaxAttempts)
	}
	return nil
}

func validateSeeds(path string, seeds []uint64) error {
	if len(seeds) == 0 {
		return bad(path, ErrMissing, "at least one seed")
	}
	if len(seeds) > MaxSeeds {
		return bad(path, ErrRange, "%d seeds, want ≤ %d", len(seeds), MaxSeeds)
	}
	seen := map[uint64]bool{}
	for i, s := range seeds {
		if seen[s] {
			return bad(fmt.Sprintf("%s[%d]", path, i), ErrRange, "seed %d given twice", s)
		}
		seen[s] = true
	}
	return nil
}

func (c Config) validateTasks() error {
	if len(c.Tasks) == 0 {
		return bad("tasks", ErrMissing, "at least one task")
	}
	if len(c.Tasks) > MaxTasks {
		return bad("tasks", ErrRange, "%d tasks, want ≤ %d", len(c.Tasks), MaxTasks)
	}
	ids := map[string]int{}
	train := 0
	for i, t := range c.Tasks {
		p := fmt.Sprintf("tasks[%d]", i)
		switch {
		case t.ID == "":
			return bad(p+".id", ErrMissing, "required")
		case !validID(t.ID):
			return bad(p+".id", ErrRange, "%q, want 1-64 of letters, digits, '-', '_', '.'", excerpt(t.ID))
		case t.Family == "":
			return bad(p+".family", ErrMissing, "required")
		case !records.Split(t.Split).Valid():
			return bad(p+".split", ErrRange, "%q, want train or held-out", excerpt(t.Split))
		case !records.Metric(t.Metric).Valid() || records.Metric(t.Metric) == records.LadderShortfall:
			return bad(p+".metric", ErrRange, "%q, want bits-per-byte, nats-per-token or loss", excerpt(t.Metric))
		case t.Budget < 0:
			return bad(p+".budget", ErrRange, "%d, want ≥ 0", t.Budget)
		}
		if j, dup := ids[t.ID]; dup {
			return bad(p+".id", ErrRange, "%q repeats tasks[%d].id", t.ID, j)
		}
		ids[t.ID] = i
		if t.Split == string(records.Train) {
			train++
		}
		if err := validateSeeds(p+".seeds", t.Seeds); err != nil {
			return err
		}
		for name, v := range t.Descriptors {
			probe := records.Task{ID: "x", Split: records.Train, Metric: records.BitsPerByte, SeedNoise: 1,
				Descriptors: map[string]float64{name: v}}
			if err := probe.Validate(); err != nil {
				return bad(p+".descriptors."+name, ErrRange, "want a name of a-z, 0-9, '_' (≤ 64) and a finite value")
			}
		}
		if _, err := json.Marshal(t.Recipe); err != nil {
			return bad(p+".recipe", ErrType, "cannot be passed as JSON: %v", err)
		}
	}
	if train == 0 {
		return bad("tasks", ErrMissing, "at least one task with split: train")
	}
	return nil
}

func validateCards(path string, cards []Card) error {
	mech := map[string]int{}
	for i, cd := range cards {
		p := fmt.Sprintf("%s[%d]", path, i)
		canon := records.CanonicalName(cd.Mechanism)
		switch {
		case canon == "":
			return bad(p+".mechanism", ErrMissing, "required")
		case canon == records.NoChange:
			return bad(p+".mechanism", ErrRange, "%q is the no-change mechanism, not a card", excerpt(cd.Mechanism))
		}
		if j, dup := mech[canon]; dup {
			return bad(p+".mechanism", ErrRange, "%q repeats %s[%d]", excerpt(cd.Mechanism), path, j)
		}
		mech[canon] = i
		if cd.Prior != nil && (!stat.Finite(cd.Prior.Mean) || !stat.Finite(cd.Prior.Std) || cd.Prior.Std < 0) {
			return bad(p+".prior", ErrRange, "want finite mean_sigmas and std_sigmas ≥ 0")
		}
		names := map[string]bool{}
		for j, ps := range cd.Params {
			pp := fmt.Sprintf("%s.params[%d]", p, j)
			pc := records.CanonicalName(ps.Name)
			switch {
			case pc == "":
				return bad(pp+".name", ErrMissing, "required")
			case names[pc]:
				return bad(pp+".name", ErrRange, "%q given twice in the card", excerpt(ps.Name))
			case ps.Kind != "float" && ps.Kind != "int" && ps.Kind != "enum":
				return bad(pp+".kind", ErrRange, "%q, want float, int or enum", excerpt(ps.Kind))
			case len(ps.Choices) == 0:
				return bad(pp+".choices", ErrMissing, "at least one choice")
			case !stat.Finite(ps.Min) || !stat.Finite(ps.Max) || ps.Min > ps.Max:
				return bad(pp+".max", ErrRange, "min %g > max %g", ps.Min, ps.Max)
			}
			names[pc] = true
			seen := map[string]bool{}
			for k, ch := range ps.Choices {
				cp := fmt.Sprintf("%s.choices[%d]", pp, k)
				cv := records.CanonicalValue(ch)
				if cv == "" {
					return bad(cp, ErrMissing, "empty choice")
				}
				if seen[cv] {
					return bad(cp, ErrRange, "%q given twice", excerpt(ch))
				}
				seen[cv] = true
				if err := checkChoice(ps, ch); err != nil {
					return bad(cp, ErrRange, "%v", err)
				}
			}
		}
	}
	return nil
}

// checkChoice reports a numeric choice that is not a number of its kind
// (its whole trimmed text, as lab/cards reads a proposal's value) or lies
// outside [min, max] (when min < max).
func checkChoice(ps Param, v string) error {
	if ps.Kind == "enum" {
		return nil
	}
	// The whole trimmed text is the number: "2 ; rm -rf /" is not 2.
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !stat.Finite(x) {
		return fmt.Errorf("%q is not a %s", excerpt(v), ps.Kind)
	}
	if ps.Kind == "int" && x != math.Trunc(x) {
		return fmt.Errorf("%q is not an int", excerpt(v))
	}
	if ps.Min < ps.Max && (x < ps.Min || x > ps.Max) {
		return fmt.Errorf("%g outside [%g, %g]", x, ps.Min, ps.Max)
	}
	return nil
}

func (c Config) validateWorld() error {
	w := c.WorldModel
	switch w.Kind {
	case Embedded:
		if w.OpenAI != nil {
			return bad("world_model.openai", ErrRange, "set only with world_model.kind: openai")
		}
		return nil
	case OpenAI:
	default:
		return bad("world_model.kind", ErrRange, "%q, want embedded or openai", excerpt(w.Kind))
	}
	o := w.OpenAI
	if o == nil {
		return bad("world_model.openai", ErrMissing, "required with world_model.kind: openai")
	}
	if err := validateEndpoint("world_model.openai", o.BaseURL, o.Model, o.APIKeyEnv); err != nil {
		return err
	}
	switch {
	case o.Concurrency < 1 || o.Concurrency > MaxConcurrency:
		return bad("world_model.openai.concurrency", ErrRange, "%d, want 1..%d", o.Concurrency, MaxConcurrency)
	case o.PromptVersion != rwmopenai.PromptVersion:
		return bad("world_model.openai.prompt_version", ErrRange, "%q, want %q (the only prompt this build has)", excerpt(o.PromptVersion), rwmopenai.PromptVersion)
	case !stat.Finite(o.Temperature) || o.Temperature < 0 || o.Temperature > 2:
		return bad("world_model.openai.temperature", ErrRange, "%g, want 0..2", o.Temperature)
	}
	return nil
}

// validateEndpoint checks an OpenAI-compatible server's keys under path.
func validateEndpoint(path, baseURL, model, apiKeyEnv string) error {
	switch {
	case baseURL == "":
		return bad(path+".base_url", ErrMissing, "required, e.g. http://localhost:8000/v1")
	case !strings.HasPrefix(baseURL, "http://") && !strings.HasPrefix(baseURL, "https://"):
		return bad(path+".base_url", ErrRange, "%q, want an http:// or https:// URL", excerpt(baseURL))
	case model == "":
		return bad(path+".model", ErrMissing, "required")
	case apiKeyEnv != "" && !builder.EnvName(apiKeyEnv):
		return bad(path+".api_key_env", ErrRange, "%q is not a variable name (name the variable, never write the key here)", excerpt(apiKeyEnv))
	}
	return nil
}

func (c Config) validateServe() error {
	s := c.Serve
	switch {
	case s.Addr == "" || !strings.Contains(s.Addr, ":"):
		return bad("serve.addr", ErrRange, "%q, want host:port", excerpt(s.Addr))
	case s.GroupSize < 1 || s.GroupSize > MaxGroupSize:
		return bad("serve.group_size", ErrRange, "%d, want 1..%d", s.GroupSize, MaxGroupSize)
	case s.Parallel < 1 || s.Parallel > MaxConcurrency:
		return bad("serve.parallel", ErrRange, "%d, want 1..%d", s.Parallel, MaxConcurrency)
	}
	return nil
}

// Cards returns the catalogue as records.Card values: the inline cards, or
// the file's, parsed strictly and checked.
func (c Config) Cards() ([]records.Card, error) {
	cards := c.Catalogue.Cards
	path := "catalogue.cards"
	if c.Catalogue.File != "" {
		data, err := readFile(c.Catalogue.File, "catalogue.file")
		if err != nil {
			return nil, err
		}
		var f struct {
			Cards []Card `yaml:"cards"`
		}
		// The file is a list of cards, or a mapping with the key cards.
		var n yaml.Node
		if err := yaml.Unmarshal(data, &n); err == nil && len(n.Content) == 1 && n.Content[0].Kind == yaml.SequenceNode {
			err = decodeList(data, &f.Cards)
			if err != nil {
				return nil, prefix("catalogue.file", err)
			}
		} else if err := decodeStrict(data, &f); err != nil {
			return nil, prefix("catalogue.file", err)
		}
		cards, path = f.Cards, "catalogue.file: cards"
		if len(cards) == 0 {
			return nil, bad("catalogue.file", ErrMissing, "no cards in %s", c.Catalogue.File)
		}
	}
	if err := validateCards(path, cards); err != nil {
		return nil, err
	}
	out := make([]records.Card, len(cards))
	for i, cd := range cards {
		rc := records.Card{Mechanism: cd.Mechanism, Description: cd.Description}
		for _, p := range cd.Params {
			rc.Params = append(rc.Params, records.ParamSpec{Name: p.Name, Kind: p.Kind, Choices: slices.Clone(p.Choices),
				Min: p.Min, Max: p.Max, Doc: p.Doc})
		}
		if cd.Prior != nil {
			rc.Prior = &records.Prior{Mean: cd.Prior.Mean, Std: cd.Prior.Std}
		}
		out[i] = rc
	}
	return out, nil
}

// decodeList decodes a top-level list of cards strictly.
func decodeList(data []byte, out *[]Card) error {
	var w struct {
		Cards []Card `yaml:"cards"`
	}
	// Wrap the list under a key so that decodeStrict's struct walk applies.
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil || len(n.Content) != 1 || n.Content[0].Kind != yaml.SequenceNode {
		return &Error{Kind: ErrSyntax, Msg: "want a list of cards or a mapping with the key cards"}
	}
	wrapped := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "cards"}, n.Content[0]}}
	b, err := yaml.Marshal(wrapped)
	if err != nil {
		return &Error{Kind: ErrSyntax, Msg: err.Error()}
	}
	if err := decodeStrict(b, &w); err != nil {
		return err
	}
	*out = w.Cards
	return nil
}

func prefix(p string, err error) error {
	if e, ok := err.(*Error); ok {
		e2 := *e
		if e2.Path == "" {
			e2.Path = p
		} else {
			e2.Path = p + ": " + e2.Path
		}
		return &e2
	}
	return err
}

// TaskRecords returns the tasks as records.Task values without b_e and σ_e
// (the reference runs measure them).
func (c Config) TaskRecords() []records.Task {
	out := make([]records.Task, len(c.Tasks))
	for i, t := range c.Tasks {
		out[i] = records.Task{ID: t.ID, Family: t.Family, Split: records.Split(t.Split), Metric: records.Metric(t.Metric),
			Budget: t.Budget, Description: t.Description}
		if len(t.Descriptors) > 0 {
			out[i].Descriptors = map[string]float64{}
			for k, v := range t.Descriptors {
				out[i].Descriptors[k] = v
			}
		}
	}
	return out
}

// Format writes c as YAML with every key, defaults included.
func Format(c Config) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# lm2lm environment, every default filled in (lm2lm print-config)\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
