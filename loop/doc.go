// Package loop is LM2LM's method state (METHOD.md §1, with WMRL's
// corrections of §2) as a pure state machine in the shape of etcd raft's
// RawNode: it owns the evidence M, the state pool, the calibration state
// (points done, the one in flight, the trigger's last monitors), WMRL's
// debiaser and weighter, and a random source. A driver hands it inputs and
// reads one output, Ready, that names what is pending. Sampling a policy
// and updating it are the driver's; so are all I/O, goroutines and clocks.
// The library's Trainer (package lm2lm) and the environment service
// (package serve) are two drivers; this page is enough to write a third.
//
// # The vocabulary
//
// Inputs:
//
//   - Draw(n) draws n states from the pool (METHOD.md §1 Vocabulary) and
//     Sources(n) a random source per state for a driver that samples
//     reproducibly from Config.Seed.
//   - Score(groups, predictions) scores a batch: τ_e per task over the
//     batch, shaped rewards, dynamic sampling and advantages (METHOD.md §1
//     Reward and Policy optimisation). The groups become calibration
//     candidates and the batch the one Expand and WMRL act on.
//   - Expand(now) adds the last batch's predicted samples to the pool as
//     synthetic records (METHOD.md §1 Synthetic state expansion).
//   - Observe(step) takes the driver's step and decides what must run for
//     real: the calibration point due (METHOD.md §1 On-policy calibration)
//     or, under WMRL, the last batch's anchor groups (METHOD.md §2).
//   - Absorb(runs) takes those runs back: a calibration's records join M,
//     anchor runs correct the batch's rewards.
//
// Output: Ready(groups...) names the world-model queries that scoring the
// given groups needs under the current M (Ready.Predict) and the real runs
// to execute (Ready.Execute, of Ready.Kind). It changes nothing.
//
// State: Status reports the step, M, the pool, the calibrations and the
// cost; Share the candidates' mechanism shares; Checkpoint and Restore
// carry the whole state, with an opaque part of the driver's own.
//
// # A driver
//
// A driver that trains its own policy, one rollout per step, writes:
//
//	l, err := loop.New(cfg, loop.Setup{Tasks: train, Evidence: m0})
//	for step := 0; step < steps; step++ {
//		states := l.Draw(n)
//		srcs := l.Sources(n)
//		gs := make([]loop.Group, n) // policy.Propose(ctx, states[i], G, rand.New(rand.NewPCG(srcs[i][0], srcs[i][1])))
//		sc, err := l.Score(gs, predict(l.Ready(gs...).Predict))
//		l.Observe(step)
//		if rd := l.Ready(); rd.Kind == loop.CalibrationRuns {
//			ab, err := l.Absorb(execute(rd.Execute)) // ab.Calibration: records, monitors
//			sc, err = l.Score(gs, predict(l.Ready(gs...).Predict)) // the segment's reward under M_{u+1}
//			l.Observe(step)
//		}
//		if rd := l.Ready(); rd.Kind == loop.AnchorRuns { // WMRL
//			ab, err := l.Absorb(execute(rd.Execute))
//			sc = *ab.Scored
//		}
//		err = l.Expand(now)
//		update(policy, gs, sc) // the kept groups' samples with sc.Groups[i].Advantages
//	}
//
// Scoring after a calibration again is what keeps each segment's reward
// function fixed, r(·; M_u) before a point and r(·; M_{u+1}) after it. A
// driver whose trainer steps elsewhere (the environment service) scores
// each request as a batch, observes the trainer's step as it comes,
// executes a calibration's runs in the background while it goes on
// scoring, and absorbs them when they finish; the report keeps the step
// the point was picked at. Predictions made before a calibration was
// absorbed are under the old M: a driver that lets one be absorbed between
// Ready and Score (Status().Calibrations tells) asks Ready again.
//
// Calibration candidates are the groups scored since the last calibration
// started, the newest Config.Candidates: the Trainer sets it to its
// rollout's size, so that a point picks among the current policy's
// proposals, the service to its memory bound.
//
// # Determinism, I/O and concurrency
//
// A Loop does no I/O, starts no goroutines and reads no clock; its only
// randomness is its source seeded by Config.Seed, drawn in the order of the
// driver's inputs (Draw, Sources, a random calibration's picks, anchor
// groups). Given the same inputs it takes the same decisions, bit for bit,
// and a loop restored from a checkpoint goes on as the one it was taken of.
// A Loop is not safe for concurrent use: a driver with several goroutines
// serialises its calls.
package loop
