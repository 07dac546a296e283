"""slime group reward for lm2lm: --custom-rm-path lm2lm_slime.rm --group-rm.

Read against slime 624b824a898ab0ec1fcb4d373004c7f3852bf515
(docs/frameworks/slime.md has the launch recipe).

With --group-rm, slime's generate_and_rm_group (slime/rollout/
sglang_rollout.py) generates the n_samples_per_prompt samples of one
prompt and then calls batched_async_rm(args, group), which awaits
``rm(args, samples)`` once with the whole group (slime/rollout/rm_hub/
__init__.py). Each Sample carries prompt, response (the generated text
alone), label (--label-key: the dataset's ``label``, the state id),
group_index (a counter of the data source, unique within the run), index
and metadata. The step is slime's rollout id, which RolloutManager.generate
(slime/ray/rollout.py) sets with slime.rollout.sample_hooks.
set_current_rollout_id before the rollout function runs, in the process
that calls the reward; without slime, the service's current step.

``rm`` sends the group whole (one request, named run/label/group_index
with this process's run identity, lm2lm_client.run_id: slime restores
group_index from its checkpoint, so a resumed run would otherwise reuse
an earlier attempt's names) at the rollout id as the step (at least the
service's step when this process first asked, lm2lm_client.at_step: a
run resumed behind the service replays its rollouts at the service's
step) and returns the service's rewards. Each sample's
metadata["lm2lm"] holds the service's answer (kept, valid, gain,
mechanism, failure). A sample whose group failed (world-model error or
timeout) gets reward 0 with ``remove_sample`` set, slime's own way to
keep a sample out of the loss (its loss mask becomes zeros), so no
made-up number is learnt. A group is sent whole, so it is never partial.
An error the client's retries cannot cure raises (lm2lm_client.
LM2LMError), which ends slime's rollout: visible, never a number.

``generate_rollout`` (--rollout-function-path lm2lm_slime.generate_rollout)
wraps slime's rollout function (LM2LM_SLIME_ROLLOUT, default
slime.rollout.sglang_rollout.generate_rollout): before a training rollout
it posts the rollout id to /v1/advance, which starts a calibration point
falling on it, and with LM2LM_SYNC_CALIBRATION=1 waits while a point's runs
go (the synchronous loop). slime's eval_rollout asserts that --group-rm is
off ("Group RM is not supported for eval rollout"), so an evaluation
rollout runs with a copy of the arguments whose group_rm is False; give
the evaluation datasets the per-sample reward ``eval_rm``
(--eval-custom-rm-path lm2lm_slime.eval_rm), which runs each completion
for real on its held-out state (POST /v1/evaluate; never added to M) and
returns its real gain in sigma units (0 for an invalid, infeasible or
unmeasured one).

``keep`` is a dynamic sampling filter (--dynamic-sampling-filter-path
lm2lm_slime.keep): it keeps the groups the service keeps (LM2LM's dynamic
sampling: a flat group carries no signal) and drops failed groups; slime
then samples more prompts (--over-sampling-batch-size) until the rollout
batch is full.
"""
import asyncio
import copy
import importlib
import os

from lm2lm_client import advance, at_step, get, post, run_id, wait_calibrations


def step():
    """slime's rollout id, or the service's current step without slime."""
    try:
        import slime.rollout.sample_hooks as hooks
    except ImportError:
        hooks = None
    rid = getattr(hooks, "_current_rollout_id", None)
    if rid is not None:
        return at_step(int(rid))
    return int(get("/v1/info")["step"])


def _state_id(sample):
    md = sample.metadata if isinstance(sample.metadata, dict) else {}
    return md.get("state_id") or sample.label


def _score(samples, at):
    first = samples[0]
    sid = _state_id(first)
    for s in samples:
        if _state_id(s) != sid or s.group_index != first.group_index:
            raise ValueError("lm2lm: rm got samples of several groups; run slime with --group-rm")
    group = {"state_id": sid, "group": "%s/%s/%s" % (run_id(), sid, first.group_index),
             "completions": [s.response for s in samples]}
    return post("/v1/score", {"step": at, "groups": [group]})["groups"][0]["samples"]


async def rm(args, samples, **kwargs):
    """slime's group reward: one call per group, one reward per sample."""
    if not isinstance(samples, list):
        raise ValueError("lm2lm: rm scores whole groups; run slime with --group-rm")
    at = step()
    answers = await asyncio.to_thread(_score, samples, at)
    rewards = []
    for s, a in zip(samples, answers):
        md = s.metadata if isinstance(s.metadata, dict) else {}
        md["lm2lm"] = {"step": at, "reward": a["reward"], "kept": a["kept"], "valid": a["valid"], "gain": a["gain"],
                       "mechanism": a.get("mechanism", ""), "partial": a.get("partial", False),
                       "failure_reason": a.get("failure_reason", "")}
        s.metadata = md
        if a["reward"] is None:
            s.remove_sample = True
            rewards.append(0.0)
        else:
            rewards.append(a["reward"])
    return rewards


def keep(args, samples, **kwargs):
    """slime's dynamic sampling filter: keep the groups the service keeps."""
    info = [(s.metadata or {}).get("lm2lm", {}) for s in samples]
    if any(i.get("reward") is None for i in info):
        ok, reason = False, "lm2lm_failed"
    elif not all(i.get("kept") for i in info):
        ok, reason = False, "lm2lm_flat"
    else:
        ok, reason = True, None
    try:
        from slime.rollout.filter_hub.base_types import DynamicFilterOutput
    except ImportError:
        return ok
    return DynamicFilterOutput(keep=ok, reason=reason)


def generate_rollout(args, rollout_id, data_source, evaluation=False):
    """slime's rollout function, with the step posted before a training rollout."""
    path = os.environ.get("LM2LM_SLIME_ROLLOUT", "slime.rollout.sglang_rollout.generate_rollout")
    module, _, attr = path.rpartition(".")
    inner = getattr(importlib.import_module(module), attr)
    if evaluation:
        # eval_rollout asserts --group-rm off; the evaluation datasets score
        # one sample at a time (eval_rm).
        ev = copy.copy(args)
        ev.group_rm = False
        return inner(ev, rollout_id, data_source, evaluation=True)
    advance(at_step(rollout_id))
    if os.environ.get("LM2LM_SYNC_CALIBRATION") == "1":
        wait_calibrations()
    return inner(args, rollout_id, data_source, evaluation=evaluation)


def _evaluate(sid, response):
    return post("/v1/evaluate", {"groups": [{"state_id": sid, "completions": [response]}]})["groups"][0][0]


async def eval_rm(args, sample, **kwargs):
    """slime's per-sample reward for evaluation datasets: the completion's
    real gain in sigma units on its held-out state (POST /v1/evaluate)."""
    r = await asyncio.to_thread(_evaluate, _state_id(sample), sample.response)
    md = sample.metadata if isinstance(sample.metadata, dict) else {}
    md["lm2lm_eval"] = r
    sample.metadata = md
    return float(r.get("gain_sigmas", 0.0)) if r.get("measured") and not r.get("infeasible") else 0.0
