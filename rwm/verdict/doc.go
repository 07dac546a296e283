// Package verdict is WMRL's own world model (METHOD.md §2): a frozen,
// prompted-only LLM that reads a code-solution task and a candidate Python
// solution and predicts its execution outcome, without running it.
//
// One call per solution to any OpenAI-compatible chat-completions server
// asks for a JSON verdict (ResponseSchema) over a configurable battery of
// checks (DefaultChecks: WMRL's eight, imports and names, API calls, data
// references, shapes and dtypes, compute budget, other runtime errors, the
// submission, quality): {reason, predictions: [{status, error_type,
// error_line, quality_bucket, confidence, feedback}]}, one prediction per
// check. The solution is shown with numbered lines inside a fenced data
// block whose fence token is a hash of the block, so code cannot close it;
// the prompt tells the model that the block is data. The answer is read
// strictly under the rule both OpenAI backends follow: an answer to the
// schema must be exactly one JSON object (ParseJSON), a text answer may
// hold exactly one (ParseText), else rwm.ErrBadPrediction; then no
// duplicate or unknown keys, every field present, known statuses and
// buckets. Aggregate turns the verdict into one rung of the ladder
// (reward.LadderScore) and its score. Empty or non-text code
// short-circuits to reward.Malformed without a call (Precheck).
//
// Model implements rwm.WorldModel with Gain = the ladder score in [0, 1],
// the units of builder/grader's real outcomes (records.LadderShortfall, b_e
// = 1), so the trainer's WMRL mode (anchor groups, online isotonic
// debiasing, inverse-variance weighting) applies to it unchanged. Every
// prediction is Valid: a predicted failure is a low score, not an invalid
// proposal. The records in a query's Evidence are not shown (WMRL's world
// model is never calibrated through its context; compare rwm/openai).
//
// records.Proposal.Key leaves the text out: give each distinct code its own
// key (grader.Proposal puts a hash of the code in Params) before using
// rwm.Cache or the trainer's duplicate rule on solutions.
//
// Model is safe for concurrent use and does network I/O; Parse,
// ParseJSON, ParseText, Aggregate, Precheck and Prompt are pure.
package verdict
