package openai

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

// ExportSchema identifies the format of an exported batch line.
const ExportSchema = "lm2lm.proposer.openai.batch/v1"

// ExportLine is one line of an exported batch: one sample with everything a
// host trainer needs for a token-level clipped policy-gradient step (METHOD.md
// §1 Policy optimisation: DAPO). As JSON (one object per line):
//
//	{
//	  "schema": "lm2lm.proposer.openai.batch/v1",
//	  "index": 0,                         // position in the batch
//	  "task_id": "ar-prose-s",
//	  "prompt_version": "proposer-v1",
//	  "messages": [{"role": "system", "content": "…"}, {"role": "user", "content": "…"}],
//	  "completion": "{\"mechanism\": …}", // the exact completion text
//	  "completion_tokens": ["{", "\"", …], // as the server reported them; [] when unknown
//	  "old_logprobs": [-0.05, …],          // one per completion token; [] when unknown
//	  "temperature": 1,
//	  "advantage": 0.73,                   // Â_i of the sample
//	  "invalid": false, "reason": "",      // an unparseable answer (reward −c)
//	  "proposal": {"mechanism": "…", "params": {…}} // absent when invalid
//	}
//
// A trainer re-tokenises messages with the model's chat template, appends
// the completion tokens (or tokenises "completion" when they are absent),
// and uses old_logprobs as the behaviour log-probs of the ratio.
type ExportLine struct {
	Schema           string            `json:"schema"`
	Index            int               `json:"index"`
	TaskID           string            `json:"task_id"`
	PromptVersion    string            `json:"prompt_version"`
	Messages         []Message         `json:"messages"`
	Completion       string            `json:"completion"`
	CompletionTokens []string          `json:"completion_tokens"`
	OldLogProbs      []float64         `json:"old_logprobs"`
	Temperature      float64           `json:"temperature"`
	Advantage        float64           `json:"advantage"`
	Invalid          bool              `json:"invalid,omitempty"`
	Reason           string            `json:"reason,omitempty"`
	Proposal         *records.Proposal `json:"proposal,omitempty"`
}

// ExportBatch writes items as JSON lines (ExportLine), one per item in
// order, rendering each item's prompt with p's configuration. See
// ExportBatch (the function) for the rules.
func (p *Proposer) ExportBatch(w io.Writer, items []proposer.Item) error {
	return ExportBatch(w, items, p.Messages)
}

// ExportBatch writes items as JSON lines (ExportLine), one per item in
// order; prompt renders the messages of an item's state (for samples of a
// Proposer, its Messages method). The completion is the sample's
// Proposal.Text, which a Proposer sets to the whole answer. It checks every
// item before writing anything and returns an error wrapping ErrBadBatch
// for a non-finite advantage or temperature, log-probs that are not one per
// token or not finite and ≤ 0, or a prompt that cannot be rendered.
func ExportBatch(w io.Writer, items []proposer.Item, prompt func(records.State) ([]Message, error)) error {
	lines := make([]ExportLine, len(items))
	for i, it := range items {
		smp := it.Sample
		if err := checkLine(smp.Tokens, smp.LogProbs, smp.Temperature, it.Advantage); err != nil {
			return fmt.Errorf("%w: item %d: %w", ErrBadBatch, i, err)
		}
		msgs, err := prompt(it.State)
		if err != nil {
			return fmt.Errorf("%w: item %d: %w", ErrBadBatch, i, err)
		}
		l := ExportLine{
			Schema: ExportSchema, Index: i, TaskID: it.State.Task.ID, PromptVersion: PromptVersion,
			Messages: msgs, Completion: smp.Proposal.Text,
			CompletionTokens: nonNil(smp.Tokens), OldLogProbs: nonNilF(smp.LogProbs),
			Temperature: smp.Temperature, Advantage: it.Advantage, Invalid: smp.Invalid, Reason: smp.Reason,
		}
		if !smp.Invalid {
			prop := records.Proposal{Mechanism: smp.Proposal.Mechanism, Params: smp.Proposal.Params}
			l.Proposal = &prop
		}
		lines[i] = l
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, l := range lines {
		if err := enc.Encode(l); err != nil {
			return fmt.Errorf("proposer/openai: export: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("proposer/openai: export: %w", err)
	}
	return nil
}

func checkLine(tokens []string, lps []float64, temp, adv float64) error {
	if math.IsNaN(adv) || math.IsInf(adv, 0) {
		return fmt.Errorf("advantage %g is not finite", adv)
	}
	if math.IsNaN(temp) || math.IsInf(temp, 0) || temp < 0 {
		return fmt.Errorf("temperature %g, want finite and ≥ 0", temp)
	}
	if len(lps) > 0 && len(lps) != len(tokens) {
		return fmt.Errorf("%d log-probs for %d tokens", len(lps), len(tokens))
	}
	for j, v := range lps {
		if math.IsNaN(v) || math.IsInf(v, 0) || v > 0 {
			return fmt.Errorf("log-prob %d = %g, want finite and ≤ 0", j, v)
		}
	}
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilF(s []float64) []float64 {
	if s == nil {
		return []float64{}
	}
	return s
}

// MaxExportLine bounds one line DecodeBatch reads (16 MiB).
const MaxExportLine = 16 << 20

// DecodeBatch reads a batch written by ExportBatch and checks each line:
// the schema, consecutive indices from 0, at least one message, and the
// rules ExportBatch enforces. Blank lines are skipped. Errors wrap
// ErrBadBatch and name the line.
func DecodeBatch(r io.Reader) ([]ExportLine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxExportLine)
	var out []ExportLine
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var l ExportLine
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrBadBatch, n, err)
		}
		switch {
		case l.Schema != ExportSchema:
			return nil, fmt.Errorf("%w: line %d: schema %q, want %q", ErrBadBatch, n, l.Schema, ExportSchema)
		case l.Index != len(out):
			return nil, fmt.Errorf("%w: line %d: index %d, want %d", ErrBadBatch, n, l.Index, len(out))
		case len(l.Messages) == 0:
			return nil, fmt.Errorf("%w: line %d: no prompt messages", ErrBadBatch, n)
		case !l.Invalid && l.Proposal == nil:
			return nil, fmt.Errorf("%w: line %d: a valid sample without a proposal", ErrBadBatch, n)
		}
		if err := checkLine(l.CompletionTokens, l.OldLogProbs, l.Temperature, l.Advantage); err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrBadBatch, n, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadBatch, err)
	}
	return out, nil
}
