// Package evalplot draws an evaluation's charts as PNG images with
// gonum/plot, from plain values (evalstat summaries, per-step numbers,
// predicted and real values):
//
//   - Methods: every method's Avg@K, Best@K, negative rate and share above
//     2σ_e with confidence intervals, and the paired differences against
//     Base or the best baseline (METHOD.md §1 Data and evaluation);
//   - Training: training curves per method over steps (mean predicted
//     gain, reward, entropy, top mechanism share);
//   - Reliability: the reliability monitors over steps for, e.g., a static
//     and a calibrated world model (METHOD.md §1 On-policy calibration:
//     Δ_M, advantage cosine, pairwise accuracy, predicted-minus-real gap);
//   - Calibration: predicted against real values at each calibration point.
//
// Labels write σ_e as σ with a subscript e (Sigma). Each function writes one
// PNG to an io.Writer and does no other I/O; it is deterministic (the same
// values give the same bytes) and safe for concurrent use.
package evalplot
