"""OpenRLHF reward for lm2lm: the reward_func file form and the step hook.

Read against OpenRLHF 3c3be6234e0cb353e76bb8019947db9dfe99fca7
(docs/frameworks/openrlhf.md has the launch recipe).

The reward file. ``--reward.remote_url /path/to/lm2lm_openrlhf.py`` makes
OpenRLHF's SingleTurnAgentExecutor (openrlhf/utils/agent.py) load
``reward_func`` from this file and call it once per sample, in a thread
(``asyncio.to_thread``), with one query (prompt and response decoded with
special tokens), its prompt and its label; nothing else is passed. Here:

- the label (``--data.label_key label``) is the state id, and the samples
  of one label gathered by one rollout actor are a group of
  ``LM2LM_GROUP_SIZE`` (set it to ``--rollout.n_samples_per_prompt``,
  default 8), named ``<run>/<label>/<k>`` with this process's run
  identity (lm2lm_client.run_id: a resumed run's groups never meet an
  earlier attempt's) and a per-label count;
- the step is the service's current step, read once per group, by the
  group's first sample (the step hook below moves it with OpenRLHF's
  global step): under --train.async_enable the generator runs ahead of the
  trainer, and a group that straddles an advance stays one group at the
  step its first sample read (start the service with -step-lag at least
  --train.async_queue_size, default 1);
- the completion is the query with its prompt cut off;
- ``rewards`` is the service's reward; ``scores`` (what
  ``--algo.dynamic_filtering_enable`` averages over a prompt's samples and
  keeps when strictly inside ``--algo.dynamic_filtering_range``, default
  0 1) is 0.5 for a group the service keeps and 0 for a flat one, so that
  OpenRLHF's dynamic filtering drops exactly the groups LM2LM's dynamic
  sampling drops;
- a sample whose group failed (world-model error, past the group deadline)
  or is partial (scored at its deadline without its late samples) gets,
  with ``LM2LM_FAILED=filter`` (the default), reward 0 and score -1, and so
  does every other sample of that group: the group's mean score is -1,
  outside the range, so _generate_vllm drops the whole group and draws
  another prompt ("Dispatch replacement for filtered prompt"). That needs
  ``--algo.dynamic_filtering_enable`` with a range 0 <= low < 0.5 < high:
  the setup hook refuses to start the trainer otherwise. With
  ``LM2LM_FAILED=raise`` such a sample raises instead: OpenRLHF logs it and
  leaves the sample without a reward, and experience_maker cannot stack
  a missing reward, so the step and the run stop.

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
(the synchronous loop). The asynchronous trainer (--train.async_enable,
openrlhf/trainer/ppo_trainer_async.py) runs train_step in TrainingActor, a
BasePPOTrainer, so it is patched the same way. The hook also patches
BasePPOTrainer.__init__ to refuse, at start, a configuration under which
a failed group would be trained on (LM2LM_FAILED=filter without dynamic
filtering over a range that drops it).

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

from lm2lm_client import advance, at_step, get, post, run_id, score_samples, unusable, wait_calibrations

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
_groups = {}  # label -> [step, next index, group name], this process only
_count = {}   # label -> groups of it started in this process


def _group(label):
    """The sample's group, step and index. All samples of one prompt run in
    one rollout actor (RolloutRayActor.generate_responses), so a
    per-process count numbers them; the first sample of a group reads the
    step and names the group, the next G-1 join it, and a retried request
    then states the same index."""
    G = int(os.environ.get("LM2LM_GROUP_SIZE", "8"))
    with _lock:
        g = _groups.get(label)
        if g is None:
            k = _count.get(label, 0)
            _count[label] = k + 1
            g = _groups[label] = [None, 0, "%s/%s/%d" % (run_id(), label, k)]
        i = g[1]
        g[1] += 1
        if g[1] == G:
            del _groups[label]
    if g[0] is None:
        with _lock:
            if g[0] is None:
                g[0] = int(get("/v1/info")["step"])
    return g[2], g[0], i, G


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
    mode = os.environ.get("LM2LM_FAILED", "filter")
    rewards, scores, logs = [], [], []
    for q, p, l in zip(queries, prompts, labels):
        name, step, index, G = _group(l)
        sample = {"group": name, "state_id": l, "group_size": G, "index": index, "completion": completion(q, p)}
        a = score_samples([sample], step)[0]
        why = unusable(a)
        if why:
            if mode != "filter":
                raise RuntimeError("lm2lm: group %s at step %d failed: %s" % (name, step, why))
            rewards.append(0.0)
            scores.append(FAILED_SCORE)
        else:
            rewards.append(a["reward"])
            scores.append(KEPT_SCORE if a["kept"] else FLAT_SCORE)
        logs.append({"lm2lm_step": float(step), "lm2lm_index": float(index), "lm2lm_kept": float(a["kept"]),
                     "lm2lm_valid": float(a["valid"]), "lm2lm_gain": float(a["gain"]),
                     "lm2lm_partial": float(a.get("partial", False)), "lm2lm_failed": float(bool(why))})
    if len(rewards) == 1:  # SingleTurnAgentExecutor wraps each as torch.tensor([value])
        return {"rewards": rewards[0], "scores": scores[0], "extra_logs": logs[0]}
    return {"rewards": rewards, "scores": scores, "extra_logs": logs}


def check_args(args):
    """Refuse a configuration under which a failed group would be trained on."""
    if os.environ.get("LM2LM_FAILED", "filter") != "filter":
        return
    algo = getattr(args, "algo", None)
    on = bool(getattr(algo, "dynamic_filtering_enable", False))
    lo, hi = getattr(algo, "dynamic_filtering_range", (0, 1)) or (0, 1)
    if not on or not (0 <= lo < KEPT_SCORE < hi):
        raise ValueError("lm2lm: LM2LM_FAILED=filter (the default) gives a failed group's samples reward 0 and "
                         "score -1, which only --algo.dynamic_filtering_enable with --algo.dynamic_filtering_range "
                         "LOW HIGH, 0 <= LOW < 0.5 < HIGH, drops (have: enabled=%s, range %s %s); enable it, or set "
                         "LM2LM_FAILED=raise to stop the run at a failed group" % (on, lo, hi))


def _patch(mod):
    base = mod.BasePPOTrainer
    if getattr(base.train_step, "_lm2lm", False):
        return
    inner = base.train_step
    init = base.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        check_args(self.args)

    def train_step(self, rollout_samples, global_step):
        status, step = inner(self, rollout_samples, global_step)
        advance(at_step(step))
        if os.environ.get("LM2LM_SYNC_CALIBRATION") == "1":
            wait_calibrations()
        return status, step

    train_step._lm2lm = True
    base.__init__ = __init__
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
