package baseline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lm2lm/lm2lm/baseline"
	"github.com/lm2lm/lm2lm/proposer"
	"github.com/lm2lm/lm2lm/records"
)

func newPolicy(t *testing.T) *proposer.Policy {
	t.Helper()
	pol, err := proposer.NewPolicy(cat, proposer.DefaultPolicyConfig(), nil)
	require.NoError(t, err)
	return pol
}

func itemKeys(items []proposer.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.State.Task.ID + ":" + it.Sample.Proposal.Key()
	}
	return out
}

// refuse is an encoder whose catalogue lacks one mechanism.
type refuse struct {
	baseline.Encoder
	mech string
}

func (r refuse) Encode(p records.Proposal) ([]string, error) {
	if p.Mechanism == r.mech {
		return nil, errors.New("not in catalogue")
	}
	return r.Encoder.Encode(p)
}

// By hand from truth over a1, a2 and b1 (evidence's order: lr2, lrHalf,
// warm100, warm50, qk per task): SFT keeps the 13 feasible records (warm50
// diverged on a1 and a2); RFT the 5 with a gain > 0 (lr2 and warm100 on
// a1 and a2, qk on b1; b1's zero gains are not positive).
func TestSupervisedItems(t *testing.T) {
	pol := newPolicy(t)
	sft, err := baseline.SupervisedItems(baseline.SFT, pol, evidence())
	require.NoError(t, err)
	require.Equal(t, []string{
		"a1:" + lr2.Key(), "a1:" + lrHalf.Key(), "a1:" + warm100.Key(), "a1:" + qk.Key(),
		"a2:" + lr2.Key(), "a2:" + lrHalf.Key(), "a2:" + warm100.Key(), "a2:" + qk.Key(),
		"b1:" + lr2.Key(), "b1:" + lrHalf.Key(), "b1:" + warm100.Key(), "b1:" + warm50.Key(), "b1:" + qk.Key(),
	}, itemKeys(sft))
	for _, it := range sft {
		toks, err := pol.Encode(it.Sample.Proposal)
		require.NoError(t, err)
		require.Equal(t, toks, it.Sample.Tokens)
	}
	rft, err := baseline.SupervisedItems(baseline.RFT, pol, evidence())
	require.NoError(t, err)
	require.Equal(t, []string{
		"a1:" + lr2.Key(), "a1:" + warm100.Key(), "a2:" + lr2.Key(), "a2:" + warm100.Key(), "b1:" + qk.Key(),
	}, itemKeys(rft))

	// Records outside the policy's catalogue are skipped.
	rft, err = baseline.SupervisedItems(baseline.RFT, refuse{pol, "lr"}, evidence())
	require.NoError(t, err)
	require.Equal(t, []string{"a1:" + warm100.Key(), "a2:" + warm100.Key(), "b1:" + qk.Key()}, itemKeys(rft))
}

func TestSupervisedItemsErrors(t *testing.T) {
	pol := newPolicy(t)
	_, err := baseline.SupervisedItems("dpo", pol, evidence())
	require.ErrorIs(t, err, baseline.ErrConfig)
	// Nothing positive to imitate: only fb's lr2 (−3) and zero gains.
	ev, err := records.NewEvidence(record(b1, lr2), record(b1, warm100), record(a1, warm50))
	require.NoError(t, err)
	_, err = baseline.SupervisedItems(baseline.RFT, pol, ev)
	require.ErrorIs(t, err, baseline.ErrNoRecords)
	_, err = baseline.SupervisedItems(baseline.SFT, pol, records.Evidence{})
	require.ErrorIs(t, err, baseline.ErrNoRecords)
}

// Supervise runs the asked number of steps, reports each in order, and
// maximum likelihood on the RFT set lowers its NLL; the first step's loss is
// the untrained policy's.
func TestSupervise(t *testing.T) {
	ctx := context.Background()
	pol := newPolicy(t)
	items, err := baseline.SupervisedItems(baseline.RFT, pol, evidence())
	require.NoError(t, err)
	untrained, err := newPolicy(t).Supervise(ctx, items)
	require.NoError(t, err)
	var steps []int
	var loss []float64
	require.NoError(t, baseline.Supervise(ctx, pol, items, 30, func(i int, st proposer.Stats) {
		steps = append(steps, i)
		loss = append(loss, st.Loss)
	}))
	require.Len(t, steps, 30)
	for i, s := range steps {
		require.Equal(t, i+1, s)
	}
	require.Equal(t, untrained.Loss, loss[0])
	require.Less(t, loss[29], loss[0]-0.1, "NLL %v", loss)

	// Zero steps change nothing; nil each is allowed.
	fresh := newPolicy(t)
	require.NoError(t, baseline.Supervise(ctx, fresh, items, 0, nil))
	st, err := fresh.Supervise(ctx, items)
	require.NoError(t, err)
	require.Equal(t, untrained.Loss, st.Loss)
	require.NoError(t, baseline.Supervise(ctx, fresh, items, 2, nil))
}

func TestSuperviseErrors(t *testing.T) {
	pol := newPolicy(t)
	items, err := baseline.SupervisedItems(baseline.SFT, pol, evidence())
	require.NoError(t, err)
	require.ErrorIs(t, baseline.Supervise(context.Background(), pol, items, -1, nil), baseline.ErrConfig)
	require.ErrorIs(t, baseline.Supervise(context.Background(), nil, items, 1, nil), baseline.ErrConfig)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err = baseline.Supervise(ctx, pol, items, 3, func(int, proposer.Stats) { calls++ })
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, calls)
}
