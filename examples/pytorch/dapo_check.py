#!/usr/bin/env python3
"""Recompute lm2lm's DAPO loss and gradient with torch autograd, as verl does.

    python3 dapo_check.py <batch.jsonl> <new_logprobs.json> <out.json> \
        [--eps-low 0.2] [--eps-high 0.28] [--clip-ratio-c 3]

<batch.jsonl> is a batch written by lm2lm's proposer/openai ExportBatch
(schema lm2lm.proposer.openai.batch/v1): per sample the behaviour
log-probs "old_logprobs" and the advantage. <new_logprobs.json> holds the
current policy's log-probs of the same tokens, {"new_logprobs": [[...], ...]},
one list per batch line. The script computes the token-level clipped
surrogate of verl's compute_policy_loss (verl/trainer/ppo/core_algos.py) in
float64 for both aggregations ("token-mean", "seq-mean-token-mean") with the
dual clip off and on (clip_ratio_c), backpropagates with autograd, and writes

    {"results": [{"loss_agg_mode": ..., "clip_ratio_c": c or null, "loss": ...,
                  "grad": [[...], ...], "pg_clipfrac": ..., "pg_clipfrac_lower": ...,
                  "tokens": n}, ...]}

where grad[i][t] is d loss / d new_logprobs[i][t].

As verl: ratio = exp(clamp(new - old, -20, 20)); per token
max(-A*ratio, -A*clip(ratio, 1-eps_low, 1+eps_high)), and for A < 0 the
minimum of that and -A*c (dual clip, when on). Aggregation follows verl's
agg_loss with exact divisions: token-mean is the masked sum over the
number of tokens; seq-mean-token-mean averages each sequence's tokens and
then the sequences that have tokens (newer verl adds 1e-8 to each token
count and divides by the micro-batch size, a relative change of about 1e-8
that a 1e-9 comparison would see). A batch without tokens has loss 0.

Standard library and torch only.
"""

import argparse
import json
import math
import sys

SCHEMA = "lm2lm.proposer.openai.batch/v1"


def read_batch(path):
    lines = []
    with open(path) as f:
        for n, text in enumerate(f, 1):
            if not text.strip():
                continue
            line = json.loads(text)
            if line.get("schema") != SCHEMA:
                raise ValueError("line %d: schema %r, want %r" % (n, line.get("schema"), SCHEMA))
            if line.get("index") != len(lines):
                raise ValueError("line %d: index %r, want %d" % (n, line.get("index"), len(lines)))
            lines.append(line)
    return lines


def policy_loss(torch, old, new, adv, mask, eps_low, eps_high, clip_ratio_c, mode):
    """verl's compute_policy_loss on (B, T) tensors; returns (loss, clipfrac, clipfrac_lower)."""
    tokens = mask.sum()
    neg_kl = torch.clamp(new - old, min=-20.0, max=20.0)
    ratio = torch.exp(neg_kl)
    pg_losses1 = -adv * ratio
    pg_losses2 = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    clipfrac = (torch.gt(pg_losses2, pg_losses1).double() * mask).sum() / tokens
    if clip_ratio_c is None:
        pg_losses = clip_pg_losses1
        clipfrac_lower = torch.zeros((), dtype=torch.float64)
    else:
        pg_losses3 = -adv * clip_ratio_c
        clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
        lower = torch.gt(clip_pg_losses1, pg_losses3) * (adv < 0)
        clipfrac_lower = (lower.double() * mask).sum() / tokens
        pg_losses = torch.where(adv < 0, clip_pg_losses2, clip_pg_losses1)
    masked = pg_losses * mask
    if mode == "token-mean":
        loss = masked.sum() / tokens
    else:
        counts = mask.sum(dim=-1)
        has = counts > 0
        seq = masked.sum(dim=-1)[has] / counts[has]
        loss = seq.sum() / has.sum()
    return loss, clipfrac, clipfrac_lower


def check(torch, lines, new_lps, eps_low, eps_high, clip_ratio_c, mode):
    b = len(lines)
    t = max([len(l["old_logprobs"]) for l in lines] + [1])
    old = torch.zeros(b, t, dtype=torch.float64)
    new = torch.zeros(b, t, dtype=torch.float64)
    mask = torch.zeros(b, t, dtype=torch.float64)
    adv = torch.zeros(b, 1, dtype=torch.float64)
    for i, (l, nl) in enumerate(zip(lines, new_lps)):
        n = len(l["old_logprobs"])
        if len(nl) != n:
            raise ValueError("line %d: %d new log-probs for %d old ones" % (i, len(nl), n))
        old[i, :n] = torch.tensor(l["old_logprobs"], dtype=torch.float64)
        new[i, :n] = torch.tensor(nl, dtype=torch.float64)
        mask[i, :n] = 1
        adv[i, 0] = l["advantage"]
    new.requires_grad_(True)
    out = {"loss_agg_mode": mode, "clip_ratio_c": clip_ratio_c, "tokens": int(mask.sum().item())}
    if out["tokens"] == 0:
        out.update(loss=0.0, grad=[[] for _ in lines], pg_clipfrac=0.0, pg_clipfrac_lower=0.0)
        return out
    loss, clipfrac, lower = policy_loss(torch, old, new, adv, mask, eps_low, eps_high, clip_ratio_c, mode)
    loss.backward()
    grad = new.grad
    out.update(loss=loss.item(), pg_clipfrac=clipfrac.item(), pg_clipfrac_lower=lower.item(),
               grad=[grad[i, : len(l["old_logprobs"])].tolist() for i, l in enumerate(lines)])
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batch")
    ap.add_argument("new_logprobs")
    ap.add_argument("out")
    ap.add_argument("--eps-low", type=float, default=0.2)
    ap.add_argument("--eps-high", type=float, default=0.28)
    ap.add_argument("--clip-ratio-c", type=float, default=3.0)
    args = ap.parse_args(argv[1:])
    if not args.clip_ratio_c > 1:
        ap.error("--clip-ratio-c must be > 1 (verl's assertion)")
    lines = read_batch(args.batch)
    with open(args.new_logprobs) as f:
        new_lps = json.load(f)["new_logprobs"]
    if len(new_lps) != len(lines):
        raise ValueError("%d new log-prob lists for %d batch lines" % (len(new_lps), len(lines)))
    import torch

    torch.use_deterministic_algorithms(True)
    results = []
    for mode in ("token-mean", "seq-mean-token-mean"):
        for c in (None, args.clip_ratio_c):
            r = check(torch, lines, new_lps, args.eps_low, args.eps_high, c, mode)
            if not math.isfinite(r["loss"]):
                raise ValueError("non-finite loss %r (%s, c=%r)" % (r["loss"], mode, c))
            results.append(r)
    with open(args.out, "w") as f:
        json.dump({"results": results}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
