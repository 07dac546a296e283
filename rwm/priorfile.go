package rwm

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/lm2lm/lm2lm/records"
)

// PriorFormat names the layout of a prior's file (version 1). A file is
// the JSON envelope {"format", "sha256", "body"} of the project's
// checkpoints: the SHA-256 (hex) of the body's bytes guards against
// corruption, the format against another version.
const PriorFormat = "lm2lm/rwm.Prior/v1"

// MaxPriorFile is the largest prior file ReadPrior reads: 64 MiB.
const MaxPriorFile = 64 << 20

// priorEnvelope is the outer JSON of a prior's file.
type priorEnvelope struct {
	Format string          `json:"format"`
	SHA256 string          `json:"sha256"`
	Body   json.RawMessage `json:"body"`
}

// encodeBody returns body's JSON encoding (Go's float64 encoding
// round-trips, so a read prior predicts bit-identically).
func encodeBody(body priorBody) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrPrior, err)
	}
	return b, nil
}

// checksum is the hex SHA-256 of b.
func checksum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// catalogueDigest names a catalogue for the mismatch check: the SHA-256
// of its cards' JSON with canonical mechanism and parameter names, ""
// for none.
func catalogueDigest(cards []records.Card) string {
	if len(cards) == 0 {
		return ""
	}
	cs := make([]records.Card, len(cards))
	for i, c := range cards {
		c.Mechanism = records.CanonicalName(c.Mechanism)
		c.Params = slices.Clone(c.Params)
		for j := range c.Params {
			c.Params[j].Name = records.CanonicalName(c.Params[j].Name)
		}
		cs[i] = c
	}
	b, err := json.Marshal(cs)
	if err != nil {
		return "unencodable" // a card with a non-finite number: matches no prior's digest
	}
	return checksum(b)
}

// MarshalBinary returns the prior's file: the envelope of PriorFormat
// around its body (layout, coefficients, hyperparameters, corpus). Writing
// the same prior twice gives the same bytes.
func (p *Prior) MarshalBinary() ([]byte, error) {
	body, err := encodeBody(p.body)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(priorEnvelope{Format: PriorFormat, SHA256: checksum(body), Body: body})
	if err != nil {
		return nil, fmt.Errorf("%w: encode: %w", ErrPrior, err)
	}
	return b, nil
}

// ReadPrior decodes a prior's file written by Prior.MarshalBinary. It
// checks the size (MaxPriorFile), the envelope, the format (an error
// wrapping ErrPriorVersion for another one), the checksum and the body's
// consistency (sorted, unique, well-formed names; as many finite
// coefficients as the layout has; valid hyperparameters); any other
// problem wraps ErrPriorCorrupt. Whether the prior fits a model's
// catalogue and Effector is checked when it is put into a configuration
// (Prior.Config, EmbeddedConfig.Validate: ErrPriorMismatch).
func ReadPrior(data []byte) (*Prior, error) {
	if len(data) > MaxPriorFile {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrPriorCorrupt, len(data), MaxPriorFile)
	}
	var env priorEnvelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("%w: envelope: %w", ErrPriorCorrupt, err)
	}
	if env.Format != PriorFormat {
		return nil, fmt.Errorf("%w: format %q, want %q", ErrPriorVersion, records.Excerpt(env.Format), PriorFormat)
	}
	if checksum(env.Body) != env.SHA256 {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrPriorCorrupt)
	}
	var body priorBody
	dec := json.NewDecoder(bytes.NewReader(env.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return nil, fmt.Errorf("%w: body: %w", ErrPriorCorrupt, err)
	}
	if err := checkBody(body); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPriorCorrupt, err)
	}
	return newPrior(body)
}

// checkBody reports the first inconsistency of a decoded body (the
// coefficients' count is checked by newPrior).
func checkBody(b priorBody) error {
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	sortedUnique := func(what string, s []string, ok func(string) bool) error {
		for i, v := range s {
			if !ok(v) {
				return fmt.Errorf("%s %q is not well formed", what, records.Excerpt(v))
			}
			if i > 0 && s[i-1] >= v {
				return fmt.Errorf("%s are not sorted and unique at %q", what, records.Excerpt(v))
			}
		}
		return nil
	}
	if err := sortedUnique("descriptors", b.Descriptors, validDescriptor); err != nil {
		return err
	}
	if err := sortedUnique("proposals", b.Proposals, func(k string) bool { return k != "" }); err != nil {
		return err
	}
	if err := sortedUnique("mechanisms", b.Mechanisms, func(m string) bool { return m != "" && records.CanonicalName(m) == m }); err != nil {
		return err
	}
	switch {
	case !b.Terms.Proposal && !b.Terms.Mechanism && !b.Terms.Effects:
		return fmt.Errorf("no terms")
	case !b.Terms.Proposal && len(b.Proposals) > 0, !b.Terms.Mechanism && len(b.Mechanisms) > 0:
		return fmt.Errorf("coefficients of terms that are off")
	case b.Terms.Effects != (b.Effector != ""):
		return fmt.Errorf("effect terms %v with Effector %q", b.Terms.Effects, records.Excerpt(b.Effector))
	case b.Catalogue != "" && (len(b.Catalogue) != 64 || !isHex(b.Catalogue)):
		return fmt.Errorf("catalogue digest %q is not a SHA-256", records.Excerpt(b.Catalogue))
	case b.Corpus.Records < 0 || b.Corpus.Tasks < 0 || b.Corpus.Blocks < 0 ||
		!fin(b.Corpus.Ridge) || !fin(b.Corpus.Clip) || b.Corpus.Clip < 0 || !fin(b.Corpus.LogMarginal) || !fin(b.Corpus.InfeasibleSigmas):
		return fmt.Errorf("corpus %+v is not finite and non-negative", b.Corpus)
	}
	for i, c := range b.Coef {
		if !fin(c) {
			return fmt.Errorf("coefficient %d is not finite", i)
		}
	}
	c := b.Hyper.apply(DefaultEmbeddedConfig())
	if err := c.Validate(); err != nil {
		return fmt.Errorf("hyperparameters: %w", err)
	}
	return nil
}

// validDescriptor reports whether name is a records.Task descriptor name.
func validDescriptor(name string) bool {
	t := records.Task{ID: "x", Split: records.Train, Metric: records.BitsPerByte, SeedNoise: 1,
		Descriptors: map[string]float64{name: 0}}
	return t.Validate() == nil
}

// isHex reports whether s is lower-case hex.
func isHex(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
