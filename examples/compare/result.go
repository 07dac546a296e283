package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/examples/compare/internal/probe"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/lab/setting"
	"github.com/lm2lm/lm2lm/records"
)

// resultFormat names the layout of result files (resultFile); a file of
// another format is an error, never silently re-run or overwritten.
// Format 3 is checksummed and records the setting and the profile; the
// files of format 2 (`"version": 2`, no checksum) were measured under
// flags that no longer exist and are refused.
const resultFormat = "lm2lm-compare-result/3"

// maxMagnitude bounds every number of a result file: none measured comes
// near it, and beyond it the statistics over thousands of cells could
// overflow to ±Inf.
const maxMagnitude = 1e9

// resultFile is the envelope of a result file: its format, the hex
// SHA-256 of the result's compact JSON, and the result (as the root
// package's checkpoints are kept).
type resultFile struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	Result json.RawMessage `json:"result"`
}

// Result is one (method, seed): what it cost, how it trained, and the real
// gains of its proposals on every test state. Undefined numbers are null.
type Result struct {
	Method  string `json:"method"`
	Seed    uint64 `json:"seed"`
	Profile string `json:"profile"`
	Suite   string `json:"suite"`
	// Setting is the setting the method ran under, by name and content,
	// and ProfileConfig the profile's content (lab/setting): a result is
	// read back only under the same ones.
	Setting       setting.Setting `json:"setting"`
	ProfileConfig setting.Profile `json:"profile_config"`
	// Tasks is the digest of the suite's task specs and of the lab's
	// catalogue (tasksDigest): a result of another generator's tasks, or of
	// another action space (e.g. the size cards before they became
	// relative), is never read back as this one's.
	Tasks string `json:"tasks_digest"`
	// Corpus is, for a method that draws on the pretraining corpus, the
	// fingerprint of the corpus's records it drew on (-corpus,
	// records.Evidence.Fingerprint); "" for every other method. CorpusRuns
	// counts those records: outside knowledge, in no budget.
	Corpus     string `json:"corpus,omitempty"`
	CorpusRuns int    `json:"corpus_runs,omitempty"`
	// Transformer is, for a transformer method, the digest of the
	// examples/llm-rl run it evaluated (its result.json and checkpoint)
	// and of the evaluation's temperature; "" for every other method.
	Transformer string `json:"transformer,omitempty"`
	// RerankTemperature is, for a method that reranks its trained
	// policy's samples (lm2lm-rerank), the temperature its candidates were
	// drawn at (-rerank-temperature); 0 for every other method.
	RerankTemperature float64 `json:"rerank_temperature,omitempty"`
	// Prior is, for a method whose world model carries the pretrained
	// prior (rerank-prior), the prior's digest (rwm.Prior.Digest); "" for
	// every other method.
	Prior string `json:"prior,omitempty"`
	M0    int    `json:"m0_records"`
	// Runs counts real runs per phase: fresh (paid for now) and reused
	// (served from the store: run earlier, by this or another method).
	Runs struct {
		M0         Runs `json:"m0"`
		Training   Runs `json:"training"`
		Evaluation Runs `json:"evaluation"`
		// Probe: the reliability probes' runs (not part of the budget).
		Probe Runs `json:"probe"`
		// History: the test states' history records (shared by every
		// method and seed: paid for by the first job, reused after).
		History Runs `json:"history"`
	} `json:"runs"`
	// LeftOut lists the suite's tasks left out (a reference run failed).
	LeftOut      []string            `json:"tasks_left_out,omitempty"`
	States       []StateResult       `json:"states"`
	Unmeasured   int                 `json:"unmeasured_proposals"`
	Steps        []StepResult        `json:"steps,omitempty"`
	Calibrations []CalibrationResult `json:"calibrations,omitempty"`
	// Probes are the reliability probes at the calibration steps
	// (probe.Monitor).
	Probes []CalibrationResult `json:"probes,omitempty"`
	// Locality is, at each calibration of a calibrating method, how far
	// the world model's predictions moved with the calibration's records,
	// by how the predicted pair relates to them (probe.Monitor).
	Locality []probe.Locality `json:"locality,omitempty"`
	// Teacher is, when the landscape holds training tasks, how well the
	// trainer's world model and the policy rank their mechanisms at each
	// probe step (probe.Teacher).
	Teacher []probe.Teacher `json:"teacher,omitempty"`
	// Judgement is the judgement diagnostic of the evaluation against
	// -landscape (evalstat.JudgeRegions: all states, then each region);
	// absent without -landscape.
	Judgement   []evalstat.Judgement `json:"judgement,omitempty"`
	WallSeconds float64              `json:"wall_seconds"`
}

// Runs counts real runs; CPUSeconds is the fresh ones' device time.
type Runs struct {
	Fresh      int     `json:"fresh"`
	Reused     int     `json:"reused"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// Budget is the real runs the method needs (M_0 and training), whether they
// were paid for now or reused.
func (r Result) Budget() int {
	return r.Runs.M0.Fresh + r.Runs.M0.Reused + r.Runs.Training.Fresh + r.Runs.Training.Reused
}

// StateResult is one test state: its proposals' real gains in σ_e units.
type StateResult struct {
	ID         string    `json:"id"`
	Task       string    `json:"task"`
	Gains      []float64 `json:"gains_sigma"`
	Infeasible int       `json:"infeasible"`
	// Predicted holds, with -eval-predict, the trained world model's
	// predicted gain of each measured proposal (σ_e units, in Gains'
	// order; −c when it judged the proposal invalid).
	Predicted []float64 `json:"predicted_sigma,omitempty"`
}

// StepResult is one training step.
type StepResult struct {
	Step         int      `json:"step"`
	Loss         float64  `json:"loss"`
	Entropy      float64  `json:"entropy"`
	Reward       *float64 `json:"mean_reward,omitempty"`
	MeanGain     *float64 `json:"mean_predicted_gain_sigma,omitempty"`
	TopMechanism string   `json:"top_mechanism,omitempty"`
	TopShare     *float64 `json:"top_share,omitempty"`
}

// CalibrationResult is one calibration point: its reliability monitors
// and the predicted and real normalised rewards of the runs it executed
// (a probe measures the same).
type CalibrationResult = probe.Point

// val is stat.OrNil's inverse: NaN for nil.
func val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// resultPath names a job's result file by method and seed.
func resultPath(dir string, j job) string {
	return filepath.Join(dir, "runs", fmt.Sprintf("%s-seed%d.json", j.method, j.seed))
}

// readResult reads a job's result file; ok is false when there is none.
// The file is checked before it is believed: its format and checksum, no
// field it does not know, no null where a number or a name belongs, every
// number within ±maxMagnitude, and the method, seed, profile, suite,
// setting and tasks the job asks for. Every error names the file.
func readResult(dir string, j job, o options) (r Result, ok bool, err error) {
	path := resultPath(dir, j)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if r, err = decodeResult(b); err != nil {
		return r, false, fmt.Errorf("%s: %w (move it away to run %s again)", path, err, j)
	}
	if r.Method != j.method || r.Seed != j.seed || r.Profile != o.profile || r.Suite != o.suite {
		return r, false, fmt.Errorf("%s holds %s seed %d, profile %s, suite %s; want %s, profile %s, suite %s (move it away to run %s again)",
			path, r.Method, r.Seed, r.Profile, r.Suite, j, o.profile, o.suite, j)
	}
	set, _ := o.chosen() // validated
	prof, _ := o.prof()  // validated
	if got, want := jsonText(r.Setting), jsonText(set); got != want {
		return r, false, fmt.Errorf("%s was measured under the setting %s, want %s (move it away to run %s again)", path, got, want, j)
	}
	if got, want := jsonText(r.ProfileConfig), jsonText(prof); got != want {
		return r, false, fmt.Errorf("%s was measured under the profile %s, want %s (move it away to run %s again)", path, got, want, j)
	}
	if want := o.tasksDigest(); r.Tasks != want {
		return r, false, fmt.Errorf("%s was measured on other tasks of suite %s or another catalogue (digest %q, want %q: the task generator or the cards changed; move it away to run %s again)",
			path, r.Suite, r.Tasks, want, j)
	}
	want := ""
	if methods[j.method].corpus {
		want = o.corpusEv.Fingerprint()
	}
	if r.Corpus != want {
		return r, false, fmt.Errorf("%s drew on another pretraining corpus (fingerprint %q, -corpus gives %q; move it away to run %s again)",
			path, records.Excerpt(r.Corpus), records.Excerpt(want), j)
	}
	want = ""
	if m := methods[j.method]; m.isExternal() {
		if _, _, want, err = transformerRun(o, m, j.seed); err != nil {
			return r, false, err
		}
	}
	if r.Transformer != want {
		return r, false, fmt.Errorf("%s evaluated another transformer run or temperature (digest %q, -transformer gives %q; move it away to run %s again)",
			path, records.Excerpt(r.Transformer), records.Excerpt(want), j)
	}
	if want := priorDigestOf(j.method); r.Prior != want {
		return r, false, fmt.Errorf("%s used another pretrained prior (digest %q, lab/prior has %q; move it away to run %s again)",
			path, records.Excerpt(r.Prior), records.Excerpt(want), j)
	}
	if want := o.rerankTempOf(j.method); r.RerankTemperature != want {
		at := fmt.Sprintf("at temperature %g", r.RerankTemperature)
		if r.RerankTemperature == 0 {
			at = "at the evaluation temperature (a result of an earlier version)"
		}
		return r, false, fmt.Errorf("%s drew its candidates %s, -rerank-temperature gives %g (move it away to run %s again)", path, at, want, j)
	}
	return r, true, nil
}

// priorDigestOf is the prior's digest a result of method records
// (Result.Prior): lab/prior V2's for a method with the prior, "" for any
// other (and for an unreadable prior, which the method's run reports).
func priorDigestOf(method string) string {
	if !methods[method].prior {
		return ""
	}
	s := setting.Validated()
	s.World.Prior = true
	d, _ := s.PriorDigest()
	return d
}

// rerankTempOf is the candidates' temperature a result of method records
// (Result.RerankTemperature): -rerank-temperature (defaultRerankTemp when
// unset) for a method that reranks its trained policy, 0 for any other.
func (o options) rerankTempOf(method string) float64 {
	switch {
	case !methods[method].rerank || methods[method].choice: // a choice draws no candidate from the policy
		return 0
	case o.rerankTemp == 0: // options built in tests
		return defaultRerankTemp
	}
	return o.rerankTemp
}

// jsonText is v's JSON, for comparing and quoting contents.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// errResult marks a result file that is not what writeResult wrote.
var errResult = errors.New("bad result file")

// decodeResult decodes a result file strictly: the envelope and the result
// with no unknown field and nothing after them, the format, the checksum
// of the result's compact JSON, and the result's values (checkValues).
func decodeResult(b []byte) (Result, error) {
	var f resultFile
	if err := strictDecode(b, &f); err != nil {
		var old struct {
			Version *int `json:"version"`
		}
		if json.Unmarshal(b, &old) == nil && old.Version != nil {
			return Result{}, fmt.Errorf("%w: a result of version %d, without checksum or setting; want format %s", errResult, *old.Version, resultFormat)
		}
		return Result{}, fmt.Errorf("%w: %w", errResult, err)
	}
	if f.Format != resultFormat {
		return Result{}, fmt.Errorf("%w: format %q, want %q", errResult, records.Excerpt(f.Format), resultFormat)
	}
	var body bytes.Buffer
	if err := json.Compact(&body, f.Result); err != nil {
		return Result{}, fmt.Errorf("%w: result: %w", errResult, err)
	}
	if sum := sha256.Sum256(body.Bytes()); hex.EncodeToString(sum[:]) != f.SHA256 {
		return Result{}, fmt.Errorf("%w: checksum mismatch: the result was changed after it was written", errResult)
	}
	var tree any
	dec := json.NewDecoder(bytes.NewReader(body.Bytes()))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return Result{}, fmt.Errorf("%w: result: %w", errResult, err)
	}
	if err := checkValues("result", tree, false); err != nil {
		return Result{}, fmt.Errorf("%w: %w", errResult, err)
	}
	var r Result
	if err := strictDecode(body.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("%w: result: %w", errResult, err)
	}
	return r, nil
}

// strictDecode decodes exactly one JSON value from b into v, refusing
// unknown fields and trailing data.
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

// nullable are the result fields that may be null: the undefined
// monitors (stat.OrNil) and lists that may be empty. A null anywhere else, an
// array element above all, would decode silently as 0 or "".
var nullable = map[string]bool{
	"delta": true, "advantage_cosine": true, "pairwise_accuracy": true, "gap": true,
	"mean_reward": true, "mean_predicted_gain_sigma": true, "top_share": true,
	"predicted_reward": true, "real_reward": true, "states": true, "steps": true, "calibrations": true,
	"probes": true, "tasks_left_out": true, "predicted_sigma": true,
	// A locality class with no pair has no mean shift; a calibration with
	// no valid prediction of its records, no gap.
	"mean_abs_shift": true, "gap_before": true, "gap_after": true,
}

// checkValues walks a decoded result (json.Number for numbers) and
// reports, by its path, the first null where none may be and the first
// number that is not finite within ±maxMagnitude.
func checkValues(path string, v any, mayBeNull bool) error {
	switch x := v.(type) {
	case nil:
		if !mayBeNull {
			return fmt.Errorf("%s is null", path)
		}
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > maxMagnitude {
			return fmt.Errorf("%s = %s: not a finite number within ±%g", path, records.Excerpt(string(x)), float64(maxMagnitude))
		}
	case []any:
		for i, e := range x {
			if err := checkValues(fmt.Sprintf("%s[%d]", path, i), e, false); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := checkValues(path+"."+k, x[k], nullable[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// tasksDigest is the digest of the suite's task specs and the lab's
// catalogue (labDigest).
func (o options) tasksDigest() string {
	specs, _, _ := o.tasks() // validated
	return labDigest(specs, lab.Catalogue())
}

// labDigest is the hex SHA-256 (first 12 bytes) of the JSON of the task
// specs and the catalogue's cards: what a result was measured on.
func labDigest(specs []lab.TaskSpec, cat []records.Card) string {
	b, err := json.Marshal(struct {
		Tasks     []lab.TaskSpec `json:"tasks"`
		Catalogue []records.Card `json:"catalogue"`
	}{specs, cat})
	if err != nil {
		panic(fmt.Sprintf("compare: task specs or cards do not marshal: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// writeResult writes a job's result file, checksummed (resultFile); an
// existing file is never replaced (the file appears whole or not at all).
func writeResult(dir string, j job, r Result) error {
	b, err := encodeResult(r)
	if err != nil {
		return fmt.Errorf("%s: %w", resultPath(dir, j), err)
	}
	return createNew(resultPath(dir, j), b)
}

// encodeResult returns the result file of r: the envelope, indented, with
// the checksum of r's compact JSON.
func encodeResult(r Result) ([]byte, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	b, err := json.MarshalIndent(resultFile{Format: resultFormat, SHA256: hex.EncodeToString(sum[:]), Result: body}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// createNew writes b to path through a temporary file and a hard link, so
// the file appears complete, and fails with fs.ErrExist if path exists.
func createNew(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}
