#!/usr/bin/env python3
"""Measure a trained run of train.py from its checkpoint: the trusted evaluator.

    LM2LM_CHECKPOINT=<checkpoint> python3 evaluate.py <job file> <result file>

overlay.SandboxRunner runs it (SandboxConfig.Eval) after each sandboxed
training run, in a directory of its own holding a copy of this unchanged
code (never an overlay's), the checkpoint the run wrote and the run's job
file, with the held-out text bound read-only: the training run never saw
that text, and nothing an overlay wrote runs here. It rebuilds the task's
model from the job's recipe with train.py's unchanged build_model, loads the
checkpoint as data (torch.load with weights_only: tensors only, no pickled
code), and scores the held-out bytes with train.py's unchanged evaluate: the
loss is validation bits per byte, as train.py's own, bit for bit on CPU.

The result file is {"loss", "gain"?} (exit 0; the gain against the job's
reference loss of its seed when the spec gives it), or {"infeasible": reason}
with exit 3 when the checkpoint is missing, is not a state dict of finite
tensors, or does not fit the model of the recipe (an overlay that changes
the architecture cannot be measured by this evaluator), or nothing with exit
75 (the held-out text or the device unavailable) or 2 (a bad job file).

Standard library and torch only.
"""

import math
import os
import sys
import time

import train


def log(*args):
    print("evaluate.py:", *args, file=sys.stderr, flush=True)


def measure(job, spec, checkpoint):
    recipe = train.check_recipe(spec["recipe"], "recipe")
    import torch

    device = train.pick_device(torch, spec.get("device", "auto"))
    if device == "cpu":
        torch.set_num_threads(max(1, int(spec.get("threads", 1))))
        torch.use_deterministic_algorithms(True)
    if not spec.get("heldout"):
        raise train.BadJob("the spec names no held-out text to evaluate on")
    try:
        with open(spec["heldout"], "rb") as f:
            val = f.read()
    except OSError as e:
        raise train.Transient("held-out text: %s" % e)
    if len(val) < 2:
        raise train.BadJob("held-out text %s (%d bytes) is too small" % (spec["heldout"], len(val)))
    try:
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as e:  # missing, truncated, not a tensor file, pickled code refused
        raise train.Infeasible("checkpoint unreadable: %s: %s" % (type(e).__name__, str(e)[:200]))
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise train.Infeasible("checkpoint is not a state dict of tensors")
    for k, v in state.items():
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise train.Infeasible("checkpoint tensor %s is not finite" % k[:64])
    torch.manual_seed(0)  # build_model initialises; every parameter is then loaded
    model = train.build_model(torch, recipe)
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError) as e:
        raise train.Infeasible("checkpoint does not fit the recipe's model: %s" % str(e).splitlines()[0][:300])
    model = model.to(device)
    start = time.time()
    bpb, scored = train.evaluate(torch, model, val, recipe["context"], device, int(spec.get("eval_bytes", 8192)))
    if not math.isfinite(bpb):
        raise train.Infeasible("diverged: validation loss %r" % bpb)
    log("%.5f bits per byte over %d held-out bytes" % (bpb, scored))
    out = {"loss": bpb, "seeds": [job["seed"]]}
    ref = (spec.get("reference_losses") or {}).get(str(job["seed"]))
    if ref is not None:
        out["gain"] = float(ref) - bpb
    out["cost"] = {"wall_seconds": time.time() - start, "flops": train.flops_of(recipe, 0, scored)}
    return out


def main(argv):
    if len(argv) != 3:
        print("usage: LM2LM_CHECKPOINT=<checkpoint> evaluate.py <job file> <result file>", file=sys.stderr)
        return train.EXIT_BAD_JOB
    checkpoint = os.environ.get("LM2LM_CHECKPOINT", "")
    try:
        if not checkpoint:
            raise train.BadJob("LM2LM_CHECKPOINT names no checkpoint")
        job, spec = train.read_job(argv[1])
        out = measure(job, spec, checkpoint)
    except train.BadJob as e:
        log("bad job:", e)
        return train.EXIT_BAD_JOB
    except train.Infeasible as e:
        log("infeasible:", e)
        train.write_result(argv[2], {"infeasible": str(e)})
        return train.EXIT_INFEASIBLE
    except train.Transient as e:
        log("transient:", e)
        return train.EXIT_TRANSIENT
    train.write_result(argv[2], out)
    return train.EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv))
