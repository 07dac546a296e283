"""Simulates how verl's Reward Loop calls a reward manager, against a live service.

    python3 verl_sim.py [--completions FILE] key=value ...

The key=value arguments are verl's Hydra overrides (the launch recipe of
docs/frameworks/verl.md). Every key must be one verl's config has (KNOWN
below, with verl's defaults); an unknown key is refused, so a recipe that
drifts from the simulator fails. LM2LM_URL and LM2LM_TOKEN name the
service. It prints one JSON object: the states request, the resolved
config, every step's groups with each sample's reward_score and
reward_extra_info (or its error), and the service's calibrations.

Written from verl-project/verl at commit 1dda039b9c63 (version 0.10.0.dev),
the default v1 trainer in sync mode (trainer.use_v1=true):

- The batch (verl/trainer/ppo/v1/trainer_base.py, _add_prompts_to_generate):
  data.train_batch_size prompts per step, each with a fresh uid (uuid4) and
  the trainer's global_steps (from 1).
- The rollout (verl/trainer/ppo/v1/agent_loop_tq.py): AgentLoopManagerTQ.
  generate_sequences chunks the prompts over rollout.agent.num_workers agent
  loop workers; AgentLoopWorkerTQ.generate_sequences starts every prompt as a
  background task; _run_prompt starts its rollout.n sessions (session_id
  0..n-1, the prompt's columns as keyword arguments) at once and marks the
  prompt "failure" if any session raised, else "finished".
- The reward (verl/experimental/agent_loop/agent_loop.py,
  AgentLoopWorker._compute_score): each finished session builds a one-sample
  DataProto (prompts, responses, attention_mask of ones; non_tensor_batch =
  the session's keyword arguments) and awaits compute_score on
  random.choice(reward_loop_worker_handles): no timeout, no retry. A reward
  worker (verl/experimental/reward_loop/reward_loop.py, RewardLoopWorker) is
  an async Ray actor: its calls run concurrently on one event loop (Ray's
  default max_concurrency for async actors, 1000); reward.num_workers of them.
  RewardLoopWorker.compute_score calls reward_manager.run_single(data).
- The reward manager is loaded as verl/trainer/ppo/reward.py does:
  reward.reward_manager.source=importlib loads reward.reward_manager.name
  from reward.reward_manager.module.path; reward.custom_reward_function.path
  and .name give its compute_score; it is built with (config, tokenizer,
  compute_score).
- DAPO's filter (verl/trainer/ppo/v1/replay_buffer.py,
  _dapo_filtered_keys): a finished group whose
  algorithm.filter_groups.metric (a reward_extra_info key) has zero standard
  deviation over its samples is evicted.
- A failed group's failed sessions store no trajectory; with
  trainer.v1.sampler.sync_refill_failed_groups the group is replaced.

A step ends when every group is terminal (verl's sync trainer then trains
before it starts the next step's rollout).
"""
import argparse
import asyncio
import importlib.util
import json
import os
import random
import statistics
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.dirname(HERE)
if ADAPTERS not in sys.path:
    sys.path.insert(0, ADAPTERS)

import lm2lm_client  # noqa: E402

# The overrides the simulator knows, with verl's defaults
# (verl/trainer/config/_generated_ppo_trainer.yaml at the commit above).
KNOWN = {
    "algorithm.adv_estimator": "gae",
    "algorithm.norm_adv_by_std_in_grpo": True,
    "algorithm.use_kl_in_reward": False,
    "algorithm.filter_groups.enable": False,
    "algorithm.filter_groups.metric": None,
    "algorithm.filter_groups.max_inflight_gen_batches": 1,
    "data.train_files": None,
    "data.val_files": None,
    "data.train_batch_size": 1024,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "actor_rollout_ref.model.path": None,
    "actor_rollout_ref.actor.optim.lr": 1e-6,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": None,
    "actor_rollout_ref.actor.clip_ratio_low": 0.2,
    "actor_rollout_ref.actor.clip_ratio_high": 0.2,
    "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.rollout.name": None,
    "actor_rollout_ref.rollout.n": 1,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.5,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": None,
    "actor_rollout_ref.rollout.agent.num_workers": 8,
    "reward.num_workers": 8,
    "reward.reward_manager.source": "register",
    "reward.reward_manager.name": "naive",
    "reward.reward_manager.module.path": None,
    "reward.custom_reward_function.path": None,
    "reward.custom_reward_function.name": "compute_score",
    "trainer.use_v1": True,
    "trainer.v1.trainer_mode": "sync",
    "trainer.v1.sampler.sync_refill_failed_groups": False,
    "trainer.val_before_train": True,
    "trainer.test_freq": -1,
    "trainer.total_training_steps": None,
    "trainer.total_epochs": 30,
    "trainer.rollout_data_dir": None,
    "trainer.project_name": "verl_examples",
    "trainer.experiment_name": "gsm8k",
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 1,
    "trainer.save_freq": -1,
}

# Ray's default max_concurrency of an async actor (a reward loop worker).
RAY_ASYNC_ACTOR_CONCURRENCY = 1000

DEFAULT_COMPLETIONS = [
    '{"mechanism": "lr-scale", "params": {"factor": "2"}, "rationale": "faster"}',
    '{"mechanism": "warmup", "params": {"steps": "1"}}',
    '{"mechanism": "none"}',
    "no idea",
]


def parse_value(v):
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def parse_overrides(args):
    """verl's defaults with the overrides applied; an unknown key is an error."""
    flat = dict(KNOWN)
    for a in args:
        if "=" not in a:
            raise SystemExit("verl_sim: not a key=value override: %r" % a)
        k, v = a.split("=", 1)
        if k not in KNOWN:
            raise SystemExit("verl_sim: unknown override %r (not in verl's config as simulated)" % k)
        flat[k] = parse_value(v)
    return flat


def nest(flat):
    """The dotted keys as nested dicts (DictConfig-like .get access)."""
    root = {}
    for k, v in flat.items():
        cur = root
        parts = k.split(".")
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = v
    return root


def load_file(path):
    """verl.utils.import_utils.load_module: a module from a file path."""
    cand = [path, os.path.join(ADAPTERS, os.path.basename(path))]
    for p in cand:
        if os.path.exists(p):
            spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(p))[0], p)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod
    raise SystemExit("verl_sim: no module file %r" % path)


class Vec:
    """A 1-D tensor: shape, slicing, sum."""

    def __init__(self, xs):
        self.xs = list(xs)
        self.shape = (len(self.xs),)

    def __getitem__(self, s):
        return Vec(self.xs[s]) if isinstance(s, slice) else self.xs[s]

    def sum(self):
        return sum(self.xs)

    def __iter__(self):
        return iter(self.xs)


class Item:
    def __init__(self, batch, non_tensor_batch, meta_info):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info


class Proto:
    """DataProto as run_single sees it: rows of tensors and non-tensors."""

    def __init__(self, batch, non_tensor_batch, meta_info=None):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info or {}

    def __len__(self):
        return len(next(iter(self.batch.values())))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Proto({k: v[i] for k, v in self.batch.items()},
                         {k: v[i] for k, v in self.non_tensor_batch.items()}, self.meta_info)
        return Item({k: v[i] for k, v in self.batch.items()},
                    {k: v[i] for k, v in self.non_tensor_batch.items()}, self.meta_info)


class ByteTokenizer:
    """A tokenizer whose tokens are UTF-8 bytes (decode inverts encode)."""

    def encode(self, text):
        return list(text.encode())

    def decode(self, ids, skip_special_tokens=True):
        return bytes(list(ids)).decode("utf-8", "replace")


def one_sample(tok, prompt_text, response, kwargs):
    """AgentLoopWorker._compute_score's DataProto for one session output."""
    p, r = tok.encode(prompt_text), tok.encode(response)
    batch = {"prompts": [Vec(p)], "responses": [Vec(r)], "attention_mask": [Vec([1] * (len(p) + len(r)))],
             "input_ids": [Vec(p + r)]}
    nt = {k: [v] for k, v in kwargs.items()}
    nt.update({"__num_turns__": [2], "tool_extra_fields": [{}], "prompt_len": [len(p)], "response_len": [len(r)]})
    return Proto(batch, nt)


class RewardWorker:
    """RewardLoopWorker: an async actor around one reward manager."""

    def __init__(self, manager):
        self.manager = manager
        self.slots = asyncio.Semaphore(RAY_ASYNC_ACTOR_CONCURRENCY)

    async def compute_score(self, data):
        async with self.slots:
            return await self.manager.run_single(data)


async def run_prompt(prompt, n, workers, rng, policy, step, tok, delay=None):
    """AgentLoopWorkerTQ._run_prompt: n sessions at once, then the group status."""

    async def session(i):
        kwargs = dict(prompt, session_id=i)
        completion = policy(step, prompt["index"], i)
        data = one_sample(tok, prompt["raw_prompt"][-1]["content"], completion, kwargs)
        out = {"session_id": i, "completion": completion}
        if delay is not None and delay(step, prompt["index"], i) > 0:
            await asyncio.sleep(delay(step, prompt["index"], i))  # a straggling generation
        try:
            res = await rng.choice(workers).compute_score(data)
            out["reward_score"] = res["reward_score"]
            out["reward_extra_info"] = res["reward_extra_info"]
        except Exception as e:  # the session fails; verl stores no trajectory for it
            out["error"] = "%s: %s" % (type(e).__name__, e)
        return out

    samples = await asyncio.gather(*(session(i) for i in range(n)))
    status = "failure" if any("error" in s for s in samples) else "finished"
    # Trajectories stored: one per session whose reward came back
    # (_agent_loop_postprocess runs only for a session that did not raise).
    stored = sum("error" not in s for s in samples)
    return {"uid": prompt["uid"], "state_id": prompt["extra_info"]["state_id"], "index": prompt["index"],
            "status": status, "stored": stored, "samples": list(samples)}


def dapo_evicted(group, metric):
    vals = [float(s["reward_extra_info"][metric]) for s in group["samples"] if "reward_extra_info" in s]
    return len(vals) > 1 and statistics.pstdev(vals) == 0.0


def replay_buffer(group, flat):
    """What ReplayBuffer (sync) does with a terminal group: "trained",
    "dapo_evicted", "refilled" (a failed group with no stored trajectory,
    under sync_refill_failed_groups: evicted, a fresh prompt dispatched)
    or "empty" (no stored trajectory without it: selected, but it adds
    nothing to the batch; sample raises "no materializable trajectories"
    when no selected group has one). A failed group with a stored
    trajectory is "trained" on what it stored."""
    if group["status"] == "failure" and group["stored"] == 0:
        return "refilled" if flat["trainer.v1.sampler.sync_refill_failed_groups"] else "empty"
    if group["dapo_evicted"]:
        return "dapo_evicted"
    return "trained"


async def run(cfg, flat, policy, seed, start=1, delay=None, ahead=0):
    B, n = int(flat["data.train_batch_size"]), int(flat["actor_rollout_ref.rollout.n"])
    steps = flat["trainer.total_training_steps"]
    if steps is None:
        raise SystemExit("verl_sim: set trainer.total_training_steps")
    steps = int(steps)
    if flat["reward.reward_manager.source"] != "importlib":
        raise SystemExit("verl_sim: simulates reward.reward_manager.source=importlib only")
    mod = load_file(flat["reward.reward_manager.module.path"])
    manager_cls = getattr(mod, flat["reward.reward_manager.name"])
    fn = None
    if flat["reward.custom_reward_function.path"]:
        fn = getattr(load_file(flat["reward.custom_reward_function.path"]), flat["reward.custom_reward_function.name"])
    tok = ByteTokenizer()
    workers = [RewardWorker(manager_cls(config=cfg, tokenizer=tok, compute_score=fn))
               for _ in range(int(flat["reward.num_workers"]))]
    states_req = {"request_id": "verl-sim-states-%d" % (B * steps), "n": B * steps, "split": "train"}
    states = (await asyncio.to_thread(lm2lm_client.post, "/v1/states", states_req))["states"]
    # The service's dataset rows (serve.NewDatasetRow), in dataloader order.
    rows = [{"data_source": "lm2lm", "raw_prompt": st["prompt"], "index": k,
             "reward_model": {"style": "rule", "ground_truth": st["state_id"]},
             "extra_info": {"state_id": st["state_id"], "split": st["split"]}} for k, st in enumerate(states)]
    rng = random.Random(seed)
    metric = flat["algorithm.filter_groups.metric"] if flat["algorithm.filter_groups.enable"] else None
    agents = max(1, int(flat["actor_rollout_ref.rollout.agent.num_workers"]))
    out_steps = []
    for k, step in enumerate(range(start, start + steps)):
        if ahead:
            # The trainer is ahead of this rollout (an asynchronous mode):
            # the service's step has moved on before its samples arrive.
            await asyncio.to_thread(lm2lm_client.advance, step + ahead)
        prompts = [dict(r, uid=str(uuid.uuid4()), global_steps=step) for r in rows[k * B: (k + 1) * B]]
        # generate_sequences: chunks over the agent loop workers, every prompt a background task.
        chunks = [prompts[i::agents] for i in range(agents)]
        tasks = [run_prompt(p, n, workers, rng, policy, step, tok, delay) for c in chunks for p in c]
        groups = await asyncio.gather(*tasks)
        groups.sort(key=lambda g: g["index"])
        for g in groups:
            g["dapo_evicted"] = bool(metric) and g["status"] == "finished" and dapo_evicted(g, metric)
            g["replay_buffer"] = replay_buffer(g, flat)
        out_steps.append({"step": step, "groups": groups})
    cal = await asyncio.to_thread(lm2lm_client.calibrations)
    return {"states_request": states_req, "steps": out_steps, "calibrations": cal}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--completions", help="a JSON list of completion texts the simulated policy writes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flat-every", type=int, default=0,
                    help="every k-th prompt of a step gets the same completion n times (a collapsed policy)")
    ap.add_argument("--start-step", type=int, default=1, help="the first global_steps (a run resumed from a checkpoint)")
    ap.add_argument("--policy-shift", type=int, default=0, help="shifts the completions the policy writes")
    ap.add_argument("--straggle", default="",
                    help="STEP:PROMPT:SESSION:SECONDS: that session's generation finishes SECONDS late")
    ap.add_argument("--ahead", type=int, default=0,
                    help="before each step's rollout, advance the service to step + AHEAD (an asynchronous trainer)")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    flat = parse_overrides(a.overrides)
    texts = DEFAULT_COMPLETIONS
    if a.completions:
        with open(a.completions) as f:
            texts = json.load(f)

    def policy(step, prompt, session):
        if a.flat_every > 0 and prompt % a.flat_every == a.flat_every - 1:
            session = 0
        return texts[(step * 7 + prompt * 3 + session * 5 + a.policy_shift) % len(texts)]

    delay = None
    if a.straggle:
        st, pr, se, sec = a.straggle.split(":")

        def delay(step, prompt, session):
            return float(sec) if (step, prompt, session) == (int(st), int(pr), int(se)) else 0.0

    res = asyncio.run(run(nest(flat), flat, policy, a.seed, a.start_step, delay, a.ahead))
    given = {o.split("=", 1)[0] for o in a.overrides}
    res["config"] = {k: flat[k] for k in sorted(given)}
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
