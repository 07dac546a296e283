#!/usr/bin/env python3
"""The training command of an lm2lm config file (cmd/lm2lm), over train.py.

    python3 lm2lm_env.py <job file> <result file>

cmd/lm2lm passes each job as data (builder.JobFile, protocol 1): the task,
the catalogue proposal (mechanism and parameters), the seed, and the spec
{"recipe": <the task's recipe from the config file>, "reference_losses":
{"<seed>": loss}}. This script is what a team writes once for its own code:
it applies the proposal to the task's recipe with its own implementation of
each mechanism card, then trains the result with train.py (next to this
file) and lets train.py write the result and choose the exit code.

The task's recipe (the config file's tasks[].recipe) holds:
  corpus     the text file trained on; relative paths are taken from the
             folder of this script
  eval_bytes validation bytes scored (default 8192)
  threads    CPU threads (default 1), device (default "cpu")
  any field of train.py's RECIPE; the others come from BASE below.

The mechanisms (the catalogue in the config file must use these names):
  lr-scale  factor   multiply the peak learning rate
  warmup    frac     linear warm-up over this fraction of the steps
  width     factor   multiply the model width (heads kept; must divide it)
  schedule  kind     cosine | linear | constant
  steps     factor   multiply the optimiser steps (warm-up scaled with them)
The no-change proposal ("none") trains the task's recipe. A mechanism or
parameter it does not know is infeasible (exit 3), as is a
recipe train.py rejects. The proposal's free text is never read.

Standard library only here; train.py needs torch.
"""

import json
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import train  # noqa: E402  (train.py, next to this file)

# BASE is the recipe a task's recipe overrides: train.py's tiny GPT, about
# one CPU second at 40 steps.
BASE = {
    "width": 32, "depth": 2, "heads": 2, "mlp_ratio": 4, "context": 32, "batch": 16, "steps": 160,
    "lr": 1e-2, "min_lr_frac": 0.1, "warmup": 10, "schedule": "cosine", "optimizer": "adamw",
    "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.1, "grad_clip": 1.0, "dropout": 0.0,
    "activation": "gelu", "tie_embeddings": True, "init_std": 0.1,
}
RUN_KEYS = ("corpus", "eval_bytes", "threads", "device", "block", "val_every")


def number(params, name):
    try:
        x = float(params[name])
    except (KeyError, TypeError, ValueError):
        raise train.Infeasible("parameter %s missing or not a number" % name)
    if not math.isfinite(x) or x <= 0 and name != "frac":
        raise train.Infeasible("parameter %s = %r out of range" % (name, params[name]))
    return x


def apply(recipe, mechanism, params):
    """Apply one catalogue proposal to recipe in place."""
    known = {"lr-scale": {"factor"}, "warmup": {"frac"}, "width": {"factor"}, "schedule": {"kind"},
             "steps": {"factor"}, "none": set()}
    if mechanism not in known:
        raise train.Infeasible("mechanism %r is not implemented by this script" % mechanism[:64])
    extra = sorted(set(params) - known[mechanism])
    if extra:
        raise train.Infeasible("mechanism %s has no parameter %s" % (mechanism, extra[0][:64]))
    if mechanism == "lr-scale":
        recipe["lr"] *= number(params, "factor")
    elif mechanism == "warmup":
        frac = number(params, "frac")
        if frac > 1:
            raise train.Infeasible("frac %g > 1" % frac)
        recipe["warmup"] = int(round(frac * recipe["steps"]))
    elif mechanism == "width":
        recipe["width"] = max(1, int(round(recipe["width"] * number(params, "factor"))))
    elif mechanism == "schedule":
        recipe["schedule"] = str(params.get("kind", ""))
    elif mechanism == "steps":
        w = recipe["warmup"] / recipe["steps"]
        recipe["steps"] = max(1, int(round(recipe["steps"] * number(params, "factor"))))
        recipe["warmup"] = min(recipe["steps"], int(round(w * recipe["steps"])))


def main(argv):
    if len(argv) != 3:
        train.log("usage: lm2lm_env.py <job file> <result file>")
        return train.EXIT_BAD_JOB
    try:
        with open(argv[1], "rb") as f:
            job = json.load(f)
        spec = job["spec"]
        task_recipe = dict(spec["recipe"])
        proposal = job.get("proposal") or {}
        mechanism = " ".join(str(proposal.get("mechanism", "none")).lower().split())
        params = proposal.get("params") or {}
    except (OSError, ValueError, KeyError, TypeError) as e:
        train.log("cannot read the job: %s" % e)
        return train.EXIT_BAD_JOB
    run = {k: task_recipe.pop(k) for k in RUN_KEYS if k in task_recipe}
    corpus = run.get("corpus")
    if not isinstance(corpus, str) or not corpus:
        train.log("the task's recipe has no corpus")
        return train.EXIT_BAD_JOB
    run["corpus"] = os.path.join(HERE, corpus)
    recipe = dict(BASE)
    unknown = sorted(set(task_recipe) - set(BASE))
    if unknown:
        train.log("the task's recipe has unknown fields %s" % unknown)
        return train.EXIT_BAD_JOB
    recipe.update(task_recipe)
    try:
        apply(recipe, mechanism, params)
    except train.Infeasible as e:
        train.write_result(argv[2], {"infeasible": str(e)})
        train.log("infeasible: %s" % e)
        return train.EXIT_INFEASIBLE
    run.setdefault("device", "cpu")
    full = dict(job)
    full["spec"] = dict(run, recipe=recipe, reference_losses=spec.get("reference_losses") or {})
    # train.py reads a job file: hand it the full spec next to the result.
    fd, path = tempfile.mkstemp(prefix=".job-", suffix=".json", dir=os.path.dirname(os.path.abspath(argv[2])))
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(full, f)
        return train.main([argv[0], path, argv[2]])
    finally:
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
