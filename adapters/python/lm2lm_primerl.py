"""prime-rl (verifiers v1 environments) and lm2lm: one service call per group.

Read against prime-rl 559b44772e471d1538537b8805cc77f3824a5e64 and verifiers
a60a606ecc4d309247edf9ff92c3eabca362781f (docs/frameworks/prime-rl.md has
the launch recipe).

A verifiers v1 reward (``@vf.reward`` on a Task, verifiers/v1/utils/
decorators.py) judges one trace inside the env server, before prime-rl
knows its group or step: the orchestrator stamps ``episode.group``
(GroupInfo id) and ``episode.run.work.step`` (the dispatch step) in
Dispatcher.emit_episode (src/prime_rl/orchestrator/dispatcher.py) after the
episode comes back. The group is whole only in the orchestrator's
TrainSink.process_group, which calls ``algorithm.finalize_group(episodes)``
-> ``Algorithm.score_group`` (src/prime_rl/orchestrator/algo/base.py); the
default GRPOAlgorithm.score_group (algo/grpo.py) assigns reward minus the
group mean to each trainable trace.

So the scoring happens there: ``install()`` replaces GRPOAlgorithm.score_group
in the orchestrator process. For a group of this environment's tasks (a
task data with ``state_id``) it sends the group whole to /v1/score (one
request; the group named by prime-rl's group id, the step by the episodes'
dispatch step, the completion the trace's last assistant message), stores
the service's reward as the trace's ``lm2lm`` reward and its metrics
(kept, valid, gain, partial), and assigns the service's advantage (LM2LM's
group-relative advantage: mean-centred, no std). A group whose scoring
failed gets no reward (``rewards["lm2lm"] = None``), ``lm2lm_failed`` 1 and
advantage 0: nothing is learnt from it. Other environments' groups go to
the original method. A group is sent whole, so it is never partial.

Only GRPO without a length penalty trains on the service's rewards:
MaxRLAlgorithm, RAEAlgorithm and HierarchicalGRPOAlgorithm override
score_group (algo/max_rl.py, rae.py, hierarchical_grpo.py) and would
read the env-side placeholder 0 as every reward, and GRPO's
length_penalty (algo/grpo.py, GRPOAlgorithm.score_group) shapes rewards
the service has already shaped. ``install`` also wraps
Algorithm.finalize_group (algo/base.py), the call TrainSink.process_group
makes for every group, so that an lm2lm group reaching any other
algorithm type, or GRPO with a length penalty, stops the orchestrator
with a message instead of training on 0.

The environment: verifiers v1 classes (LM2LMData, LM2LMTask, LM2LMTaskset;
only when verifiers is importable) load the service's dataset
(LM2LM_DATASET, a /v1/dataset JSON Lines file) as tasks carrying the state
id; taskset id ``lm2lm-primerl`` imports this module (verifiers/v1/utils/
loaders.py _import_plugin: the id with '-' as '_', a module exporting one
Taskset in __all__). The orchestrator loads the taskset client-side
(Env.start -> vf.load_taskset, src/prime_rl/orchestrator/envs.py), so
importing this module there installs the scoring. The env-side reward is
a placeholder 0 until the group is scored.
"""
import asyncio
import json
import os

from lm2lm_client import at_step, post, run_id, step_floor, text, wait_calibrations


def state_id(trace):
    data = trace.task.data
    sid = getattr(data, "state_id", None)
    if sid is None and isinstance(getattr(data, "info", None), dict):
        sid = data.info.get("state_id")
    return sid


def completion(trace):
    msgs = trace.assistant_messages
    return (msgs[-1].content or "") if msgs else ""


def score_request(episodes, traces):
    """The whole group's /v1/score request: prime-rl's group id and step."""
    first = episodes[0]
    sid = state_id(traces[0])
    return {"step": int(first.run.work.step),
            "groups": [{"state_id": sid, "group": "primerl-" + str(first.group.id),
                        "completions": [text(completion(t)) for t in traces]}]}


def apply(traces, answers, reward_cls, assign):
    """Write the service's answers on the traces; assign advantages."""
    for t, a in zip(traces, answers):
        failed = a["reward"] is None
        t.rewards = {"lm2lm": None if failed else reward_cls(score=a["reward"])}
        t.metrics.update({"lm2lm_kept": float(a["kept"]), "lm2lm_valid": float(a["valid"]),
                          "lm2lm_gain": float(a["gain"]), "lm2lm_partial": float(a.get("partial", False)),
                          "lm2lm_failed": float(failed)})
        assign(t, 0.0 if failed else a["advantage"])


async def score_group(episodes, trainable, reward_cls, assign):
    """Score one group whole; False when it is not an lm2lm group."""
    traces = [t for _, t in trainable(episodes)]
    if not traces or state_id(traces[0]) is None:
        return False
    body = score_request(episodes, traces)
    body["groups"][0]["group"] = run_id() + "/" + body["groups"][0]["group"]
    body["step"] = at_step(body["step"])
    if os.environ.get("LM2LM_SYNC_CALIBRATION") == "1":
        await asyncio.to_thread(wait_calibrations)
    answers = (await asyncio.to_thread(post, "/v1/score", body))["groups"][0]["samples"]
    apply(traces, answers, reward_cls, assign)
    return True


def refusal(algorithm, grpo_cls):
    """Why an algorithm cannot train on the service's rewards, or ""."""
    if not isinstance(algorithm, grpo_cls) or not getattr(type(algorithm).score_group, "_lm2lm", False):
        return ("lm2lm: algo.type %r scores groups itself (%s.score_group) and would train on the env-side "
                "placeholder reward 0; use algo.type \"grpo\" for the lm2lm environment"
                % (getattr(getattr(algorithm, "config", None), "type", type(algorithm).__name__), type(algorithm).__name__))
    if getattr(algorithm, "length_penalty", None) is not None:
        return ("lm2lm: GRPO's length_penalty reshapes rewards the service has already shaped (METHOD.md section 1, "
                "Reward); remove [orchestrator.algo.length_penalty] for the lm2lm environment")
    return ""


def install():
    """Route prime-rl's GRPO group scoring through the service for lm2lm tasks."""
    try:
        from prime_rl.orchestrator.algo import base, grpo
        from prime_rl.orchestrator.algo.base import iter_trainable_traces
        from prime_rl.orchestrator.algo.routing import assign_advantages
        from verifiers.v1 import Reward
    except ImportError:
        return False
    cls = grpo.GRPOAlgorithm
    if getattr(cls.score_group, "_lm2lm", False):
        return True
    inner = cls.score_group
    finalize = base.Algorithm.finalize_group

    async def lm2lm_score_group(self, episodes):
        if not await score_group(episodes, iter_trainable_traces, Reward, assign_advantages):
            await inner(self, episodes)

    async def lm2lm_finalize_group(self, episodes):
        traces = [t for _, t in iter_trainable_traces(episodes)]
        if traces and state_id(traces[0]) is not None:
            why = refusal(self, cls)
            if why:
                raise RuntimeError(why)
        await finalize(self, episodes)

    lm2lm_score_group._lm2lm = True
    cls.score_group = lm2lm_score_group
    base.Algorithm.finalize_group = lm2lm_finalize_group
    # The floor of at_step: the service's step when the orchestrator
    # starts, before its trainer moves the step on.
    step_floor()
    return True


try:
    import verifiers.v1 as _vf
except ImportError:
    _vf = None

if _vf is not None and hasattr(_vf, "Taskset"):
    class LM2LMData(_vf.TaskData):
        """A dataset row of the service: its state id."""
        state_id: str

    class LM2LMTask(_vf.Task[LM2LMData]):
        @_vf.reward(weight=1.0)
        async def lm2lm(self, trace) -> float:
            return 0.0  # replaced by the group's score in the orchestrator

    class LM2LMConfig(_vf.TasksetConfig):
        dataset: str = os.environ.get("LM2LM_DATASET", "train.jsonl")

    class LM2LMTaskset(_vf.Taskset[LM2LMTask, LM2LMConfig]):
        def load(self):
            with open(self.config.dataset) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            return [LM2LMTask(LM2LMData(idx=i, prompt=r["prompt"], state_id=r["state_id"]), self.config.task)
                    for i, r in enumerate(rows)]

    __all__ = ["LM2LMTaskset"]  # verifiers' loader takes the one Taskset exported

install()
