"""slime's calling pattern, standard library only, against a live service.

Written from slime 624b824a898ab0ec1fcb4d373004c7f3852bf515:

- slime/utils/arguments.py: the flags parsed below (the recipe in
  docs/frameworks/slime.md uses only these).
- slime/ray/rollout.py RolloutManager.generate: set_current_rollout_id
  (slime/rollout/sample_hooks.py), then the rollout function named by
  --rollout-function-path (slime.utils.misc.load_function: importlib), with
  (args, rollout_id, data_source); _post_process_rewards: the group mean
  subtracted, divided by the group's std unless
  --disable-grpo-std-normalization; a removed sample's loss mask is zeros.
- slime/rollout/data_source.py get_samples: n_samples_per_prompt deep
  copies of each prompt row, one group_index per prompt, a global index per
  sample; the dataset wraps around.
- slime/rollout/sglang_rollout.py generate_rollout_async: groups are
  submitted over_sampling_batch_size at a time while fewer than
  rollout_batch_size are in flight; finished groups are taken in completion
  order and passed to the dynamic sampling filter (filter_hub/base_types.py
  call_dynamic_filter: a bool or a DynamicFilterOutput); when
  rollout_batch_size groups are kept, abort() marks the state aborted and
  waits for the pending groups. generate_and_rm_group gathers the samples'
  generations (bounded by a semaphore) and, with --group-rm and not
  aborted, awaits batched_async_rm(args, group) = the --custom-rm-path
  function with (args, samples) once per group (slime/rollout/rm_hub/
  __init__.py). An exception there ends the rollout.

Generation is simulated from the prompt's CARD lines by a seeded RNG, with
random delays; the slime modules the adapter imports are stand-ins. Prints
one JSON object: per rollout every group the service scored (kept by the
filter, dropped, or finished after the abort) with its samples, and the
calibrations.
"""
import argparse
import asyncio
import copy
import dataclasses
import importlib
import json
import os
import random
import sys
import tempfile
import types

import lm2lm_tabular


def parse(argv=None):
    p = argparse.ArgumentParser()
    a = p.add_argument
    a("--prompt-data", dest="prompt_data", required=True)
    a("--input-key", dest="input_key", default="input")
    a("--label-key", dest="label_key", default=None)
    a("--metadata-key", dest="metadata_key", default="metadata")
    a("--apply-chat-template", dest="apply_chat_template", action="store_true")
    a("--rollout-shuffle", dest="rollout_shuffle", action="store_true")
    a("--rollout-function-path", dest="rollout_function_path", default="slime.rollout.sglang_rollout.generate_rollout")
    a("--custom-rm-path", dest="custom_rm_path", default=None)
    a("--group-rm", dest="group_rm", action="store_true")
    a("--num-rollout", dest="num_rollout", type=int, default=1)
    a("--rollout-batch-size", dest="rollout_batch_size", type=int, required=True)
    a("--n-samples-per-prompt", dest="n_samples_per_prompt", type=int, default=1)
    a("--over-sampling-batch-size", dest="over_sampling_batch_size", type=int, default=None)
    a("--dynamic-sampling-filter-path", dest="dynamic_sampling_filter_path", default=None)
    a("--rollout-max-response-len", dest="rollout_max_response_len", type=int, default=1024)
    a("--rollout-temperature", dest="rollout_temperature", type=float, default=1.0)
    a("--global-batch-size", dest="global_batch_size", type=int, default=None)
    a("--advantage-estimator", dest="advantage_estimator", default="grpo")
    a("--disable-grpo-std-normalization", dest="grpo_std_normalization", action="store_false")
    a("--eps-clip", dest="eps_clip", type=float, default=0.2)
    a("--eps-clip-high", dest="eps_clip_high", type=float, default=None)
    a("--use-kl-loss", dest="use_kl_loss", action="store_true")
    a("--kl-loss-coef", dest="kl_loss_coef", type=float, default=0.0)
    a("--sglang-server-concurrency", dest="sglang_server_concurrency", type=int, default=512)
    # placement, checkpoint and optimiser flags of the recipe: accepted, not simulated
    a("--hf-checkpoint", dest="hf_checkpoint", default=None)
    a("--ref-load", dest="ref_load", default=None)
    a("--actor-num-nodes", dest="actor_num_nodes", type=int, default=1)
    a("--actor-num-gpus-per-node", dest="actor_num_gpus_per_node", type=int, default=8)
    a("--rollout-num-gpus-per-engine", dest="rollout_num_gpus_per_engine", type=int, default=1)
    a("--colocate", dest="colocate", action="store_true")
    a("--lr", dest="lr", type=float, default=1e-6)
    a("--sim.seed", dest="seed", type=int, default=1)
    a("--sim.flat_every", dest="flat_every", type=int, default=0)  # every k-th group answers nonsense G times
    a("--sim.start_rollout", dest="start_rollout", type=int, default=0)  # a run resumed from a checkpoint
    a("--sim.ahead", dest="ahead", type=int, default=0)  # the service this many steps past each rollout id (train_async)
    return p.parse_args(argv)


@dataclasses.dataclass
class Sample:  # slime/utils/types.py Sample, the fields the reward sees
    group_index: int = None
    index: int = None
    prompt: object = ""
    response: str = ""
    label: str = None
    reward: object = None
    remove_sample: bool = False
    metadata: dict = dataclasses.field(default_factory=dict)
    status: str = "pending"


def stand_ins():
    """The slime modules the adapter imports."""
    root = tempfile.mkdtemp(prefix="slime-sim-")
    files = {
        "slime/__init__.py": "",
        "slime/rollout/__init__.py": "",
        "slime/rollout/sample_hooks.py": "_current_rollout_id = None\n\n"
        "def set_current_rollout_id(rollout_id):\n    global _current_rollout_id\n    _current_rollout_id = rollout_id\n",
        "slime/rollout/filter_hub/__init__.py": "",
        "slime/rollout/filter_hub/base_types.py": "from dataclasses import dataclass\n\n@dataclass\n"
        "class DynamicFilterOutput:\n    keep: bool\n    reason: str = None\n    keep_when_insufficient: bool = False\n",
    }
    for name, body in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(body)
    sys.path.insert(0, root)


def load_function(path):  # slime/utils/misc.py
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def actions(prompt):
    """The catalogue's changes (lm2lm_tabular.actions), the no-change proposal and an unparseable answer."""
    return lm2lm_tabular.actions(prompt) + ['{"mechanism": "none"}', "no idea"]


class DataSource:  # slime/rollout/data_source.py
    def __init__(self, args, rows):
        self.args, self.rows, self.offset, self.group_index, self.index = args, rows, 0, 0, 0

    def get_samples(self, n):
        rows = []
        for _ in range(n):
            rows.append(self.rows[self.offset])
            self.offset = (self.offset + 1) % len(self.rows)
        out = []
        for row in rows:
            group = []
            for _ in range(self.args.n_samples_per_prompt):
                s = copy.deepcopy(row)
                s.group_index, s.index = self.group_index, self.index
                self.index += 1
                group.append(s)
            self.group_index += 1
            out.append(group)
        return out


class State:
    def __init__(self, args):
        self.semaphore = asyncio.Semaphore(args.sglang_server_concurrency)
        self.aborted = False
        self.pendings = set()
        self.remaining = 0


async def generate_and_rm_group(args, state, rng, group):
    async def generate(s, r):
        async with state.semaphore:
            if state.aborted:
                s.status = "aborted"
                return s
            await asyncio.sleep(r.random() * 0.01)
            s.response = r.choice(actions(s.prompt if isinstance(s.prompt, str) else s.prompt[-1]["content"]))
            if args.flat_every and s.group_index % args.flat_every == 0:
                s.response = "no idea"  # a flat group: every sample invalid
            s.status = "completed"
            return s
    group = await asyncio.gather(*[generate(s, random.Random(rng.random())) for s in group])
    if not state.aborted and args.group_rm:
        rewards = await load_function(args.custom_rm_path)(args, group)
        for s, r in zip(group, rewards):
            s.reward = r
    return group


def record(group, why):
    """why: kept (in the rollout), filtered (dropped by the dynamic filter),
    surplus (kept by the filter after the batch was full) or aborted
    (scored while abort() waited)."""
    return {"group_index": group[0].group_index, "label": group[0].label, "why": why,
            "samples": [{"response": s.response, "reward": s.reward, "remove_sample": s.remove_sample,
                         "lm2lm": s.metadata.get("lm2lm")} for s in group]}


async def generate_rollout_async(args, rollout_id, data_source, rng):
    state = State(args)
    dynamic_filter = load_function(args.dynamic_sampling_filter_path) if args.dynamic_sampling_filter_path else None
    target = args.rollout_batch_size
    data, scored = [], []
    while len(data) < target:
        while state.remaining < target:
            for group in data_source.get_samples(args.over_sampling_batch_size or target):
                state.pendings.add(asyncio.ensure_future(generate_and_rm_group(args, state, rng, group)))
                state.remaining += 1
        done, state.pendings = await asyncio.wait(state.pendings, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            group = t.result()
            keep = True if dynamic_filter is None else dynamic_filter(args, group)
            keep = keep if isinstance(keep, bool) else keep.keep
            if not keep:
                state.remaining -= 1
                scored.append(record(group, "filtered"))
                continue
            if len(data) < target:
                data.append(group)
                scored.append(record(group, "kept"))
            else:
                scored.append(record(group, "surplus"))
    state.aborted = True  # abort(): wait for the pending groups
    while state.pendings:
        done, state.pendings = await asyncio.wait(state.pendings, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            group = t.result()
            if group[0].reward is not None or group[0].metadata.get("lm2lm"):
                scored.append(record(group, "aborted"))
    return data, scored


def post_process(args, data):  # RolloutManager._post_process_rewards, group norm
    adv = []
    for group in data:
        r = [s.reward for s in group]
        mean = sum(r) / len(r)
        c = [x - mean for x in r]
        if args.advantage_estimator in ("grpo", "gspo", "cispo") and args.grpo_std_normalization:
            std = (sum(x * x for x in c) / (len(c) - 1)) ** 0.5 if len(c) > 1 else 0.0
            c = [x / (std + 1e-6) for x in c]
        adv.append(c)
    return adv


def main(args):
    stand_ins()
    from lm2lm_client import calibrations
    import slime.rollout.sample_hooks as hooks
    rng = random.Random(args.seed)
    rows = []
    with open(args.prompt_data) as f:
        for line in f:
            d = json.loads(line)
            rows.append(Sample(prompt=d[args.input_key], label=None if args.label_key is None else d[args.label_key],
                               metadata=d.get(args.metadata_key) or {}))
    source = DataSource(args, rows)
    rollouts = []

    def sglang_generate_rollout(args, rollout_id, data_source, evaluation=False):
        if args.ahead:
            # train_async.py: the next rollouts' steps reached the service
            # before this rollout's groups are scored.
            from lm2lm_client import advance
            advance(rollout_id + args.ahead)
        data, scored = asyncio.run(generate_rollout_async(args, rollout_id, data_source, rng))
        return {"data": data, "scored": scored}

    mod = types.ModuleType("slime.rollout.sglang_rollout")
    mod.generate_rollout = sglang_generate_rollout
    sys.modules[mod.__name__] = mod
    generate_rollout = load_function(args.rollout_function_path)
    # A resumed run starts at its checkpoint's rollout id; its data source's
    # group_index counter restarts where the checkpoint left it (here 0).
    for rollout_id in range(args.start_rollout, args.start_rollout + args.num_rollout):
        hooks.set_current_rollout_id(rollout_id)  # RolloutManager.generate
        try:
            out = generate_rollout(args, rollout_id, source)
        except Exception as e:  # the rollout ends; the trainer gets nothing
            rollouts.append({"rollout_id": rollout_id, "error": str(e)})
            break
        adv = post_process(args, out["data"])
        rollouts.append({"rollout_id": rollout_id, "groups": out["scored"], "advantages": adv,
                         "removed": sum(s.remove_sample for g in out["data"] for s in g)})
    print(json.dumps({"rollouts": rollouts, "calibrations": calibrations()}))


if __name__ == "__main__":
    main(parse())
