package evalstat

import (
	"fmt"
	"math/rand/v2"
)

// Scheme selects how the bootstrap resamples cells.
type Scheme int

const (
	// StateLevel draws the seeds with replacement, then within each drawn
	// seed and stratum as many of its states as the stratum holds: the
	// spread between seeds and between states, with tasks treated as
	// fixed. It is the default of this release and will be removed in the
	// next; Hierarchical replaces it.
	StateLevel Scheme = iota
	// Hierarchical draws the seeds with replacement; then, within each
	// region (Cell.Stratum), as many of its tasks (Cell.Task) as it holds,
	// with replacement, one draw shared by every drawn seed (every seed
	// evaluates the same tasks); then, for each drawn seed and task, as
	// many of that seed's states of the task as it holds. The interval
	// thus counts the tasks: it shows how a mean would move on the next
	// sample of tasks, as well as of seeds and states.
	Hierarchical
)

// String names the scheme ("state-level", "hierarchical").
func (s Scheme) String() string {
	switch s {
	case StateLevel:
		return "state-level"
	case Hierarchical:
		return "hierarchical"
	}
	return fmt.Sprintf("Scheme(%d)", int(s))
}

// resampler is a bootstrap design: all returns every cell index once; draw
// appends one replicate's cell indices (never none) to buf[:0].
type resampler interface {
	all() []int
	draw(rng *rand.Rand, buf []int) []int
}

// taskDesign is the Hierarchical layout. Seeds, regions and tasks are
// numbered in order of first appearance in the cells, so names never
// change a replicate (relabelling tasks or seeds leaves every interval
// bit for bit as it was).
type taskDesign struct {
	seeds   int
	regions [][]int   // per region, its task numbers
	cells   [][][]int // per seed, per task number, the seed's cell indices of the task
}

// newTaskDesign lays out cells for the Hierarchical scheme. It returns an
// error wrapping ErrData when a cell has no Task or a task appears in two
// regions.
func newTaskDesign(method string, cells []Cell) (*taskDesign, error) {
	seedOf, taskOf, regionOf := map[uint64]int{}, map[string]int{}, map[string]int{}
	taskRegion := map[string]string{}
	d := &taskDesign{}
	type at struct{ seed, task int }
	var order []at
	for _, c := range cells {
		if c.Task == "" {
			return nil, fmt.Errorf("%w: method %q: seed %d state %q has no Task (the hierarchical bootstrap resamples tasks)",
				ErrData, method, c.Seed, c.State)
		}
		if r, ok := taskRegion[c.Task]; ok && r != c.Stratum {
			return nil, fmt.Errorf("%w: method %q: task %q is in regions %q and %q", ErrData, method, c.Task, r, c.Stratum)
		}
		taskRegion[c.Task] = c.Stratum
		s, ok := seedOf[c.Seed]
		if !ok {
			s = len(seedOf)
			seedOf[c.Seed] = s
		}
		r, ok := regionOf[c.Stratum]
		if !ok {
			r = len(regionOf)
			regionOf[c.Stratum] = r
			d.regions = append(d.regions, nil)
		}
		k, ok := taskOf[c.Task]
		if !ok {
			k = len(taskOf)
			taskOf[c.Task] = k
			d.regions[r] = append(d.regions[r], k)
		}
		order = append(order, at{s, k})
	}
	d.seeds = len(seedOf)
	d.cells = make([][][]int, d.seeds)
	for s := range d.cells {
		d.cells[s] = make([][]int, len(taskOf))
	}
	for i, o := range order {
		d.cells[o.seed][o.task] = append(d.cells[o.seed][o.task], i)
	}
	return d, nil
}

func (d *taskDesign) all() []int {
	var idx []int
	for _, seed := range d.cells {
		for _, task := range seed {
			idx = append(idx, task...)
		}
	}
	return idx
}

// draw draws seeds, then tasks within each region, then states; a
// replicate whose drawn seeds hold no state of the drawn tasks (possible
// only when some seed lacks some task) is drawn again.
func (d *taskDesign) draw(rng *rand.Rand, buf []int) []int {
	seeds := make([]int, d.seeds)
	var tasks []int
	for {
		buf = buf[:0]
		for i := range seeds {
			seeds[i] = rng.IntN(d.seeds)
		}
		tasks = tasks[:0]
		for _, region := range d.regions {
			for range region {
				tasks = append(tasks, region[rng.IntN(len(region))])
			}
		}
		for _, s := range seeds {
			for _, k := range tasks {
				states := d.cells[s][k]
				for range states {
					buf = append(buf, states[rng.IntN(len(states))])
				}
			}
		}
		if len(buf) > 0 {
			return buf
		}
	}
}

// resamplerFor returns cfg.Scheme's design of cells.
func resamplerFor(cfg Config, method string, cells []Cell) (resampler, error) {
	if cfg.Scheme == Hierarchical {
		return newTaskDesign(method, cells)
	}
	return newDesign(cells), nil
}
