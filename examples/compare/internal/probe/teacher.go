package probe

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/internal/landscape"
	"github.com/lm2lm/lm2lm/internal/stat"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
	"github.com/lm2lm/lm2lm/rwm"
)

// Teacher is how well the world model that rewards the policy (its
// teacher), and the policy itself, rank the mechanisms of the training
// tasks a landscape holds, at one step of training: the world model under
// the evidence the trainer holds then (M_u) and under M_0, each state
// judged as the trainer judges it (under HeldOutTask, without its own
// task's records), and the policy by its card probabilities. Each ranks a
// task's mechanisms fully: the world model each mechanism by its
// best-rated change of the catalogue, the policy by the probability of
// its card.
type Teacher struct {
	Step  int `json:"step"`
	Tasks int `json:"tasks"`
	// World is the world model under M_u, World0 under M_0, Policy the
	// policy's card probabilities.
	World  Ranking `json:"world"`
	World0 Ranking `json:"world0"`
	Policy Ranking `json:"policy"`
}

// Ranking is one full ranking's agreement with the landscape, means over
// tasks: the rank of each task's best mechanism (1 = ranked first; ties
// take their mean rank), Spearman's correlation of the ranking's scores
// with the mechanisms' gains, and the gain of the mechanism it ranks first
// (σ_e; an infeasible mechanism counts landscape.InfeasibleGain; among
// equal first scores, the first by name).
type Ranking struct {
	BestRank float64  `json:"best_rank"`
	Spearman *float64 `json:"spearman"`
	TopGain  float64  `json:"top_gain"`
}

// TeacherConfig is what a teacher probe measures with: the landscape of
// the training tasks (Gains by task ID; tasks it lacks are skipped), the
// catalogue's changes the world model rates, and whether the trainer
// judges each state without its own task's records.
type TeacherConfig struct {
	Land        landscape.Gains
	Catalogue   []records.Proposal
	HeldOutTask bool
}

// teacher measures Teacher points (Monitor holds one).
type teacher struct {
	cfg   TeacherConfig
	world rwm.WorldModel
	pol   *proposer.Policy
	train []records.Task
	// at0 is each task's ranking under M_0, measured once.
	at0 map[string]Ranking
}

// measure returns the Teacher point at step under evidence ev (M_u) and
// m0.
func (t *teacher) measure(ctx context.Context, step int, ev, m0 records.Evidence) (Teacher, error) {
	out := Teacher{Step: step}
	if t.at0 == nil {
		t.at0 = map[string]Ranking{}
	}
	var w, w0, p []Ranking
	for _, task := range t.train {
		gains, ok := t.cfg.Land[task.ID]
		if !ok {
			continue
		}
		r, err := t.worldRank(ctx, task, ev, gains)
		if err != nil {
			return out, err
		}
		r0, ok := t.at0[task.ID]
		if !ok {
			if r0, err = t.worldRank(ctx, task, m0, gains); err != nil {
				return out, err
			}
			t.at0[task.ID] = r0
		}
		w, w0 = append(w, r), append(w0, r0)
		p = append(p, rankOf(cardShares(t.pol.CardProbs(records.State{Task: task}), canonical(t.pol.Mechanisms())), gains))
	}
	out.Tasks = len(w)
	out.World, out.World0, out.Policy = MeanRanking(w), MeanRanking(w0), MeanRanking(p)
	return out, nil
}

// worldRank is the world model's ranking of task's mechanisms under ev
// (without the task's records under HeldOutTask): each mechanism scored
// by its best-rated change of the catalogue, a change the world model
// rejects left out.
func (t *teacher) worldRank(ctx context.Context, task records.Task, ev records.Evidence, gains map[string]float64) (Ranking, error) {
	if t.cfg.HeldOutTask {
		ev = ev.WithoutTask(task.ID)
	}
	score := map[string]float64{}
	for _, q := range t.cfg.Catalogue {
		pr, err := t.world.Predict(ctx, rwm.Query{Task: task, Proposal: q, Evidence: ev})
		if err != nil {
			return Ranking{}, fmt.Errorf("teacher: predict %s on %s: %w", q.Key(), task.ID, err)
		}
		if !pr.Valid {
			continue
		}
		m := records.CanonicalName(q.Mechanism)
		if old, ok := score[m]; !ok || pr.Gain > old {
			score[m] = pr.Gain
		}
	}
	return rankOf(score, gains), nil
}

// rankOf scores one full ranking (score by mechanism; a mechanism it lacks
// ranks last) against a task's gains. Among mechanisms scored equal first,
// TopGain is the first by name's.
func rankOf(score, gains map[string]float64) Ranking {
	keys := make([]string, 0, len(gains))
	for k := range gains {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s, g := make([]float64, len(keys)), make([]float64, len(keys))
	top, topScore := math.NaN(), math.Inf(-1)
	for i, k := range keys {
		v, ok := score[k]
		if !ok {
			v = math.Inf(-1)
		}
		s[i], g[i] = v, gains[k]
		if v > topScore || math.IsNaN(top) {
			top, topScore = gains[k], v
		}
	}
	out := Ranking{BestRank: evalstat.BestRank(score, gains, math.Inf(-1)), TopGain: top}
	if rho, ok := stat.Spearman(s, g); ok {
		out.Spearman = stat.OrNil(rho)
	}
	return out
}

// MeanRanking averages rankings (of tasks, or of seeds): Spearman's ρ
// over those where it is defined (nil where it is nowhere); NaN means
// without any.
func MeanRanking(rs []Ranking) Ranking {
	if len(rs) == 0 {
		return Ranking{BestRank: math.NaN(), TopGain: math.NaN()}
	}
	var out Ranking
	var rho float64
	n := 0
	for _, r := range rs {
		out.BestRank += r.BestRank
		out.TopGain += r.TopGain
		if r.Spearman != nil {
			rho += *r.Spearman
			n++
		}
	}
	out.BestRank /= float64(len(rs))
	out.TopGain /= float64(len(rs))
	if n > 0 {
		out.Spearman = stat.OrNil(rho / float64(n))
	}
	return out
}

// canonical maps mechanisms to their canonical names.
func canonical(mechs []string) []string {
	out := make([]string, len(mechs))
	for i, m := range mechs {
		out[i] = records.CanonicalName(m)
	}
	return out
}
