package evalstat

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// Components are the variance components of the per-state Avg@K of a set
// of cells (a method's, or the paired differences of Differences) under
// the model the Hierarchical bootstrap resamples: a state's value is
//
//	μ + region + seed + task + seed×task + state,
//
// the task term drawn within its region, every term independent with
// mean zero. They are method-of-moments (ANOVA) estimates from the table
// of seed × task means, each clamped at zero. A design's interval width
// follows from them (HalfWidth): how many seeds and states per task a
// comparison needs for a stated precision.
type Components struct {
	// Seeds and Tasks count the seeds and the tasks the estimate used
	// (the tasks every seed evaluated); Regions the regions they fall in.
	Seeds, Tasks, Regions int
	// States is the harmonic mean of the states per (seed, task).
	States float64
	// Seed, Task, SeedTask and State are the variances of the seed, task
	// (within its region), seed × task and state terms, in squared σ_e
	// units.
	Seed, Task, SeedTask, State float64
}

// VarianceComponents estimates the variance components of the cells'
// per-state Avg@K (the mean of Cell.Gains). Every cell needs a Task, and a
// task one Stratum (its region); tasks that some seed did not evaluate
// are left out of the estimate. It needs at least two seeds, two tasks
// in some region and two states in some (seed, task); otherwise, or for a
// cell with no gains, the error wraps ErrData.
//
// With S seeds, T tasks in R regions, cell means m_st over n_st states
// (n̄ their harmonic mean), seed means m_s., task means m_.t, region means
// m_r and the grand mean m..:
//
//	State    = Σ (x − m_st)² / Σ (n_st − 1)
//	MS_seed  = T Σ_s (m_s. − m..)² / (S − 1)
//	MS_task  = S Σ_t (m_.t − m_r(t))² / (T − R)
//	MS_inter = Σ_st (m_st − m_s. − m_.t + m..)² / ((S − 1)(T − 1))
//	SeedTask = max(0, MS_inter − State/n̄)
//	Seed     = max(0, (MS_seed − MS_inter) / T)
//	Task     = max(0, (MS_task − MS_inter) / S)
func VarianceComponents(cells []Cell) (Components, error) {
	var c Components
	tab, err := tabulate(cells)
	if err != nil {
		return c, err
	}
	tab.keepComplete()
	regions, regionTasks := tab.byRegion()
	S, T, R := len(tab.seeds), len(tab.tasks), len(regions)
	c.Seeds, c.Tasks, c.Regions = S, T, R
	if S < 2 || T-R < 1 {
		return c, fmt.Errorf("%w: %d seeds and %d tasks in %d regions; want ≥ 2 seeds and two tasks in some region", ErrData, S, T, R)
	}
	m, within, dfWithin, inv := tab.cellMeans()
	if dfWithin < 1 {
		return c, fmt.Errorf("%w: one state per (seed, task); want two in some", ErrData)
	}
	c.State = within / dfWithin
	c.States = float64(S*T) / inv
	msSeed, msTask, msInter := meanSquares(m, regions, regionTasks)
	c.SeedTask = math.Max(0, msInter-c.State/c.States)
	c.Seed = math.Max(0, (msSeed-msInter)/float64(T))
	c.Task = math.Max(0, (msTask-msInter)/float64(S))
	return c, nil
}

// seedTask keys a cell of the seed × task table.
type seedTask struct {
	seed uint64
	task string
}

// stateTable is the per-state Avg@K of a set of cells grouped by (seed,
// task), with the seeds and the tasks in the order they first appear and
// each task's region (its cells' Stratum).
type stateTable struct {
	vals   map[seedTask][]float64
	seeds  []uint64
	tasks  []string
	region map[string]string
}

// tabulate groups the cells' per-state Avg@K by (seed, task). A cell with
// no gains or no Task, or a task in two regions, is an error wrapping
// ErrData.
func tabulate(cells []Cell) (stateTable, error) {
	t := stateTable{vals: map[seedTask][]float64{}, region: map[string]string{}}
	for _, cl := range cells {
		if len(cl.Gains) == 0 {
			return t, fmt.Errorf("%w: seed %d state %q has no gains", ErrData, cl.Seed, cl.State)
		}
		if cl.Task == "" {
			return t, fmt.Errorf("%w: seed %d state %q has no Task", ErrData, cl.Seed, cl.State)
		}
		if r, ok := t.region[cl.Task]; ok && r != cl.Stratum {
			return t, fmt.Errorf("%w: task %q is in regions %q and %q", ErrData, cl.Task, r, cl.Stratum)
		} else if !ok {
			t.region[cl.Task] = cl.Stratum
			t.tasks = append(t.tasks, cl.Task)
		}
		if !slices.Contains(t.seeds, cl.Seed) {
			t.seeds = append(t.seeds, cl.Seed)
		}
		k := seedTask{cl.Seed, cl.Task}
		t.vals[k] = append(t.vals[k], statsOf(cl.Gains, 0).avg)
	}
	return t, nil
}

// keepComplete drops the tasks that some seed did not evaluate.
func (t *stateTable) keepComplete() {
	t.tasks = slices.DeleteFunc(t.tasks, func(task string) bool {
		for _, s := range t.seeds {
			if len(t.vals[seedTask{s, task}]) == 0 {
				return true
			}
		}
		return false
	})
}

// byRegion returns the regions of the table's tasks in the order they
// first appear, and for each region the indices of its tasks.
func (t stateTable) byRegion() ([]string, map[string][]int) {
	regionTasks := map[string][]int{}
	var regions []string
	for j, task := range t.tasks {
		r := t.region[task]
		if _, ok := regionTasks[r]; !ok {
			regions = append(regions, r)
		}
		regionTasks[r] = append(regionTasks[r], j)
	}
	return regions, regionTasks
}

// cellMeans returns the seed × task table of cell means m_st, the
// within-cell sum of squares Σ (x − m_st)², its degrees of freedom
// Σ (n_st − 1) and Σ 1/n_st.
func (t stateTable) cellMeans() (m [][]float64, within, dfWithin, inv float64) {
	m = make([][]float64, len(t.seeds))
	for i, s := range t.seeds {
		m[i] = make([]float64, len(t.tasks))
		for j, task := range t.tasks {
			v := t.vals[seedTask{s, task}]
			mean := 0.0
			for _, x := range v {
				mean += x
			}
			mean /= float64(len(v))
			for _, x := range v {
				within += (x - mean) * (x - mean)
			}
			dfWithin += float64(len(v) - 1)
			inv += 1 / float64(len(v))
			m[i][j] = mean
		}
	}
	return m, within, dfWithin, inv
}

// meanSquares returns MS_seed, MS_task (tasks about their region's mean)
// and MS_inter of the S × T table of cell means m, whose tasks fall in
// regions as regionTasks indexes them; MS_inter is 0 for one task.
func meanSquares(m [][]float64, regions []string, regionTasks map[string][]int) (msSeed, msTask, msInter float64) {
	S, T, R := len(m), len(m[0]), len(regions)
	rowMean, colMean := make([]float64, S), make([]float64, T)
	grand := 0.0
	for i := range m {
		for j, x := range m[i] {
			rowMean[i] += x / float64(T)
			colMean[j] += x / float64(S)
			grand += x / float64(S*T)
		}
	}
	var ssSeed, ssTask, ssInter float64
	for i := range rowMean {
		ssSeed += (rowMean[i] - grand) * (rowMean[i] - grand)
	}
	for _, r := range regions {
		js := regionTasks[r]
		rm := 0.0
		for _, j := range js {
			rm += colMean[j] / float64(len(js))
		}
		for _, j := range js {
			ssTask += (colMean[j] - rm) * (colMean[j] - rm)
		}
	}
	for i := range m {
		for j, x := range m[i] {
			d := x - rowMean[i] - colMean[j] + grand
			ssInter += d * d
		}
	}
	msSeed = float64(T) * ssSeed / float64(S-1)
	msTask = float64(S) * ssTask / float64(T-R)
	if T > 1 {
		msInter = ssInter / float64((S-1)*(T-1))
	}
	return msSeed, msTask, msInter
}

// HalfWidth is the predicted half-width of the level interval of the
// mean per-state Avg@K for a design of seeds seeds and states states per
// task on the estimate's tasks, every state weighing the same: z times
// the square root of
//
//	Seed/seeds + Task/T + SeedTask/(seeds·T) + State/(seeds·T·states),
//
// z the standard normal's (1+level)/2 quantile (the task term has no
// between-region part: the bootstrap draws tasks within their regions,
// Σ_r (T_r/T)² Task/T_r = Task/T). It is a design figure, a normal
// approximation to the Hierarchical bootstrap's percentile interval.
// It returns NaN for seeds or states below 1 or level outside (0, 1).
func (c Components) HalfWidth(level float64, seeds, states int) float64 {
	if seeds < 1 || states < 1 || !(level > 0 && level < 1) || c.Tasks < 1 {
		return math.NaN()
	}
	s, t, n := float64(seeds), float64(c.Tasks), float64(states)
	v := c.Seed/s + c.Task/t + c.SeedTask/(s*t) + c.State/(s*t*n)
	return distuv.UnitNormal.Quantile((1+level)/2) * math.Sqrt(v)
}

// Differences pairs the cells of a and b by (Seed, State), as Compare
// does, and returns one cell per pair whose single gain is Avg@K(a) −
// Avg@K(b), with a's Seed, State, Stratum and Task: the cells whose
// VarianceComponents size a paired comparison. A pair whose cells name
// different tasks or strata is an error wrapping ErrData; no pair at all
// wraps ErrEmpty.
func Differences(a, b []Cell) ([]Cell, error) {
	byKey := make(map[cellKey]Cell, len(b))
	for _, c := range b {
		byKey[cellKey{c.Seed, c.State}] = c
	}
	var out []Cell
	for _, c := range a {
		o, ok := byKey[cellKey{c.Seed, c.State}]
		if !ok {
			continue
		}
		if len(c.Gains) == 0 || len(o.Gains) == 0 {
			return nil, fmt.Errorf("%w: seed %d state %q has no gains", ErrData, c.Seed, c.State)
		}
		if o.Task != c.Task || o.Stratum != c.Stratum {
			return nil, fmt.Errorf("%w: seed %d state %q is task %q (%q) in one and %q (%q) in the other",
				ErrData, c.Seed, c.State, c.Task, c.Stratum, o.Task, o.Stratum)
		}
		d := statsOf(c.Gains, 0).avg - statsOf(o.Gains, 0).avg
		out = append(out, Cell{Seed: c.Seed, State: c.State, Stratum: c.Stratum, Task: c.Task, Gains: []float64{d}})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no (seed, state) in common", ErrEmpty)
	}
	return out, nil
}
