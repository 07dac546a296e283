"""OpenRLHF's calling pattern, standard library only, against a live service.

Written from OpenRLHF 3c3be6234e0cb353e76bb8019947db9dfe99fca7:

- openrlhf/cli/train_ppo_ray.py: the dotted flags parsed below (the
  recipe in docs/frameworks/openrlhf.md uses only these).
- openrlhf/datasets/prompts_dataset.py preprocess_data: the prompt is
  data[input_key] (the chat template applied to it with
  --data.apply_chat_template), the label data[label_key].
- openrlhf/trainer/ppo_utils/samples_generator.py _generate_vllm and
  _dispatch_prompts_to_vllm: every prompt of a rollout batch is dispatched
  at once, each as one generate_responses call; results are taken in
  completion order; with dynamic filtering a prompt whose samples' mean
  score is not strictly inside the range is dropped and a fresh prompt is
  dispatched.
- openrlhf/trainer/ray/vllm_engine.py RolloutRayActor: async __init__
  builds SingleTurnAgentExecutor (so the reward file is loaded inside the
  actor's event loop); generate_responses gathers n_samples_per_prompt
  execute() calls.
- openrlhf/utils/agent.py SingleTurnAgentExecutor: loads reward_func from a
  .py --reward.remote_url (spec_from_file_location); execute() calls it
  with ([query], [prompt], [label]) through asyncio.to_thread (the loop's
  default executor), query = decode(prompt + response) with special tokens
  kept; an exception is logged and leaves reward and scores None. (Its
  HTTP form: one POST per sample, aiohttp total timeout 180 s, 5 tries
  1 s apart, then the same None.)
- openrlhf/trainer/ppo_trainer.py PPOTrainer.fit: generate_samples, then
  train_step(rollout_samples, global_step) returns global_step + 1.

Samples are "generated" from the CARD lines of the prompt (as
lm2lm_tabular does) by a seeded RNG, finished with an end-of-turn token,
with random delays so that samples finish out of order. The trainer's
module is a stand-in (openrlhf.trainer.ppo_trainer.BasePPOTrainer) that the
adapter's setup hook patches on import, as in the PPOTrainer actor.
Prints one JSON object: per step the samples (label, index, completion,
reward, score, error) and the groups kept, then the calibrations.
"""
import argparse
import asyncio
import importlib.util
import json
import os
import random
import sys
import tempfile
import types

import lm2lm_tabular

EOS = "<|im_end|>"


def parse(argv=None):
    p = argparse.ArgumentParser()
    a = p.add_argument
    a("--data.prompt_dataset", dest="prompt_dataset", required=True)  # a JSON Lines file here
    a("--data.input_key", dest="input_key", default="input")
    a("--data.label_key", dest="label_key", default=None)
    a("--data.apply_chat_template", dest="apply_chat_template", action="store_true")
    a("--reward.remote_url", dest="remote_url", required=True)
    a("--rollout.batch_size", dest="rollout_batch_size", type=int, default=1024)
    a("--rollout.n_samples_per_prompt", dest="n_samples", type=int, default=1)
    a("--rollout.temperature", dest="temperature", type=float, default=1.0)
    a("--rollout.max_new_tokens", dest="max_new_tokens", type=int, default=1024)
    a("--algo.advantage.estimator", dest="estimator", default="gae")
    a("--algo.advantage.no_std_norm", dest="no_std_norm", action="store_true")
    a("--algo.dynamic_filtering_enable", dest="dynamic_filtering", action="store_true")
    a("--algo.dynamic_filtering_range", dest="dynamic_filtering_range", nargs=2, type=float, default=(0, 1))
    a("--actor.eps_clip_low_high", dest="eps_clip_low_high", nargs=2, type=float, default=None)
    a("--algo.kl.init_coef", dest="kl_init_coef", type=float, default=0.01)
    a("--data.max_len", dest="max_len", type=int, default=None)
    # placement and optimiser flags of the recipe: accepted, not simulated
    a("--actor.model_name_or_path", dest="model", default="policy")
    a("--actor.num_gpus_per_node", dest="actor_gpus", type=int, default=8)
    a("--vllm.num_engines", dest="vllm_engines", type=int, default=None)
    a("--train.batch_size", dest="train_batch_size", type=int, default=128)
    a("--train.num_episodes", dest="num_episodes", type=int, default=1)
    a("--actor.adam.lr", dest="lr", type=float, default=1e-6)
    a("--ckpt.output_dir", dest="output_dir", default=None)
    a("--sim.steps", dest="steps", type=int, default=1)
    a("--sim.seed", dest="seed", type=int, default=1)
    a("--sim.flat_every", dest="flat_every", type=int, default=0)  # every k-th prompt answers nonsense G times
    a("--train.async_enable", dest="async_enable", action="store_true")
    a("--train.async_queue_size", dest="async_queue_size", type=int, default=1)
    a("--sim.start_step", dest="start_step", type=int, default=0)  # a run resumed from a checkpoint
    a("--sim.straggle", dest="straggle", default="")  # ROW:SECONDS: the last sample of that row's group is late
    return p.parse_args(argv)


def chat_template(messages):
    return "".join("<|im_start|>%s\n%s%s\n" % (m["role"], m["content"], EOS) for m in messages) + "<|im_start|>assistant\n"


def actions(prompt):
    """The catalogue's changes (lm2lm_tabular.actions), the no-change proposal and an unparseable answer."""
    return lm2lm_tabular.actions(prompt) + ['{"mechanism": "none"}', "no idea"]


def trainer_module():
    """A stand-in openrlhf.trainer.ppo_trainer on sys.path."""
    root = tempfile.mkdtemp(prefix="openrlhf-sim-")
    pkg = os.path.join(root, "openrlhf", "trainer")
    os.makedirs(pkg)
    for d in (os.path.join(root, "openrlhf"), pkg):
        open(os.path.join(d, "__init__.py"), "w").close()
    with open(os.path.join(pkg, "ppo_trainer.py"), "w") as f:
        f.write("class BasePPOTrainer:\n"
                "    def __init__(self, strategy_args):\n"
                "        self.args = strategy_args\n"
                "    def train_step(self, rollout_samples, global_step):\n"
                "        return {}, global_step + 1\n")
    sys.path.insert(0, root)


class Actor:
    """RolloutRayActor with SingleTurnAgentExecutor and a reward file."""

    async def init(self, path):
        spec = importlib.util.spec_from_file_location("reward_func", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        self.reward_func = mod.reward_func

    async def execute(self, rng, prompt, label, flat=False, late=0.0):
        acts = actions(prompt)
        response = ("no idea" if flat else rng.choice(acts)) + EOS
        await asyncio.sleep(rng.random() * 0.02 + late)  # generation finishes out of order
        query = prompt + response
        out = {"label": label, "completion": response, "reward": None, "score": None, "index": None}
        try:
            info = await asyncio.to_thread(self.reward_func, [query], [prompt], [label])
            out["reward"], out["score"] = info.get("rewards"), info.get("scores")
            logs = info["extra_logs"]
            out["index"] = int(logs["lm2lm_index"])
            out["step"] = int(logs["lm2lm_step"])
            out["partial"], out["failed"] = bool(logs["lm2lm_partial"]), bool(logs["lm2lm_failed"])
        except Exception as e:  # agent.py: logged, reward stays None
            out["error"] = str(e)
        return out

    async def generate_responses(self, rng, prompt, label, n, flat=False, late=0.0):
        """The n samples of one prompt; the last one late seconds late."""
        return await asyncio.gather(*[self.execute(random.Random(rng.random()), prompt, label, flat,
                                                   late if j == n - 1 else 0.0) for j in range(n)])


async def rollout(args, actor, rng, rows, late=None):
    """samples_generator._generate_vllm for one step; late(i) is how late
    the last sample of row i comes."""
    queue = list(enumerate(rows))
    pending = set()

    def dispatch(k):
        for _ in range(k):
            if queue:
                i, (prompt, label) = queue.pop(0)
                flat = args.flat_every > 0 and i % args.flat_every == 0
                pending.add(asyncio.ensure_future(actor.generate_responses(rng, prompt, label, args.n_samples, flat,
                                                                           late(i) if late else 0.0)))
    dispatch(args.rollout_batch_size)
    kept, dropped = [], []
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for t in done:
            group = t.result()
            if args.dynamic_filtering and all(s["score"] is not None for s in group):
                lo, hi = args.dynamic_filtering_range
                if not (lo < sum(s["score"] for s in group) / len(group) < hi):
                    dropped.append(group)
                    dispatch(1)
                    continue
            kept.append(group)
    return kept, dropped


async def main(args):
    os.environ.setdefault("LM2LM_GROUP_SIZE", str(args.n_samples))
    trainer_module()
    import lm2lm_openrlhf  # the setup hook, as Ray's worker_process_setup_hook runs it
    from lm2lm_client import calibrations
    lm2lm_openrlhf.setup()
    from openrlhf.trainer.ppo_trainer import BasePPOTrainer
    rows = []
    with open(args.prompt_dataset) as f:
        for line in f:
            d = json.loads(line)
            prompt = chat_template(d[args.input_key]) if args.apply_chat_template else d[args.input_key]
            rows.append((prompt, "" if args.label_key is None else d[args.label_key]))
    actor = Actor()
    await actor.init(args.remote_url)
    rng = random.Random(args.seed)
    # strategy.args as OpenRLHF nests them (openrlhf/cli/train_ppo_ray.py).
    nested = types.SimpleNamespace(algo=types.SimpleNamespace(
        dynamic_filtering_enable=args.dynamic_filtering, dynamic_filtering_range=tuple(args.dynamic_filtering_range)))
    trainer, step, steps = BasePPOTrainer(nested), args.start_step, []
    flat = lambda gs: [s for g in gs for s in g]
    straggle = None
    if args.straggle:
        row, sec = args.straggle.split(":")
        straggle = lambda i: float(sec) if i == int(row) else 0.0
    if args.async_enable:
        # ppo_trainer_async: GenerateSamplesActor generates rollout k + 1
        # while TrainingActor trains on rollout k and posts its step. Here
        # the trainer's train_step for the previous rollout lands while
        # this rollout's samples are in flight: every group's last sample
        # comes after it.
        prev = None
        for _ in range(args.steps):
            gen = asyncio.ensure_future(rollout(args, actor, rng, rows, lambda i: 0.3))
            if prev is not None:
                await asyncio.sleep(0.1)
                _, step = await asyncio.to_thread(trainer.train_step, prev, step)
            kept, dropped = await gen
            steps.append({"step": step, "kept": flat(kept), "dropped": flat(dropped)})
            if any(s["reward"] is None for s in flat(kept)):
                break
            prev = kept
        print(json.dumps({"steps": steps, "calibrations": calibrations()}))
        return
    for k in range(args.steps):
        kept, dropped = await rollout(args, actor, rng, rows, straggle if k == 0 else None)
        steps.append({"step": step, "kept": flat(kept), "dropped": flat(dropped)})
        if any(s["reward"] is None for s in flat(kept)):
            break  # experience_maker cannot stack a missing reward: the step fails
        _, step = trainer.train_step(kept, step)
    print(json.dumps({"steps": steps, "calibrations": calibrations()}))


if __name__ == "__main__":
    asyncio.run(main(parse()))
