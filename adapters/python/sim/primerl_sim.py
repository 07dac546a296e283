"""prime-rl's calling pattern, standard library only, against a live service.

Written from prime-rl 559b44772e471d1538537b8805cc77f3824a5e64 and
verifiers a60a606ecc4d309247edf9ff92c3eabca362781f:

- the run is one TOML file (``uv run rl @ rl.toml``); the keys read below
  are those of packages/prime-rl-configs/src/prime_rl/configs/
  (orchestrator.py: batch_size rollouts per step, group_size rollouts per
  example, max_off_policy_steps; trainer.py DefaultLossConfig:
  dppo_mask_low/high; algorithm.py GRPOAlgoConfig); an unknown key is an
  error, so the recipe in docs/frameworks/prime-rl.md cannot drift from it.
- src/prime_rl/orchestrator/envs.py Env.start: the taskset is loaded in the
  orchestrator (verifiers/v1/utils/loaders.py: taskset id -> module), which
  imports the adapter there.
- src/prime_rl/orchestrator/dispatcher.py: group_size episodes per example,
  run concurrently; emit_episode stamps episode.group = GroupInfo(id=the
  group's uuid) and episode.run = TrainRunInfo(work=TrainWorkInfo(step=the
  dispatch step)) when each comes back.
- src/prime_rl/orchestrator/train_sink.py process_group: once a group's
  episodes are in, algorithm.finalize_group(group) -> score_group with the
  episodes (algo/base.py iter_trainable_traces: traces without error whose
  agent is trainable and which sampled tokens; algo/routing.py
  assign_advantages sets the trace's advantage).
- verifiers/v1/trace.py: Trace.rewards {name: Reward(score, weight)},
  metrics, assistant_messages; Trace.reward sums the rewards.

Episodes are "generated" from the CARD lines of the prompt by a seeded RNG.
The prime_rl and verifiers modules are stand-ins with those names. Prints
one JSON object: per step every group with its traces (completion, reward,
advantage, metrics), then the calibrations.
"""
import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import tomllib
import types
import uuid

import lm2lm_tabular

KEYS = {  # the recipe's keys this simulator reads or accepts
    "max_steps", "seq_len", "model.name", "trainer.optim.lr", "trainer.loss.dppo_mask_low",
    "trainer.loss.dppo_mask_high", "orchestrator.batch_size", "orchestrator.group_size",
    "orchestrator.max_off_policy_steps", "orchestrator.train.sampling.max_completion_tokens",
    "orchestrator.train.sampling.temperature", "orchestrator.train.source.name",
    "orchestrator.train.source.env.taskset.id", "orchestrator.train.source.env.taskset.dataset",
    "orchestrator.train.source.env.agent.harness.id",
}


def flatten(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flatten(v, prefix + k + ".")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for x in v:
                yield from flatten(x, prefix + k + ".")
        else:
            yield prefix + k, v


def parse(argv=None):
    p = argparse.ArgumentParser()
    a = p.add_argument
    a("--config", required=True)  # the rl.toml of the recipe
    a("--sim.seed", dest="seed", type=int, default=1)
    a("--sim.start_step", dest="start_step", type=int, default=0)  # a run resumed from a checkpoint
    a("--sim.ahead", dest="ahead", type=int, default=0)  # the trainer this many steps past the groups' dispatch step
    a("--sim.algo", dest="algo", default="grpo")  # algo.type: grpo or max_rl
    a("--sim.length_penalty", dest="length_penalty", action="store_true")  # [orchestrator.algo.length_penalty] set
    args = p.parse_args(argv)
    with open(args.config, "rb") as f:
        cfg = dict(flatten(tomllib.load(f)))
    unknown = sorted(set(cfg) - KEYS)
    if unknown:
        p.error("keys the simulator does not know: %s" % unknown)
    args.cfg = cfg
    return args


STAND_INS = {
    "prime_rl/__init__.py": "",
    "prime_rl/orchestrator/__init__.py": "",
    "prime_rl/orchestrator/algo/__init__.py": "",
    "prime_rl/orchestrator/algo/base.py": """
def iter_trainable_traces(episodes):
    for episode in episodes:
        for trace in episode.traces:
            if trace.has_error or not trace.agent.trainable:
                continue
            if any(any(node.mask) for node in trace.nodes):
                yield episode, trace


class Algorithm:
    async def score_group(self, episodes):
        pass

    async def finalize_group(self, episodes):
        await self.score_group(episodes)
""",
    "prime_rl/orchestrator/algo/routing.py": """
def assign_advantages(trace, values):
    trace.advantage = float(values)
""",
    "prime_rl/orchestrator/algo/grpo.py": """
from prime_rl.orchestrator.algo.base import Algorithm, iter_trainable_traces
from prime_rl.orchestrator.algo.routing import assign_advantages


class GRPOAlgorithm(Algorithm):
    length_penalty = None  # GRPOAlgoConfig.length_penalty

    async def score_group(self, episodes):
        traces = [t for _, t in iter_trainable_traces(episodes)]
        rewards = [t.reward for t in traces]
        mean = sum(rewards) / len(rewards)
        for t, r in zip(traces, rewards):
            assign_advantages(t, r - mean)
""",
    "prime_rl/orchestrator/algo/max_rl.py": """
from prime_rl.orchestrator.algo.base import Algorithm, iter_trainable_traces
from prime_rl.orchestrator.algo.routing import assign_advantages


class MaxRLAlgorithm(Algorithm):
    # algo/max_rl.py overrides score_group with its own credit.
    async def score_group(self, episodes):
        traces = [t for _, t in iter_trainable_traces(episodes)]
        best = max(t.reward for t in traces)
        for t in traces:
            assign_advantages(t, 1.0 if t.reward == best else 0.0)
""",
    "verifiers/__init__.py": "",
    "verifiers/v1/__init__.py": """
class Reward:
    def __init__(self, score, weight=1.0):
        self.score, self.weight = score, weight

    @property
    def value(self):
        return self.score * self.weight
""",
}


def stand_ins():
    root = tempfile.mkdtemp(prefix="primerl-sim-")
    for name, body in STAND_INS.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(body)
    sys.path.insert(0, root)


def actions(prompt):
    """The catalogue's changes (lm2lm_tabular.actions), the no-change proposal and an unparseable answer."""
    return lm2lm_tabular.actions(prompt) + ['{"mechanism": "none"}', "no idea"]


class Trace:
    def __init__(self, row, content, reward_cls):
        ns = types.SimpleNamespace
        self.task = ns(data=ns(state_id=row["state_id"], prompt=row["prompt"]))
        self.assistant_messages = [ns(content=content)]
        self.rewards = {"lm2lm": reward_cls(score=0.0)}  # the env-side placeholder
        self.metrics = {}
        self.has_error = False
        self.agent = ns(trainable=True)
        self.nodes = [ns(mask=[1, 1])]
        self.advantage = None

    @property
    def reward(self):
        return sum(r.value for r in self.rewards.values() if r is not None)


async def run_episode(rng, row, reward_cls):
    """Env.run: one episode, one trace."""
    await asyncio.sleep(rng.random() * 0.01)
    content = rng.choice(actions(row["prompt"][-1]["content"]))
    return types.SimpleNamespace(traces=[Trace(row, content, reward_cls)], group=None, run=None)


async def run_group(rng, row, G, step, algorithm, reward_cls):
    gid = uuid.UUID(int=rng.getrandbits(128)).hex
    episodes = []
    for ep in asyncio.as_completed([run_episode(random.Random(rng.random()), row, reward_cls) for _ in range(G)]):
        episode = await ep
        episode.group = types.SimpleNamespace(id=gid)  # emit_episode
        episode.run = types.SimpleNamespace(work=types.SimpleNamespace(type="train", step=step))
        episodes.append(episode)
    await algorithm.finalize_group(episodes)  # TrainSink.process_group
    return {"group": gid, "state_id": row["state_id"],
            "traces": [{"completion": t.assistant_messages[-1].content,
                        "reward": None if t.rewards["lm2lm"] is None else t.rewards["lm2lm"].score,
                        "advantage": t.advantage, "metrics": t.metrics} for e in episodes for t in e.traces]}


async def main(args):
    cfg = args.cfg
    stand_ins()
    import importlib
    from lm2lm_client import calibrations
    from verifiers.v1 import Reward
    importlib.import_module(cfg["orchestrator.train.source.env.taskset.id"].replace("-", "_"))  # vf.load_taskset
    from prime_rl.orchestrator.algo.grpo import GRPOAlgorithm
    from prime_rl.orchestrator.algo.max_rl import MaxRLAlgorithm
    algorithm = {"grpo": GRPOAlgorithm, "max_rl": MaxRLAlgorithm}[args.algo]()
    if args.length_penalty:
        algorithm.length_penalty = types.SimpleNamespace(type="linear")
    from lm2lm_client import advance
    rows = []
    with open(cfg.get("orchestrator.train.source.env.taskset.dataset") or os.environ["LM2LM_DATASET"]) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    G = cfg["orchestrator.group_size"]
    per_step = cfg["orchestrator.batch_size"] // G
    rng = random.Random(args.seed)
    steps, k = [], 0
    for step in range(args.start_step, args.start_step + cfg["max_steps"]):
        if args.ahead:
            # max_off_policy_steps: the trainer (and the service) moved on
            # while these groups, dispatched at step, were generated.
            await asyncio.to_thread(advance, step + args.ahead)
        batch = []
        for _ in range(per_step):
            batch.append(rows[k % len(rows)])
            k += 1
        groups = await asyncio.gather(*[run_group(random.Random(rng.random()), row, G, step, algorithm, Reward)
                                        for row in batch])
        steps.append({"step": step, "groups": groups})
    print(json.dumps({"steps": steps, "calibrations": calibrations()}))


if __name__ == "__main__":
    asyncio.run(main(parse()))
