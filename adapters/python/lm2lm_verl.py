"""verl Reward Loop adapter: one sample per call, whole groups at the service.

Read from verl-project/verl at commit 1dda039b9c63 (2026-08-22, version
0.10.0.dev), the default trainer (trainer.use_v1=true, trainer_mode sync):

- verl/trainer/ppo/v1/trainer_base.py gives every prompt a fresh "uid"
  (uuid4) and the trainer's "global_steps".
- verl/trainer/ppo/v1/agent_loop_tq.py AgentLoopWorkerTQ._run_prompt runs
  the prompt's rollout.n sessions with session_id=0..n-1 and every dataset
  column as keyword arguments; _agent_loop_postprocess calls
  AgentLoopWorker._compute_score (verl/experimental/agent_loop/agent_loop.py),
  which packs those keyword arguments (uid, session_id, global_steps,
  data_source, reward_model, extra_info, ...) into a one-sample DataProto's
  non_tensor_batch and awaits RewardLoopWorker.compute_score on a reward
  worker picked at random, with no timeout and no retry.
- verl/experimental/reward_loop/reward_loop.py RewardLoopWorker.compute_score
  calls reward_manager.run_single(data); the registered managers
  (reward_manager/naive.py, dapo.py) call compute_score(data_source=,
  solution_str=, ground_truth=, extra_info=) and nothing else: the uid, the
  session id and the step never reach compute_score, and rollout.n is only in
  the config. run_single returns {"reward_score", "reward_extra_info"}; a
  dict result's keys all go to reward_extra_info.

So this file ships LM2LMRewardManager, a RewardManagerBase
(reward_manager/base.py: __init__(config, tokenizer, compute_score), async
run_single(data)) loaded with reward.reward_manager.source=importlib
(verl/trainer/ppo/reward.py resolve_reward_manager_cls). It adds the uid
(the group), rollout.n (G), session_id (the sample's index, so a resent
sample is answered from its group's first answer) and global_steps (the
step) to a copy of extra_info and awaits compute_score_async below, which posts
the sample to the service in a thread and returns a dict: "score" plus the
facts verl keeps as reward_extra_info (mechanism, valid, gain, advantage,
tau, kept, partial, received, reason, kept_advantage).

A sample that must not be trained on raises LM2LMFailure: its group
failed (world-model error or timeout, or the sample came after the group
deadline), or its group is partial (scored at the deadline on the samples
that had arrived, so its rewards were shaped over a smaller group). Every
sample of such a group raises, so no session of it stores a trajectory.
verl does not catch the exception in this path: the session fails and
AgentLoopWorkerTQ._run_prompt marks the prompt "failure". The sync replay
buffer (verl/trainer/ppo/v1/replay_buffer.py, ReplayBufferSync.
_terminal_eviction_reasons) evicts and refills a failed group only when
trainer.v1.sampler.sync_refill_failed_groups=True and the group has no
materialisable trajectory ("self.failure_keys[partition_id] -
materializable_uids"): a group with one stored trajectory would be trained
on, which is why the whole group raises. (The "rate_limited" manager, limited.py, instead
turns any exception into a reward of 0.0; do not combine this adapter with
it.) In the legacy trainer (trainer.use_v1=false) the exception fails the
step.

verl awaits the reward with no timeout (AgentLoopWorker._compute_score);
each sample here is bounded by LM2LM_SAMPLE_TIMEOUT_S (default the
client's deadline plus 30 s: 180 s at the service's default group
deadline) and raises LM2LMFailure past it.

A resumed run: verl's uids are fresh uuid4s, so its groups never meet an
earlier attempt's; its global_steps restart at the checkpoint's step,
behind the service's, and LM2LMRewardManager maps them with
lm2lm_client.at_step (the floor read once when the manager is built), so
the replayed steps are scored at the service's step instead of refused.

verl v1's rollout dump (trainer_base.py, _log_rollout_data) writes the
uid, prompt, response, ground truth and score only; with
trainer.rollout_data_dir set, the manager also appends each sample's
service answer to ROLLOUT_DATA_DIR/lm2lm/STEP-PID.jsonl.

The legacy trainer (verl/trainer/ppo/ray_trainer.py) passes the uid but not
the step to the reward; there compute_score_async uses the service's current step,
which LM2LMStepAgentLoopManager (actor_rollout_ref.rollout.agent.
agent_loop_manager_class=lm2lm_verl.LM2LMStepAgentLoopManager) sets by
POST /v1/advance with the step verl gives generate_sequences.

Environment: LM2LM_URL, LM2LM_TOKEN (lm2lm_client); LM2LM_CONCURRENCY, the
threads per process holding a waiting sample (default 1024: every sample
in flight must hold one until its group is complete);
LM2LM_WAIT_CALIBRATION=1 makes the first sample of a step wait while a
calibration point of an earlier step is running, so that every step is
scored under the newest world model (the paper's synchronous loop).
"""
import asyncio
import concurrent.futures
import json
import os
import threading
import weakref

import lm2lm_client

_pool = None
_cleared_step = 0
_locks = weakref.WeakKeyDictionary()


class LM2LMFailure(RuntimeError):
    """The service answered a sample without a reward: drop it."""


def _sample_timeout():
    return float(os.environ.get("LM2LM_SAMPLE_TIMEOUT_S", lm2lm_client.timeouts()[1] + 30.0))


def _executor():
    global _pool
    if _pool is None:
        n = int(os.environ.get("LM2LM_CONCURRENCY", "1024"))
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="lm2lm")
    return _pool


async def _call(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(_executor(), fn, *args)


def _current_step():
    return int(lm2lm_client.get("/v1/info")["step"])


def _calibration_running_before(step):
    return any(c.get("state") == "running" and int(c.get("step", 0)) < step for c in lm2lm_client.calibrations())


async def _wait_calibrations(step):
    """Wait, once per step and process, while an earlier point is running."""
    global _cleared_step
    if step <= _cleared_step:
        return
    loop = asyncio.get_running_loop()
    lock = _locks.get(loop)
    if lock is None:
        lock = _locks[loop] = asyncio.Lock()
    async with lock:
        if step <= _cleared_step:
            return
        poll = float(os.environ.get("LM2LM_POLL_S", "0.2"))
        while await _call(_calibration_running_before, step):
            await asyncio.sleep(poll)
        _cleared_step = max(_cleared_step, step)


async def compute_score(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kwargs):
    """verl's reward function: score one completion; its group is scored once at the service.

    extra_info holds the dataset row's state_id and split, and, added by
    LM2LMRewardManager, lm2lm_group (verl's uid), lm2lm_group_size (G),
    lm2lm_index (the session id) and lm2lm_step (verl's global_steps).
    Raises LM2LMFailure when the service gives no usable reward (a failed
    or partial group) or the sample takes longer than
    LM2LM_SAMPLE_TIMEOUT_S.
    """
    try:
        return await asyncio.wait_for(_compute_score(data_source, solution_str, ground_truth, extra_info),
                                      _sample_timeout())
    except asyncio.TimeoutError:
        raise LM2LMFailure("lm2lm: no reward within LM2LM_SAMPLE_TIMEOUT_S = %g s" % _sample_timeout()) from None


async def _compute_score(data_source, solution_str, ground_truth, extra_info):
    info = dict(extra_info or {})
    state_id = info.get("state_id") or ground_truth
    if info.get("split") == "test":
        raise ValueError("lm2lm: held-out state %s can only be evaluated (POST /v1/evaluate), not scored; "
                         "run verl without validation (trainer.test_freq=-1 trainer.val_before_train=False)" % state_id)
    group, size = info.get("lm2lm_group"), info.get("lm2lm_group_size")
    if group is None or size is None:
        raise ValueError("lm2lm: no group in extra_info; load LM2LMRewardManager "
                         "(reward.reward_manager.source=importlib reward.reward_manager.name=LM2LMRewardManager)")
    step = info.get("lm2lm_step")
    if step is None:
        step = await _call(_current_step)
    step = int(step)
    if os.environ.get("LM2LM_WAIT_CALIBRATION", "0") == "1":
        await _wait_calibrations(step)
    sample = {"group": str(group), "state_id": str(state_id), "group_size": int(size), "completion": solution_str or ""}
    if info.get("lm2lm_index") is not None:
        sample["index"] = int(info["lm2lm_index"])
    ans = (await _call(lm2lm_client.score_samples, [sample], step))[0]
    why = lm2lm_client.unusable(ans)
    if why:
        raise LM2LMFailure("lm2lm: no reward for group %s at step %d: %s" % (group, step, why))
    kept = bool(ans.get("kept"))
    return {
        "score": float(ans["reward"]),
        "advantage": float(ans.get("advantage", 0.0)),
        "valid": int(bool(ans.get("valid"))),
        "mechanism": str(ans.get("mechanism") or ""),
        "gain": float(ans.get("gain", 0.0)),
        "reason": str(ans.get("reason") or ""),
        "tau": float(ans.get("tau", 0.0)),
        "kept": int(kept),
        "partial": int(bool(ans.get("partial"))),
        "received": int(ans.get("received", 0)),
        "step": step,
        # DAPO's filter (algorithm.filter_groups.metric) drops a group whose
        # metric is the same for all its samples: this one is constant (0)
        # exactly when the service's dynamic sampling drops the group.
        "kept_advantage": float(ans.get("advantage", 0.0)) if kept else 0.0,
    }


# The name the recipe in docs/frameworks/verl.md gives the function.
compute_score_async = compute_score


def _cfg(config, path, default=None):
    """config's value at a dotted path (a DictConfig, a dict or attributes)."""
    cur = config
    for k in path.split("."):
        if cur is None:
            return default
        if isinstance(cur, dict) or hasattr(cur, "get"):
            try:
                cur = cur.get(k)
                continue
            except Exception:
                pass
        cur = getattr(cur, k, None)
    return default if cur is None else cur


try:  # verl's base class when verl is installed; the same signature without it
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase as _Base
except ImportError:
    class _Base:
        def __init__(self, config, tokenizer, compute_score):
            self.config = config
            self.tokenizer = tokenizer
            self.compute_score = compute_score


_log_lock = threading.Lock()


def _log_sample(rollout_dir, step, uid, session_id, result):
    """Append one sample's service answer to rollout_dir/lm2lm/STEP-PID.jsonl."""
    d = os.path.join(str(rollout_dir), "lm2lm")
    line = json.dumps(dict(result, uid=uid, session_id=session_id), sort_keys=True) + "\n"
    with _log_lock:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "%d-%d.jsonl" % (step, os.getpid())), "a") as f:
            f.write(line)


class LM2LMRewardManager(_Base):
    """A Reward Loop manager that tells compute_score the group, G and step."""

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None,
                 reward_model_tokenizer=None, **kwargs):
        super().__init__(config, tokenizer, compute_score)
        self.group_size = int(_cfg(config, "actor_rollout_ref.rollout.n", 1))
        self.rollout_dir = _cfg(config, "trainer.rollout_data_dir", None)
        # The service's step when this run's reward workers start: a run
        # resumed behind it scores its replayed steps there.
        self.floor = lm2lm_client.step_floor()
        lm2lm_client.timeouts()  # read here, not on the event loop

    async def run_single(self, data):
        data = data[-1:]  # as naive.py: the last sequence of a multi-sequence output
        item = data[0]
        response_ids = item.batch["responses"]
        response_length = response_ids.shape[-1]
        valid_length = int(item.batch["attention_mask"][-response_length:].sum())
        text = self.tokenizer.decode(response_ids[:valid_length], skip_special_tokens=True)
        nt = item.non_tensor_batch
        uid = nt.get("uid")
        if uid is None:
            raise ValueError("lm2lm: the sample has no uid; verl's trainer sets one per prompt")
        extra = dict(nt.get("extra_info") or {})  # the n sessions of a prompt share one dict
        extra["lm2lm_group"] = str(uid)
        extra["lm2lm_group_size"] = self.group_size
        if nt.get("session_id") is not None:
            extra["lm2lm_index"] = int(nt["session_id"])
        step = nt.get("global_steps")
        if step is None:
            step = (getattr(data, "meta_info", None) or {}).get("global_steps")
        if step is not None and int(step) >= 0:
            extra["lm2lm_step"] = max(int(step), self.floor)
        result = await compute_score_async(data_source=nt.get("data_source"), solution_str=text,
                                     ground_truth=(nt.get("reward_model") or {}).get("ground_truth"), extra_info=extra)
        if self.rollout_dir:
            await _call(_log_sample, self.rollout_dir, result["step"], str(uid), extra.get("lm2lm_index"), result)
        return {"reward_score": result["score"], "reward_extra_info": result}


def _step_agent_loop_manager():
    from verl.experimental.agent_loop import AgentLoopManager

    class LM2LMStepAgentLoopManager(AgentLoopManager):
        """Legacy trainer only: tells the service each training step."""

        def generate_sequences(self, prompts):
            meta = getattr(prompts, "meta_info", None) or {}
            if not meta.get("validate", False) and meta.get("global_steps") is not None:
                lm2lm_client.advance(lm2lm_client.at_step(int(meta["global_steps"])))
            return super().generate_sequences(prompts)

    return LM2LMStepAgentLoopManager


def __getattr__(name):
    if name == "LM2LMStepAgentLoopManager":
        cls = _step_agent_loop_manager()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
