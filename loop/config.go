package loop

import (
	"errors"
	"fmt"

	"github.com/lm2lm/lm2lm/calibrate"
	"github.com/lm2lm/lm2lm/dapo"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/reward"
)

// Errors of the package.
var (
	// ErrConfig marks an invalid Config or Setup.
	ErrConfig = errors.New("loop: invalid config")
	// ErrCheckpoint marks a checkpoint that cannot be written or restored.
	// Its errors quote the strings a checkpoint holds as records.Excerpt
	// does, so that a damaged or hostile checkpoint cannot make an error of
	// its own size.
	ErrCheckpoint = errors.New("loop: checkpoint")
)

// Calibration selects what calibration points execute (METHOD.md §1
// On-policy calibration and its ablations).
type Calibration int

const (
	// TopRated executes the B_u top-rated candidates (greedy top-B): LM2LM.
	TopRated Calibration = iota
	// RandomCalibration executes B_u candidates drawn uniformly: the
	// "random calibration" ablation.
	RandomCalibration
	// Static never executes: the "static RWM" ablation (M stays M_0).
	Static
)

func (c Calibration) String() string {
	switch c {
	case TopRated:
		return "top-rated"
	case RandomCalibration:
		return "random"
	case Static:
		return "static"
	}
	return fmt.Sprintf("Calibration(%d)", int(c))
}

// WMRLConfig switches on WMRL's corrections (METHOD.md §2): in every
// scored batch a fraction of the kept groups (anchor groups) is also
// executed for real and trained on real rewards; an isotonic map from
// world-model score to real score is refitted online on the anchor pairs
// and applied to every world-model reward (Online Debiasing); anchor
// groups' advantages are up-weighted by the inverse-variance weight of the
// measured disagreement (Inverse-Variance Denoising). Its fields, defaults
// and validation are calibrate.WMRLConfig's.
//
// Scores are the normalised rewards clip(g/τ_e, −c, c) (−c when invalid)
// mapped affinely onto [0, 1] so that WMRL's binned isotonic fit on [0, 1]
// applies unchanged (library choice).
type WMRLConfig = calibrate.WMRLConfig

// DefaultWMRLConfig returns calibrate.DefaultWMRLConfig(): anchor fraction
// 0.10 (METHOD.md §2), debiaser 200/64/10/5000 and weighter 64/32/4/2
// (library choice, WMRL's code).
func DefaultWMRLConfig() WMRLConfig { return calibrate.DefaultWMRLConfig() }

// TriggerConfig times calibrations by calibrate.Trigger instead of the
// fixed schedule, at equal total real-run budget (beyond the paper,
// METHOD.md §1 Known weaknesses): the schedule's points are executed in
// order with their budgets B_u, the next one as soon as the trigger fires
// on the reliability monitors of the last calibration (predicted under
// M_u vs real normalised rewards of exactly its runs,
// CalibrationReport.Monitors), and at step Schedule.Steps[u] + Horizon at
// the latest. Point 0 runs at its deadline: before it no real residuals
// exist. The trigger thus never spends more than Schedule.Total() runs and
// never calibrates after the last scheduled step plus Horizon (library
// choice: it moves calibrations, it does not change the budget, so that it
// compares with the schedule at equal cost).
type TriggerConfig struct {
	// Rule holds the thresholds, MinPairs and MinInterval;
	// calibrate.DefaultTrigger() by default.
	Rule calibrate.Trigger
	// Horizon is how many steps a point may run after its scheduled step
	// when the trigger has not fired; default 0 (library choice: the
	// trigger only brings calibrations forward, so by every scheduled step
	// at least the schedule's runs are spent).
	Horizon int
}

// DefaultTriggerConfig returns the defaults documented on TriggerConfig.
func DefaultTriggerConfig() TriggerConfig {
	return TriggerConfig{Rule: calibrate.DefaultTrigger()}
}

// Validate reports an invalid rule or a negative horizon, wrapping
// calibrate.ErrConfig.
func (c TriggerConfig) Validate() error {
	if err := c.Rule.Validate(); err != nil {
		return err
	}
	if c.Horizon < 0 {
		return fmt.Errorf("%w: trigger Horizon = %d, want ≥ 0", calibrate.ErrConfig, c.Horizon)
	}
	return nil
}

// Config holds the method's scoring, calibration and WMRL parameters
// (METHOD.md §1 and §2). How many states a driver samples, how many
// proposals per state, how it splits a batch into updates and how often it
// steps are the driver's, not the loop's.
type Config struct {
	// Reward parameterises reward shaping; default reward.DefaultConfig()
	// (METHOD.md §1 Reward: the clip c, the infeasible and no-change
	// penalties, δ and λ; Reward.Pessimism is beyond it, METHOD.md §1 Known
	// weaknesses).
	Reward reward.Config
	// Norm is the advantage normalisation; default dapo.MeanCentered
	// (METHOD.md §1 Policy optimisation: Â_i = R_i − mean(R)).
	Norm dapo.Norm
	// Eps is ε added to the group std by the z-scored norms; default 1e-6
	// (library choice).
	Eps float64
	// FlatTol is the tolerance under which a group's rewards count as all
	// equal, so that dynamic sampling drops it; default 1e-9 (METHOD.md §1
	// Policy optimisation).
	FlatTol float64
	// Quota is the most informative groups a scored batch keeps, in order
	// (dynamic sampling, METHOD.md §1 Policy optimisation: the paper keeps
	// 256 of 277); 0 keeps every informative group. Default 256. WMRL draws
	// its anchor groups among the kept ones.
	Quota int
	// Schedule is the calibration schedule in the driver's steps; default
	// steps 16, 40, 64 with budgets 31, 38, 31 (METHOD.md §1 On-policy
	// calibration).
	Schedule calibrate.Schedule
	// Calibration is TopRated (default: LM2LM's greedy top-B, METHOD.md §1
	// On-policy calibration), RandomCalibration or Static (its "random
	// calibration" and "static RWM" ablations).
	Calibration Calibration
	// Candidates is how many groups calibration chooses among: the most
	// recently scored ones since the last calibration started (METHOD.md §1
	// On-policy calibration: the top-B_u of the current policy's
	// proposals). Default 277, one rollout of the paper's (a driver that
	// scores one rollout per calibration point sets its rollout's size).
	Candidates int
	// DuplicateRuns allows calibration to execute a change (task and
	// canonical key) already in M, or twice in one point (METHOD.md §1
	// On-policy calibration: the top-B proposals). Default false (library
	// choice: a second run of a known change buys little and costs a run;
	// with an idempotent executor it returns the stored record, a duplicate
	// in M).
	DuplicateRuns bool
	// Trigger, when set, replaces the fixed timing of Schedule by the
	// adaptive calibration trigger at the same budgets (TriggerConfig);
	// nil = the fixed schedule (default). It needs a Calibration other
	// than Static.
	Trigger *TriggerConfig
	// HeldOutTask, when set, predicts the rewards of each state with M
	// minus every record of the state's own task, plus the real records of
	// the state's history (synthetic ones never: METHOD.md §1 Synthetic
	// state expansion): the world model judges a training state as it
	// judges an unseen task at test time. Beyond METHOD.md (its W reads M
	// whole); default false. PredictJob.Pin then names the evidence a
	// world model that re-tunes per evidence (rwm.Pinner) is pinned on.
	HeldOutTask bool
	// WMRL, when set, adds WMRL's anchor groups, online debiasing and
	// inverse-variance weighting (METHOD.md §2) to every scored batch;
	// nil = off (default). It combines with any Calibration mode.
	WMRL *WMRLConfig
	// MaxHistory is the longest history of a drawn state; default
	// records.MaxHistory (8; METHOD.md §1 Vocabulary).
	MaxHistory int
	// Seed seeds the loop's random source (state draws, sampling sources,
	// random calibration, anchor groups); default 1 (library choice: any
	// fixed seed makes a run reproducible).
	Seed uint64
}

// DefaultConfig returns the paper's configuration (METHOD.md §1).
func DefaultConfig() Config {
	d := dapo.DefaultConfig()
	return Config{
		Reward:     reward.DefaultConfig(),
		Norm:       d.Norm,
		Eps:        d.Eps,
		FlatTol:    d.FlatTol,
		Quota:      d.Quota,
		Schedule:   calibrate.DefaultSchedule(),
		Candidates: 277,
		MaxHistory: records.MaxHistory,
		Seed:       1,
	}
}

// Validate reports the first problem with c, wrapping ErrConfig.
func (c Config) Validate() error {
	switch {
	case c.Quota < 0:
		return fmt.Errorf("%w: Quota = %d, want ≥ 0", ErrConfig, c.Quota)
	case c.Candidates < 1:
		return fmt.Errorf("%w: Candidates = %d, want ≥ 1", ErrConfig, c.Candidates)
	case c.MaxHistory < 0 || c.MaxHistory > records.MaxHistory:
		return fmt.Errorf("%w: MaxHistory = %d, want 0..%d", ErrConfig, c.MaxHistory, records.MaxHistory)
	case c.Calibration < TopRated || c.Calibration > Static:
		return fmt.Errorf("%w: unknown calibration %d", ErrConfig, int(c.Calibration))
	}
	d := dapo.DefaultConfig()
	d.Quota, d.MaxDraws, d.Norm, d.Eps, d.FlatTol = max(c.Quota, 1), max(c.Quota, 1), c.Norm, c.Eps, c.FlatTol
	if err := d.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := c.Reward.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.WMRL != nil {
		if err := c.WMRL.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if c.Calibration == Static {
		if c.Trigger != nil {
			return fmt.Errorf("%w: a calibration trigger needs a calibration other than static", ErrConfig)
		}
		return nil
	}
	if err := c.Schedule.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if c.Trigger != nil {
		if err := c.Trigger.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}
