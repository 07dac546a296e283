"""A simulator of how TRL calls reward functions, against a live lm2lm service.

Written from TRL's source (github.com/huggingface/trl, commit f2cd577,
version 1.10.0.dev0):

  GRPOTrainer, trl/trainer/grpo_trainer.py
  - _get_train_sampler / RepeatSampler (trl/trainer/utils.py): a global
    generation batch of generation_batch_size // num_generations prompts,
    each repeated num_generations times in a row; the dataloader's batch
    is per_device_train_batch_size * steps_per_generation, so process p
    holds global positions p*L .. p*L+L-1 and one prompt's group may be
    split across processes.
  - _prepare_inputs: completions are generated and scored when
    _step % (steps_per_generation * num_iterations) == 0 (_step counts
    training_step calls); global_step counts optimizer steps (one per
    gradient_accumulation_steps calls).
  - _calculate_rewards: in every process, each reward function gets
    prompts, completions, completion_ids and every dataset column but
    prompt/completion/completion_ids as keyword arguments (one value per
    local sample), plus trainer_state (the TrainerState: global_step),
    log_extra(column, values) and log_metric(name, value); an async reward
    function is awaited on the trainer's loop, a sync one called; None
    becomes NaN; the rewards are gathered across processes in process
    order.
  - _generate_and_score_completions: groups are views of num_generations;
    nan-aware group mean; std scaling unless scale_rewards == "none";
    unscorable (NaN) samples get advantage 0 (nan_to_num).
  - GRPOConfig.__post_init__ (trl/trainer/grpo_config.py): scale_rewards
    True/False -> "group"/"none"; generation_batch_size and
    steps_per_generation; divisibility by num_generations.

  AsyncGRPOTrainer, trl/experimental/async_grpo/async_rollout_worker.py
  - AsyncRolloutWorker.start: the reward functions are pickled
    (pickle.dumps) and sent to a spawned child process.
  - _repeat_iterator and _generate_loop: the dataset is cycled in order,
    each row num_generations times; each dataset column but
    prompt/completion/completion_ids is repeated num_generations times.
  - _score_group: one whole group per call, with completions, prompts,
    completion_ids and the columns; no trainer_state, no log_extra or
    log_metric; async functions awaited, sync ones via asyncio.to_thread;
    None -> NaN; advantage (r - mean) / (std + 1e-8) over the scored ones.
  - The trainer's step reaches the service through a TrainerCallback
    (on_step_begin / on_step_end with the TrainerState's global_step).

The simulator draws completions from a fixed pool (it has no policy) and
runs the trainer's loop in lock step with the service (the callback waits
for running calibrations), so that a run can be replayed. It prints one
JSON object.

  python3 trl_sim.py grpo  '{"config": {...}, "states": [...], "pool": [...], "world_size": 2}'
  python3 trl_sim.py async '{"config": {...}, "states": [...], "pool": [...]}'
  (states: /v1/states's; without them the simulator asks for n_states; pool:
  completion texts; config_py: GRPOConfig keyword arguments as Python
  literals, config: JSON values over them)
  python3 trl_sim.py check-config grpo '{"loss_type": "\\"dapo\\"", ...}'   (Python literals)
"""
import ast
import asyncio
import inspect
import json
import math
import multiprocessing as mp
import os
import pickle
import sys
import threading
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lm2lm_client  # noqa: E402
import lm2lm_trl  # noqa: E402

# GRPOConfig's fields (trl/trainer/grpo_config.py at f2cd577) and the
# TrainingArguments fields a recipe sets; a name outside these is refused.
TRAINING_ARGS = {
    "output_dir": None, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_steps": -1,
    "num_train_epochs": 3.0, "seed": 42, "bf16": False, "logging_steps": 10, "save_steps": 500, "report_to": "none",
    "learning_rate": 1e-6, "per_device_eval_batch_size": 8, "eval_strategy": "no", "do_eval": False,
    "auto_find_batch_size": False,
}
GRPO_FIELDS = dict(TRAINING_ARGS, **{
    name: None for name in (
        "model_init_kwargs trust_remote_code router_aux_loss_coef disable_dropout cast_lm_head_to_fp32 "
        "remove_unused_columns num_generations_eval max_completion_length ds3_gather_for_generation "
        "shuffle_dataset pad_to_multiple_of generation_batch_size steps_per_generation temperature top_p top_k "
        "min_p generation_kwargs chat_template_kwargs repetition_penalty cache_implementation use_vllm vllm_mode "
        "vllm_model_impl vllm_enable_sleep_mode vllm_structured_outputs_regex vllm_server_base_url "
        "vllm_server_host vllm_server_port vllm_server_timeout vllm_group_port vllm_gpu_memory_utilization "
        "vllm_max_model_length vllm_tensor_parallel_size delta sapo_temperature_neg "
        "sapo_temperature_pos vespo_k_pos vespo_lambda_pos vespo_k_neg vespo_lambda_neg "
        "importance_sampling_level reward_weights mask_truncated_completions "
        "sync_ref_model ref_model_mixup_alpha ref_model_sync_steps top_entropy_quantile entropy_coef "
        "use_adaptive_entropy entropy_coef_min entropy_coef_max entropy_coef_delta entropy_target "
        "max_tool_calling_iterations vllm_importance_sampling_correction vllm_importance_sampling_mode "
        "vllm_importance_sampling_clip_max vllm_importance_sampling_clip_min off_policy_mask_threshold "
        "use_bias_correction_kl log_completions log_multimodal num_completions_to_print log_unique_prompts "
        "log_completions_hub_repo use_transformers_continuous_batching transformers_continuous_batching_config "
        "use_transformers_paged vllm_importance_sampling_cap").split()})
GRPO_FIELDS.update({"num_generations": 8, "num_iterations": 1, "beta": 0.0, "epsilon": 0.2, "epsilon_high": None,
                    "scale_rewards": "group", "loss_type": "dapo", "multi_objective_aggregation": "sum_then_normalize",
                    "learning_rate": 1e-6, "shuffle_dataset": True, "logging_steps": 10})
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")

# AsyncGRPOConfig's fields (trl/experimental/async_grpo/async_grpo_config.py).
ASYNC_FIELDS = dict(TRAINING_ARGS, **{name: None for name in (
    "model_init_kwargs trust_remote_code router_aux_loss_coef lr_scheduler_type max_completion_length "
    "temperature chat_template_kwargs max_tool_calling_iterations fork_threshold_tokens vllm_server_base_url "
    "vllm_server_timeout request_timeout token_budget max_inflight_tasks queue_maxsize heartbeat_stale_after_s "
    "log_completions num_completions_to_print").split()})
ASYNC_FIELDS.update({"num_generations": 8, "epsilon": 0.2, "epsilon_high": None, "max_staleness": 4,
                     "weight_sync_steps": 1})


def parse_grpo_config(kwargs, world_size=1):
    """GRPOConfig(**kwargs) as far as the reward path reads it: unknown
    names and values TRL refuses raise ValueError."""
    unknown = sorted(set(kwargs) - set(GRPO_FIELDS))
    if unknown:
        raise ValueError("GRPOConfig has no field %s" % ", ".join(unknown))
    c = dict(GRPO_FIELDS, **kwargs)
    c["scale_rewards"] = {True: "group", False: "none"}.get(c["scale_rewards"], c["scale_rewards"])
    if c["scale_rewards"] not in ("group", "batch", "none"):
        raise ValueError("scale_rewards must be 'group', 'batch' or 'none', not %r" % (c["scale_rewards"],))
    if c["loss_type"] not in LOSS_TYPES:
        raise ValueError("unknown loss_type %r" % (c["loss_type"],))
    if c["multi_objective_aggregation"] not in ("sum_then_normalize", "normalize_then_sum"):
        raise ValueError("unknown multi_objective_aggregation %r" % (c["multi_objective_aggregation"],))
    if c["auto_find_batch_size"]:
        raise ValueError("auto_find_batch_size is not supported by GRPO")
    per = c["per_device_train_batch_size"] * world_size
    if c["generation_batch_size"] is None and c["steps_per_generation"] is None:
        c["steps_per_generation"] = c["gradient_accumulation_steps"]
        c["generation_batch_size"] = per * c["steps_per_generation"]
    elif c["generation_batch_size"] is not None and c["steps_per_generation"] is None:
        if c["generation_batch_size"] % per:
            raise ValueError("generation_batch_size must be divisible by the global batch size")
        c["steps_per_generation"] = c["generation_batch_size"] // per
    elif c["generation_batch_size"] is None:
        c["generation_batch_size"] = per * c["steps_per_generation"]
    else:
        raise ValueError("'generation_batch_size' and 'steps_per_generation' can not be both configured")
    if c["generation_batch_size"] % c["num_generations"]:
        raise ValueError("generation_batch_size must be divisible by num_generations")
    if c["num_generations"] < 2:
        raise ValueError("GRPO requires at least 2 generations per prompt")
    if c["epsilon_high"] is None:
        c["epsilon_high"] = c["epsilon"]
    return c


def parse_async_config(kwargs):
    """AsyncGRPOConfig(**kwargs): unknown names raise ValueError."""
    unknown = sorted(set(kwargs) - set(ASYNC_FIELDS))
    if unknown:
        raise ValueError("AsyncGRPOConfig has no field %s" % ", ".join(unknown))
    c = dict(ASYNC_FIELDS, **kwargs)
    if c["epsilon_high"] is None:
        c["epsilon_high"] = c["epsilon"]
    return c


def completion(pool, step, q, j):
    """The j-th completion of the q-th prompt of a batch at step, as a
    chat completion (the dataset's prompts are conversational)."""
    return [{"role": "assistant", "content": pool[(q * 3 + j * 5 + step) % len(pool)]}]


def dataset(states):
    """Dataset rows as /v1/dataset gives them (the columns a reward sees)."""
    return [{"prompt": s.get("prompt"), "state_id": s["state_id"], "task": s.get("task", ""),
             "split": s.get("split", "train"), "data_source": "lm2lm"} for s in states]


# Completions when the spec names none: proposals in the shape the service
# parses, one no-change and one unparseable answer.
POOL = [
    '{"mechanism": "lr-scale", "params": {"factor": "2"}, "rationale": "faster"}',
    '{"mechanism": "lr-scale", "params": {"factor": "0.5"}}',
    '{"mechanism": "warmup", "params": {"steps": "1"}}',
    '{"mechanism": "none"}',
    "no idea",
]


def inputs(spec):
    """The dataset rows (the spec's states, or n_states new ones) and the
    completion pool."""
    states = spec.get("states")
    if not states:
        states = lm2lm_client.post("/v1/states", {"n": int(spec.get("n_states", 8))})["states"]
    return dataset(states), spec.get("pool") or POOL


def nan_or(x):
    return float("nan") if x is None else float(x)


def mean(xs):
    return sum(xs) / len(xs)


def std(xs, ddof=1):
    if len(xs) <= ddof:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - ddof))


def grpo_advantages(rewards, G, scale):
    """_generate_and_score_completions with one reward function: nan-aware
    group mean (torch.nanmean), nanstd (unbiased) scaling unless "none",
    NaN advantages set to 0."""
    out = []
    if scale == "batch":
        ok = [r for r in rewards if not math.isnan(r)]
        s_batch = std(ok)
    for g in range(0, len(rewards), G):
        grp = rewards[g:g + G]
        ok = [r for r in grp if not math.isnan(r)]
        m = mean(ok) if ok else float("nan")
        s = s_batch if scale == "batch" else std(ok)
        for r in grp:
            a = r - m
            if scale != "none":
                a = a / (s + 1e-4)
            out.append(0.0 if math.isnan(a) else a)
    return out


# --- GRPOTrainer: one process per rank ---------------------------------------

class Trainer:
    """GRPOTrainer as a reward function sees it: reward_funcs, and the
    bound methods it passes as log_extra and log_metric
    (_calculate_rewards: reward_kwargs["log_extra"] =
    self._log_completion_extra, reward_kwargs["log_metric"] =
    self._log_metric)."""

    def __init__(self, reward_funcs):
        self.reward_funcs = reward_funcs
        self.extra, self.metrics = {}, {}

    def _log_completion_extra(self, column, values):
        self.extra.setdefault(column, []).extend(values)

    def _log_metric(self, name, value):
        self.metrics.setdefault(name, []).append(value)


def one(**kwargs):
    """Another reward function: 1 for every completion."""
    return [1.0] * len(kwargs["completions"])


def _rank_main(rank, world, conn, variant, G, others, straggle=None):
    """A training process: its reward functions, its loop for async ones,
    and its callbacks' on_train_begin (StepCallback shares the launch's
    run identity from rank 0; the pipe to the parent stands in for
    torch.distributed.broadcast_object_list)."""
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    os.environ["LM2LM_GROUP_SIZE"] = str(G)

    def broadcast(obj):
        if rank == 0:
            conn.send(("share", obj[0]))
        tag, got = conn.recv()
        return [got]

    lm2lm_trl.broadcast = broadcast
    try:
        lm2lm_trl.StepCallback().on_train_begin(None, None, None)
    except Exception as e:
        conn.send(("error", "%s: %s" % (type(e).__name__, e)))
        return
    reward = {"async": lm2lm_trl.lm2lm_reward, "sync": lm2lm_trl.lm2lm_reward_sync}[variant]
    funcs = [reward] + [one] * others
    loop = asyncio.new_event_loop()  # GRPOTrainer's self.async_loop, in its own thread
    threading.Thread(target=loop.run_forever, daemon=True).start()
    while True:
        msg = conn.recv()
        if msg is None:
            return
        inputs, completions, global_step = msg
        if straggle and int(straggle["rank"]) == rank and int(straggle["step"]) == global_step:
            time.sleep(float(straggle["seconds"]))  # this process generates its slice late
        try:
            conn.send(("ok", _calculate_rewards(funcs, loop, inputs, completions, global_step)))
        except Exception as e:  # the trainer would stop here
            conn.send(("error", "%s: %s" % (type(e).__name__, e)))


def _calculate_rewards(funcs, loop, inputs, completions, global_step):
    prompts = [x["prompt"] for x in inputs]
    keys = [k for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")]
    kwargs = {k: [x[k] for x in inputs] for k in keys}
    kwargs["trainer_state"] = types.SimpleNamespace(global_step=global_step, is_world_process_zero=True)
    trainer = Trainer(funcs)
    kwargs["log_extra"] = trainer._log_completion_extra
    kwargs["log_metric"] = trainer._log_metric
    ids = [[1, 2, 3]] * len(completions)
    outs = []
    for reward_func in funcs:
        if inspect.iscoroutinefunction(reward_func):
            fut = asyncio.run_coroutine_threadsafe(
                reward_func(prompts=prompts, completions=completions, completion_ids=ids, **kwargs), loop)
            out = fut.result()
        else:
            out = reward_func(prompts=prompts, completions=completions, completion_ids=ids, **kwargs)
        if len(out) != len(completions):
            raise ValueError("%d rewards for %d completions" % (len(out), len(completions)))
        outs.append([nan_or(r) for r in out])
    returned = [None if math.isnan(r) else r for r in outs[0]]
    # sum_then_normalize: nansum over the functions, NaN where all are NaN.
    trl = []
    for i in range(len(completions)):
        col = [o[i] for o in outs]
        ok = [r for r in col if not math.isnan(r)]
        trl.append(sum(ok) if ok else float("nan"))
    return {"returned": returned, "trl": trl, "extra": trainer.extra,
            "metrics": {k: mean(v) for k, v in trainer.metrics.items()}}


def spec_config(spec):
    """The run's config: config_py (name -> Python literal, as a recipe
    writes it) overridden by config (JSON values)."""
    kwargs = {k: ast.literal_eval(v) for k, v in spec.get("config_py", {}).items()}
    kwargs.update(spec.get("config", {}))
    return kwargs


def run_grpo(spec):
    world = int(spec.get("world_size", 2))
    c = parse_grpo_config(spec_config(spec), world)
    G, per, spg = c["num_generations"], c["per_device_train_batch_size"], c["steps_per_generation"]
    rows, pool = inputs(spec)
    variant = spec.get("variant", "async")
    callback = lm2lm_trl.StepCallback(wait=True, poll=0.02)
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for rank in range(world):
        a, b = ctx.Pipe()
        p = ctx.Process(target=_rank_main, args=(rank, world, b, variant, G, int(spec.get("other_rewards", 0)),
                                                 spec.get("straggle")), daemon=True)
        p.start()
        conns.append(a)
        procs.append(p)
    # torch.distributed.broadcast_object_list, relayed: rank 0's object to every rank.
    if not conns[0].poll(60):
        raise RuntimeError("rank 0 shared no run identity (StepCallback.on_train_begin did not broadcast one)")
    tag, shared = conns[0].recv()
    if tag != "share":
        raise RuntimeError(shared)
    for conn in conns:
        conn.send(("share", shared))
    lm2lm_client.set_step_floor(shared["floor"])  # the parent plays every process's StepCallback
    # RepeatSampler: chunks of generation_batch_size // G prompt indices of a
    # seeded permutation, an incomplete last chunk dropped; each index G times.
    import random
    rng = random.Random(c["seed"])

    def chunks():
        while True:
            idx = list(range(len(rows)))
            if c["shuffle_dataset"]:
                rng.shuffle(idx)
            n = c["generation_batch_size"] // G
            for k in range(0, len(idx) - n + 1, n):
                yield idx[k:k + n]

    source = chunks()
    # A run resumed from a checkpoint starts at its global_step.
    state = types.SimpleNamespace(global_step=int(spec.get("start_step", 0)), is_world_process_zero=True)
    end = state.global_step + c["max_steps"]
    shift = int(spec.get("pool_shift", 0))
    samples, metrics, errors = [], [], []
    micro = 0
    generate_every = spg * c["num_iterations"]
    try:
        while state.global_step < end:
            callback.on_step_begin(None, state, None)
            for _ in range(c["gradient_accumulation_steps"]):
                if micro % generate_every == 0:
                    chunk = next(source)
                    batch = [(q, j, rows[i]) for q, i in enumerate(chunk) for j in range(G)]
                    comps = [completion(pool, state.global_step + shift, q, j) for q, j, _ in batch]
                    L = per * spg
                    for rank, conn in enumerate(conns):
                        sl = slice(rank * L, (rank + 1) * L)
                        conn.send(([r for _, _, r in batch[sl]], comps[sl], state.global_step))
                    outs = [conn.recv() for conn in conns]
                    bad = [o[1] for o in outs if o[0] != "ok"]
                    if bad:
                        errors.extend(bad)
                        raise RuntimeError("; ".join(bad))
                    outs = [o[1] for o in outs]
                    trl = [r for o in outs for r in o["trl"]]  # gather: process order
                    adv = grpo_advantages(trl, G, c["scale_rewards"])
                    for rank, o in enumerate(outs):
                        for i, r in enumerate(o["returned"]):
                            pos = rank * L + i
                            ex = {k: v[i] for k, v in o["extra"].items()}
                            samples.append({"step": state.global_step, "rank": rank, "pos": pos,
                                            "state_id": batch[pos][2]["state_id"],
                                            "completion": comps[pos][-1]["content"], "returned": r,
                                            "nan": math.isnan(trl[pos]), "trl_advantage": adv[pos],
                                            "group": ex.get("lm2lm_group", ""),
                                            "lm2lm_advantage": ex.get("lm2lm_advantage"),
                                            "failure": ex.get("lm2lm_failure", "")})
                        metrics.append({"step": state.global_step, "rank": rank, "metrics": o["metrics"],
                                        "extra_columns": sorted(o["extra"])})
                micro += 1
            state.global_step += 1
            callback.on_step_end(None, state, None)
    finally:
        for conn in conns:
            conn.send(None)
        for p in procs:
            p.join(10)
    return {"trainer": "grpo", "config": {k: c[k] for k in ("num_generations", "per_device_train_batch_size",
            "generation_batch_size", "steps_per_generation", "scale_rewards", "loss_type", "epsilon", "epsilon_high")},
            "world_size": world, "samples": samples, "metrics": metrics, "advanced": callback.posted,
            "calibrations": lm2lm_client.calibrations(), "errors": errors}


# --- AsyncGRPOTrainer: the rollout worker's child process --------------------

def _async_child(blob, conn, ahead=False):
    """_AsyncRolloutLoop in the spawned child: the unpickled reward scores
    one whole group per call. ahead: the trainer moves its step on between
    the reward's reading of the step and its score request (the worker
    scoring ahead of the trainer): the child tells the parent when it has
    read the step and waits for it to have advanced."""
    reward_funcs = pickle.loads(blob)
    armed = [False]
    if ahead:
        get = lm2lm_client.get

        def racing_get(path, *args, **kwargs):
            out = get(path, *args, **kwargs)
            if path == "/v1/info" and armed[0]:
                armed[0] = False
                conn.send(("read", int(out["step"]), None))
                conn.recv()  # the trainer has advanced
            return out

        lm2lm_client.get = racing_get

    async def score_group(group):
        kwargs = dict(completions=group["completions"], prompts=group["prompts"],
                      completion_ids=[[1, 2, 3]] * len(group["completions"]), **group["reward_kwargs"])
        outs = await asyncio.gather(*[f(**kwargs) if inspect.iscoroutinefunction(f)
                                      else asyncio.to_thread(f, **kwargs) for f in reward_funcs])
        return outs

    while True:
        msg = conn.recv()
        if msg is None:
            return
        armed[0] = ahead
        try:
            outs = asyncio.run(score_group(msg))
            answers = getattr(reward_funcs[0], "last_answers", [])
            conn.send(("ok", outs[0], [dict(a, step=reward_funcs[0].last_step) for a in answers]))
        except Exception as e:
            conn.send(("error", "%s: %s" % (type(e).__name__, e), []))


def run_async(spec):
    c = parse_async_config(spec_config(spec))
    G = c["num_generations"]
    rows, pool = inputs(spec)
    reward = lm2lm_trl.LM2LMReward(group_size=G)
    blob = pickle.dumps([reward])  # AsyncRolloutWorker.start's check, and the spawn's transport
    callback = lm2lm_trl.StepCallback(wait=True, poll=0.02)
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    child = ctx.Process(target=_async_child, args=(blob, b, bool(spec.get("ahead"))), daemon=True)
    child.start()
    per_step = c["per_device_train_batch_size"] * c["gradient_accumulation_steps"] * int(spec.get("world_size", 1))
    groups_per_step = max(per_step // G, 1)
    state = types.SimpleNamespace(global_step=0, is_world_process_zero=True)
    samples, errors, score_seconds = [], [], []
    group_id, cursor = 0, 0
    try:
        while state.global_step < c["max_steps"]:
            callback.on_step_begin(None, state, None)
            for _ in range(groups_per_step):
                row = rows[cursor % len(rows)]  # _repeat_iterator: the dataset cycled in order
                cursor += 1
                comps = [completion(pool, state.global_step, group_id, j) for j in range(G)]
                kw = {k: [row[k]] * G for k in row if k not in ("prompt", "completion", "completion_ids")}
                t0 = time.monotonic()
                a.send({"prompts": [row["prompt"]] * G, "completions": comps, "reward_kwargs": kw})
                status, out, answers = a.recv()
                read = None
                if status == "read":
                    # The trainer's step ends while the reward's request is
                    # on its way.
                    read = out
                    state.global_step += 1
                    callback.on_step_end(None, state, None)
                    a.send("go")
                    status, out, answers = a.recv()
                score_seconds.append(time.monotonic() - t0)
                if status != "ok":
                    errors.append(out)
                    raise RuntimeError(out)
                trl = [nan_or(r) for r in out]
                ok = [r for r in trl if not math.isnan(r)]
                m, s = (mean(ok), std(ok, ddof=0)) if ok else (float("nan"), float("nan"))
                for j, r in enumerate(out):
                    adv = 0.0 if math.isnan(trl[j]) else (trl[j] - m) / (s + 1e-8)
                    ans = answers[j] if j < len(answers) else {}
                    samples.append({"step": state.global_step, "group_id": group_id, "state_id": row["state_id"],
                                    "completion": comps[j][-1]["content"], "returned": r, "nan": math.isnan(trl[j]),
                                    "trl_advantage": adv, "group": ans.get("group", ""), "index": ans.get("index"),
                                    "service_step": ans.get("step"), "read_step": read,
                                    "failure": ans.get("failure_reason", "")})
                group_id += 1
            state.global_step += 1
            callback.on_step_end(None, state, None)
    finally:
        a.send(None)
        child.join(10)
    return {"trainer": "async", "config": {k: c[k] for k in ("num_generations", "epsilon", "epsilon_high",
            "max_staleness")}, "samples": samples, "advanced": callback.posted, "score_seconds": score_seconds,
            "calibrations": lm2lm_client.calibrations(), "errors": errors}


def check_config(kind, literals):
    """Parse a recipe's keyword arguments (name -> Python literal text)."""
    kwargs = {k: ast.literal_eval(v) for k, v in literals.items()}
    c = parse_grpo_config(kwargs, 2) if kind == "grpo" else parse_async_config(kwargs)
    return {"kind": kind, "config": {k: c[k] for k in sorted(kwargs)}}


def main(argv):
    if len(argv) >= 3 and argv[1] == "check-config":
        print(json.dumps(check_config(argv[2], json.loads(argv[3]))))
        return
    kind, spec = argv[1], json.loads(argv[2])
    print(json.dumps({"grpo": run_grpo, "async": run_async}[kind](spec)))


if __name__ == "__main__":
    main(sys.argv)
