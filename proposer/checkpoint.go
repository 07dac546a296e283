package proposer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/lm2lm/lm2lm/records"
)

// checkpointFormat names the checkpoint layout; UnmarshalBinary refuses others.
const checkpointFormat = "lm2lm/proposer.Policy/v1"

type checkpoint struct {
	Format    string         `json:"format"`
	Config    PolicyConfig   `json:"config"`
	Catalogue []records.Card `json:"catalogue"`
	Params    int            `json:"params"`
	Theta     []float64      `json:"theta"`
	AdamM     []float64      `json:"adam_m"`
	AdamV     []float64      `json:"adam_v"`
	AdamStep  int            `json:"adam_step"`
}

// MarshalBinary returns a checkpoint of the policy: a JSON document with the
// format name, config (including the current temperature), catalogue,
// weights and Adam state. Go's JSON encoding of float64 round-trips
// exactly, so a restored policy reproduces log-probs, samples and later
// updates bit for bit.
func (p *Policy) MarshalBinary() ([]byte, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	b, err := json.Marshal(checkpoint{
		Format:    checkpointFormat,
		Config:    p.cfg,
		Catalogue: p.cat,
		Params:    p.lay.nParams,
		Theta:     p.theta,
		AdamM:     p.adamM,
		AdamV:     p.adamV,
		AdamStep:  p.step,
	})
	if err != nil {
		return nil, fmt.Errorf("proposer: marshal: %w", err)
	}
	return b, nil
}

// UnmarshalBinary replaces the policy with the checkpoint in data (as
// written by MarshalBinary). It works on a zero Policy. A checkpoint of
// another format, with a field it does not know or data after it, with
// an invalid config or catalogue, with vectors that
// do not fit the catalogue's layout, or with non-finite values fails with
// an error wrapping ErrCheckpoint and leaves the policy unchanged.
func (p *Policy) UnmarshalBinary(data []byte) error {
	var c checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the checkpoint", ErrCheckpoint)
	}
	if c.Format != checkpointFormat {
		return fmt.Errorf("%w: format %q, want %q", ErrCheckpoint, c.Format, checkpointFormat)
	}
	if err := c.Config.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	lay, err := newLayout(c.Catalogue, c.Config)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCheckpoint, err)
	}
	if c.Params != lay.nParams {
		return fmt.Errorf("%w: %d parameters, the catalogue needs %d", ErrCheckpoint, c.Params, lay.nParams)
	}
	for _, v := range []struct {
		name string
		xs   []float64
	}{{"theta", c.Theta}, {"adam_m", c.AdamM}, {"adam_v", c.AdamV}} {
		if len(v.xs) != lay.nParams {
			return fmt.Errorf("%w: %s has %d values, want %d", ErrCheckpoint, v.name, len(v.xs), lay.nParams)
		}
		for i, x := range v.xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return fmt.Errorf("%w: %s[%d] = %g is not finite", ErrCheckpoint, v.name, i, x)
			}
		}
	}
	for i, x := range c.AdamV {
		if x < 0 {
			return fmt.Errorf("%w: adam_v[%d] = %g < 0", ErrCheckpoint, i, x)
		}
	}
	if c.AdamStep < 0 {
		return fmt.Errorf("%w: adam_step %d < 0", ErrCheckpoint, c.AdamStep)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg, p.cat, p.lay = c.Config, cloneCatalogue(c.Catalogue), lay
	p.theta, p.adamM, p.adamV, p.step = c.Theta, c.AdamM, c.AdamV, c.AdamStep
	return nil
}
