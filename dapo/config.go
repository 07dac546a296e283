package dapo

import (
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/internal/stat"
)

// Sentinel errors of the package.
var (
	// ErrConfig is wrapped by Validate for every invalid field.
	ErrConfig = errors.New("dapo: invalid config")
	// ErrShortBatch is wrapped when dynamic sampling could not fill its
	// quota of informative groups; the groups it kept are still returned.
	ErrShortBatch = errors.New("dapo: short batch")
)

// Config parameterises one DAPO rollout (METHOD.md §1 Policy optimisation).
type Config struct {
	// GroupSize is G, proposals per state. Default 8.
	GroupSize int
	// Quota is the number of informative groups a batch keeps. Default 256
	// (the paper samples 277 states and keeps 256).
	Quota int
	// MaxDraws bounds the groups dynamic sampling draws for one batch before
	// it returns what it has. Default 1024 (library choice: 4×Quota, enough
	// when up to three quarters of the groups are flat).
	MaxDraws int
	// Norm is the advantage normalisation. Default MeanCentered (LM2LM).
	Norm Norm
	// Eps is ε added to the group std by the z-scored norms. Default 1e-6
	// (library choice, as verl; WMRL uses 1e-4).
	Eps float64
	// FlatTol is the tolerance of Informative: a group whose rewards span
	// no more than FlatTol is flat. Default 1e-9 (library choice: far above
	// float residue, far below any reward difference that matters when
	// rewards are in units of τ_e and clipped to ±6).
	FlatTol float64
	// Loss parameterises the surrogate loss. Default DefaultLossConfig().
	Loss LossConfig
}

// DefaultConfig returns G 8, quota 256, 1024 draws, mean-centred
// advantages, ε 1e-6, flat tolerance 1e-9 and DefaultLossConfig.
func DefaultConfig() Config {
	return Config{
		GroupSize: 8, Quota: 256, MaxDraws: 1024,
		Norm: MeanCentered, Eps: 1e-6, FlatTol: 1e-9,
		Loss: DefaultLossConfig(),
	}
}

// Validate reports the first invalid field, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.GroupSize < 2:
		return fmt.Errorf("%w: GroupSize = %d, want ≥ 2", ErrConfig, c.GroupSize)
	case c.Quota < 1:
		return fmt.Errorf("%w: Quota = %d, want ≥ 1", ErrConfig, c.Quota)
	case c.MaxDraws < c.Quota:
		return fmt.Errorf("%w: MaxDraws = %d, want ≥ Quota = %d", ErrConfig, c.MaxDraws, c.Quota)
	case !c.Norm.valid():
		return fmt.Errorf("%w: Norm = %d is unknown", ErrConfig, int(c.Norm))
	case !stat.Finite(c.Eps) || c.Eps < 0:
		return fmt.Errorf("%w: Eps = %g, want finite ≥ 0", ErrConfig, c.Eps)
	case !stat.Finite(c.FlatTol) || c.FlatTol < 0:
		return fmt.Errorf("%w: FlatTol = %g, want finite ≥ 0", ErrConfig, c.FlatTol)
	}
	return c.Loss.Validate()
}

// Validate reports the first invalid field, wrapping ErrConfig.
func (c LossConfig) Validate() error {
	switch {
	case !stat.Finite(c.EpsLow) || c.EpsLow < 0 || c.EpsLow >= 1:
		return fmt.Errorf("%w: EpsLow = %g, want in [0, 1)", ErrConfig, c.EpsLow)
	case !stat.Finite(c.EpsHigh) || c.EpsHigh < 0:
		return fmt.Errorf("%w: EpsHigh = %g, want finite ≥ 0", ErrConfig, c.EpsHigh)
	case !stat.Finite(c.DualClip) || (c.DualClip != 0 && c.DualClip <= 1):
		return fmt.Errorf("%w: DualClip = %g, want 0 (off) or > 1", ErrConfig, c.DualClip)
	case c.Aggregation != TokenMean && c.Aggregation != SeqMeanTokenMean:
		return fmt.Errorf("%w: Aggregation = %d is unknown", ErrConfig, int(c.Aggregation))
	}
	return nil
}

// String returns the norm's name.
func (n Norm) String() string {
	switch n {
	case MeanCentered:
		return "mean-centered"
	case ZScore:
		return "z-score"
	case ZScorePopulation:
		return "z-score-population"
	}
	return fmt.Sprintf("Norm(%d)", int(n))
}

func (n Norm) valid() bool { return n == MeanCentered || n == ZScore || n == ZScorePopulation }

// String returns the aggregation's name as DAPO and verl spell it.
func (a Aggregation) String() string {
	switch a {
	case TokenMean:
		return "token-mean"
	case SeqMeanTokenMean:
		return "seq-mean-token-mean"
	}
	return fmt.Sprintf("Aggregation(%d)", int(a))
}
