package lab

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every task of every generated split and suite draws from its own
// generator stream: no (first, second) PCG seed of the V3 splits is the
// stream of another task, of V3 or of the V2 suites under seeds 1 and 2
// (training, v2-val, v2-val2, the V2 test split).
func TestGeneratorStreamsDisjoint(t *testing.T) {
	type stream [2]uint64
	owner := map[stream]string{}
	add := func(id string, a, b uint64) {
		t.Helper()
		k := stream{a, b}
		require.NotContains(t, owner, k, "%s shares the stream of %s", id, owner[k])
		owner[k] = id
	}
	for _, seed := range []uint64{DefaultSuiteSeed, 2} {
		s := SuiteV2(seed)
		for _, x := range s.All() {
			a, b := suiteStream(seed, x.ID[len(s.Name):])
			add(x.ID, a, b)
		}
	}
	v2 := len(owner)
	require.Equal(t, 200, v2)
	for _, sp := range []Split{V3Test(), V3Val()} {
		for _, x := range sp.Tasks {
			a, b := SplitStream(x.ID)
			require.NotContains(t, []uint64{1, 2}, a, "a V3 stream's first word is no suite seed")
			add(x.ID, a, b)
		}
	}
	require.Equal(t, v2+96, len(owner))
	a1, _ := SplitStream(V3TestName + "/x")
	a2, _ := SplitStream(V3ValName + "/x")
	require.NotEqual(t, a1, a2)
}

// The V2 stream helper reproduces the streams the suite was generated
// with: a task drawn again from suiteStream equals the suite's task.
func TestSuiteStreamReproduces(t *testing.T) {
	s := SuiteV2(2)
	x := s.TestOut[3]
	a, b := suiteStream(2, x.ID[len(s.Name):])
	y := DefaultSpace().OutOfDistribution().Sample(newRand(a, b), x.Family)
	y.ID, y.Split = x.ID, x.Split
	require.Equal(t, x, y)
	z := V3Test().Tasks[7]
	a, b = SplitStream(z.ID)
	w := DefaultSpace().Sample(newRand(a, b), z.Family)
	w.ID, w.Split = z.ID, z.Split
	require.Equal(t, z, w)
}
