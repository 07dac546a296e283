package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lm2lm/lm2lm/evalstat"
	"github.com/lm2lm/lm2lm/lab"
	"github.com/lm2lm/lm2lm/records"
)

// ScaleInfo states the robust scale of a comparison (-scale robust) in its
// JSON file: every gain g in σ_e units became clip(g·σ_e/τ_e, −Clip, Clip)
// with τ_e = max(σ_e, the floor of the task's family), an infeasible run
// staying at −Clip (evalstat.Scale).
type ScaleInfo struct {
	Name string `json:"name"` // "robust"
	// Floors is the σ floor of each family: the median σ_e of its
	// training tasks (known before any evaluation, the same for every
	// method); OtherFamilies is the floor of a family without training
	// tasks, the median σ_e over all of them.
	Floors        map[string]float64 `json:"sigma_floors"`
	OtherFamilies float64            `json:"sigma_floor_other_families"`
	// TrainTasks counts the training tasks the floors come from.
	TrainTasks int     `json:"floor_train_tasks"`
	Clip       float64 `json:"clip"`
}

// robustScale is the robust scale of a run directory and the family and
// σ_e of every task its results name.
type robustScale struct {
	scale evalstat.Scale
	tasks map[string]records.Task // by ID
	info  ScaleInfo
}

// readScale reads the training and test tasks' reference runs (b_e, σ_e)
// from the run directory's store, opened read-only, and returns the
// robust scale with the training tasks' floors. It never writes the store:
// a task whose reference runs are not stored is an error (the lab would
// train them in memory first), and the tasks the results left out (their
// reference run failed) are skipped.
func readScale(ctx context.Context, o options, dir string, results []Result) (*robustScale, error) {
	storePath := filepath.Join(dir, "records.jsonl")
	cfg := records.DefaultFileConfig()
	cfg.ReadOnly = true
	store, err := records.OpenFile(storePath, cfg)
	if err != nil {
		return nil, fmt.Errorf("-scale robust reads the tasks' σ_e from %s: %w", storePath, err)
	}
	defer store.Close()
	lcfg := lab.DefaultConfig()
	if lcfg.Tasks, _, err = o.tasks(); err != nil {
		return nil, err
	}
	l, err := lab.New(lcfg, store)
	if err != nil {
		return nil, err
	}
	var leftOut []string
	for _, r := range results {
		leftOut = append(leftOut, r.LeftOut...)
	}
	var ids []string
	for _, id := range l.IDs("") {
		if !slices.Contains(leftOut, id) {
			ids = append(ids, id)
		}
	}
	tasks, out, err := l.Ready(ctx, ids, nil)
	if err != nil {
		return nil, fmt.Errorf("-scale robust reads the tasks' σ_e from %s: %w", storePath, err)
	}
	if len(out) > 0 {
		return nil, fmt.Errorf("-scale robust: task %s has no reference runs in %s: %w", out[0].ID, storePath, out[0].Err)
	}
	return newRobustScale(tasks)
}

// newRobustScale returns the robust scale whose floors are the training
// tasks' median σ_e per family, clipped at the reward clip c (the
// infeasible gain's magnitude), over tasks.
func newRobustScale(tasks []records.Task) (*robustScale, error) {
	var noise []evalstat.Noise
	rs := &robustScale{tasks: map[string]records.Task{}}
	for _, t := range tasks {
		rs.tasks[t.ID] = t
		if t.Split == records.Train {
			noise = append(noise, evalstat.Noise{Family: t.Family, Sigma: t.SeedNoise})
		}
	}
	s, err := evalstat.NewScale(noise, -infeasibleGain)
	if err != nil {
		return nil, fmt.Errorf("-scale robust: floors of the training tasks: %w", err)
	}
	rs.scale = s
	rs.info = ScaleInfo{Name: "robust", Floors: s.Floors, OtherFamilies: s.Fallback, TrainTasks: len(noise), Clip: s.Clip}
	return rs, nil
}

// rescale returns copies of results whose gains are on the robust scale
// (the result files are not touched). In each state the first Infeasible
// gains equal to the infeasible gain −c are the infeasible runs and stay
// at −c; every other gain is a measured one, re-expressed.
func (rs *robustScale) rescale(results []Result) ([]Result, error) {
	out := make([]Result, len(results))
	for i, r := range results {
		out[i] = r
		out[i].States = make([]StateResult, len(r.States))
		for k, s := range r.States {
			t, ok := rs.tasks[s.Task]
			if !ok {
				return nil, fmt.Errorf("-scale robust: %s seed %d: state %s names task %s, which has no σ_e here", r.Method, r.Seed, s.ID, s.Task)
			}
			s.Gains = slices.Clone(s.Gains)
			infeasible := s.Infeasible
			for g, x := range s.Gains {
				if x == infeasibleGain && infeasible > 0 {
					infeasible--
					continue
				}
				s.Gains[g] = rs.scale.Apply(t.Family, t.SeedNoise, x)
			}
			out[i].States[k] = s
		}
	}
	return out, nil
}

// describe states the scale for the Markdown: the transform, the clip and
// the floor of every family.
func (i ScaleInfo) describe() string {
	var floors []string
	for _, f := range slices.Sorted(maps.Keys(i.Floors)) {
		floors = append(floors, fmt.Sprintf("%s %.4g", f, i.Floors[f]))
	}
	return fmt.Sprintf("each gain g (in σ_e units) is g·σ_e/τ_e with τ_e = max(σ_e, the σ floor of the task's family), clipped at ±%g; "+
		"floors = each family's median σ_e over the %d training tasks (%s; other families %.4g)",
		i.Clip, i.TrainTasks, strings.Join(floors, ", "), i.OtherFamilies)
}

// scaleTitle is the methods chart's note of the scale ("" for raw).
func scaleTitle(o options) string {
	if o.scale == "robust" {
		return fmt.Sprintf(", robust scale (σ floored at the family's median, clipped at ±%g)", -infeasibleGain)
	}
	return ""
}
