package dapo

// Norm selects how group advantages are normalised (METHOD.md §1 Policy
// optimisation).
type Norm int

const (
	// MeanCentered: Â_i = R_i − mean(R); LM2LM's choice.
	MeanCentered Norm = iota
	// ZScore: (R_i − mean) / (std + ε) with the n−1 (sample) std, as verl and TRL.
	ZScore
	// ZScorePopulation: (R_i − mean) / (std + ε) with the population std, as WMRL.
	ZScorePopulation
)

// Aggregation selects how token losses are averaged.
type Aggregation int

const (
	// TokenMean averages over all tokens of all sequences (DAPO's default).
	TokenMean Aggregation = iota
	// SeqMeanTokenMean averages tokens within each sequence, then sequences.
	SeqMeanTokenMean
)

// LossConfig parameterises the token-level clipped surrogate.
type LossConfig struct {
	EpsLow      float64     // ε_low; default 0.2 (METHOD.md §1 Policy optimisation)
	EpsHigh     float64     // ε_high; default 0.28
	DualClip    float64     // c of dual-clip PPO for negative advantages (> 1); 0 = off (library default)
	Aggregation Aggregation // default TokenMean (DAPO)
}

// DefaultLossConfig returns ε_low 0.2, ε_high 0.28, no dual clip, token-mean.
func DefaultLossConfig() LossConfig {
	return LossConfig{EpsLow: 0.2, EpsHigh: 0.28, DualClip: 0, Aggregation: TokenMean}
}

// Sequence is one sampled sequence with its behaviour (old) and current
// (new) per-token log-probs and its advantage.
type Sequence struct {
	OldLogProbs, NewLogProbs []float64
	Advantage                float64
}
