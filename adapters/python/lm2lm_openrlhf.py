"""OpenRLHF reward for lm2lm: the reward_func file form and the step hook.

Read against OpenRLHF 3c3be6234e0cb353e76bb8019947db9dfe99fca7
(docs/frameworks/openrlhf.md has the launch recipe).

The reward file. ``--reward.remote_url /path/to/lm2lm_openrlhf.py`` makes
OpenRLHF's SingleTurnAgentExecutor (openrlhf/utils/agent.py) load
``reward_func`` from this file and call it once per sample, in a thread
(``asyncio.to_thread``), with one query (prompt and response decoded with
special tokens), its prompt and its label; nothing else is passed. Here:

- the label (``--data.label_key label``) is the state id, and the samples
  of one label at one step are a group of ``LM2LM_GROUP_SIZE`` (set it to
  ``--rollout.n_samples_per_prompt``, default 8);
- the step is the service's current step, which the step hook below moves
  with OpenRLHF's global step;
- the completion is the query with its prompt cut off;
- ``rewards`` is the service's reward; ``scores`` (what
  ``--algo.dynamic_filtering_enable`` averages over a prompt's samples and
  keeps when strictly inside ``--algo.dynamic_filtering_range``, default
  0 1) is 0.5 for a group the service keeps and 0 for a flat one, so that
  OpenRLHF's dynamic filtering drops exactly the groups LM2LM's dynamic
  sampling drops;
- a sample whose group failed (world-model error, or past the group
  deadline) raises: OpenRLHF logs it and leaves the sample without a
  reward, and the step stops there rather than learn from a made-up
  number. With ``LM2LM_FAILED=filter`` (only together with
  ``--algo.dynamic_filtering_enable``) it gets reward 0 and score -1
  instead: the group's mean score is outside the range, so OpenRLHF drops
  the whole group and draws another prompt.

The service answers a sample once its group is complete, so every sample
of a group holds a thread until the last one arrives. OpenRLHF runs the
calls on its event loop's default executor (min(32, CPUs + 4) threads):
with more groups in flight than threads, all threads could wait on groups
whose last samples are queued behind them. Loaded inside the rollout
actor's event loop (RolloutRayActor's async __init__), this file gives that
loop an executor of ``LM2LM_THREADS`` threads (default 1024, the service's
default -max-in-flight).

The step hook. OpenRLHF passes no step to a reward. ``setup`` (Ray's
``worker_process_setup_hook``: ``"lm2lm_openrlhf.setup"`` in the job's
runtime env) patches ``BasePPOTrainer.train_step`` in the process that
imports openrlhf.trainer.ppo_trainer (the PPOTrainer actor) so that each
global step it returns is posted to ``/v1/advance``: rollout k is scored at
step k, and a calibration point falls on the trainer's step. With
``LM2LM_SYNC_CALIBRATION=1`` the hook then waits while a calibration runs
(the synchronous loop). The asynchronous trainer (--train.async_enable)
overlaps rollouts with training and is not patched.

remote_reward posts what OpenRLHF's HTTP client posts to the service's
/get_reward route (``--reward.remote_url http://HOST:8080/get_reward?
group_size=8&step=current``), for checking a service by hand; that route
returns the reward as the score too, so use the file form with dynamic
filtering.
"""
import asyncio
import concurrent.futures
import importlib.abc
import importlib.util
import os
import sys
import threading

from lm2lm_client import advance, get, post, score_samples, wait_calibrations

KEPT_SCORE, FLAT_SCORE, FAILED_SCORE = 0.5, 0.0, -1.0


def _widen_executor():
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    n = int(os.environ.get("LM2LM_THREADS", "1024"))
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="lm2lm"))


_widen_executor()

_lock = threading.Lock()
_next = {}  # (step, label) -> next index, this process only


def _index(step, label):
    """The sample's index in its group: all samples of one prompt run in one
    rollout actor (RolloutRayActor.generate_responses), so a per-process
    count numbers them; a retried request then states the same index."""
    with _lock:
        for k in [k for k in _next if k[0] < step]:
            del _next[k]
        i = _next.get((step, label), 0)
        _next[(step, label)] = i + 1
        return i


def completion(query, prompt):
    """The response: the query with its prompt cut off. A prompt cut on the
    left to fit max_len still ends the query's prefix; its tail locates it."""
    if query.startswith(prompt):
        return query[len(prompt):]
    tail = prompt[-200:]
    i = query.find(tail) if tail else -1
    if i < 0:
        raise ValueError("lm2lm: the query does not contain its prompt")
    return query[i + len(tail):]


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF's reward_func: one call per sample (a list of one)."""
    G = int(os.environ.get("LM2LM_GROUP_SIZE", "8"))
    step = int(get("/v1/info")["step"])
    samples = [{"group": l, "state_id": l, "group_size": G, "index": _index(step, l), "completion": completion(q, p)}
               for q, p, l in zip(queries, prompts, labels)]
    answers = score_samples(samples, step)
    rewards, scores, logs = [], [], []
    for s, a in zip(samples, answers):
        if a["reward"] is None:
            if os.environ.get("LM2LM_FAILED", "raise") != "filter":
                raise RuntimeError("lm2lm: group %s at step %d failed: %s" % (s["group"], step, a["failure_reason"]))
            rewards.append(0.0)
            scores.append(FAILED_SCORE)
        else:
            rewards.append(a["reward"])
            scores.append(KEPT_SCORE if a["kept"] else FLAT_SCORE)
        logs.append({"lm2lm_step": float(step), "lm2lm_index": float(s["index"]), "lm2lm_kept": float(a["kept"]),
                     "lm2lm_valid": float(a["valid"]), "lm2lm_gain": float(a["gain"]),
                     "lm2lm_partial": float(a.get("partial", False)), "lm2lm_failed": float(a["reward"] is None)})
    if len(samples) == 1:  # SingleTurnAgentExecutor wraps each as torch.tensor([value])
        return {"rewards": rewards[0], "scores": scores[0], "extra_logs": logs[0]}
    return {"rewards": rewards, "scores": scores, "extra_logs": logs}


def _patch(mod):
    base = mod.BasePPOTrainer
    if getattr(base.train_step, "_lm2lm", False):
        return
    inner = base.train_step

    def train_step(self, rollout_samples, global_step):
        status, step = inner(self, rollout_samples, global_step)
        advance(step)
        if os.environ.get("LM2LM_SYNC_CALIBRATION") == "1":
            wait_calibrations()
        return status, step

    train_step._lm2lm = True
    base.train_step = train_step


class _Finder(importlib.abc.MetaPathFinder):
    """Patches openrlhf.trainer.ppo_trainer when a process imports it."""

    name = "openrlhf.trainer.ppo_trainer"

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


def setup():
    """Ray's worker_process_setup_hook: post each global step OpenRLHF's
    PPOTrainer returns to /v1/advance."""
    mod = sys.modules.get(_Finder.name)
    if mod is not None:
        _patch(mod)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def remote_reward(queries, prompts, labels, group_size=8, step="current"):
    """What OpenRLHF's HTTP client posts to /get_reward, for trying by hand."""
    path = "/get_reward?group_size=%d&step=%s" % (group_size, step)
    return post(path, {"query": queries, "prompts": prompts, "labels": labels})["rewards"]
