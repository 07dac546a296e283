"""TRL adapters for the lm2lm environment service (standard library only).

GRPOTrainer (trl/trainer/grpo_trainer.py):

    from lm2lm_trl import LM2LMReward
    reward = LM2LMReward(group_size=8)           # = GRPOConfig.num_generations
    GRPOTrainer(..., reward_funcs=[reward.as_async()], args=GRPOConfig(num_generations=8, ...))

  TRL calls the reward function once per generation batch in every
  process, with that process's slice of the global batch: RepeatSampler
  repeats each prompt num_generations times in a row, and process p holds
  global positions p*L .. p*L+L-1 (L = len(completions); _calculate_rewards
  gathers the rewards in process order and views them as groups of G, and
  _generate_and_score_completions slices them back with process_slice). A
  group may therefore be split across two processes. Every process names
  sample i of its slice after the same global facts: the state id, the
  trainer's step (trainer_state.global_step), the count of reward calls at
  that step, and the global position's group (p*L+i)//G and index
  (p*L+i)%G. The process index p is RANK (set by torchrun and accelerate
  launch; 0 when absent). The service assembles the halves and answers
  both processes with the group's result.

AsyncGRPOTrainer (trl/experimental/async_grpo): the rollout worker scores
one whole group per call in a spawned process, without trainer_state, so
the reward must be picklable (an LM2LMReward instance is) and reads the
step from the service, which StepCallback keeps at the trainer's step:

    reward = LM2LMReward(group_size=8)
    AsyncGRPOTrainer(..., reward_funcs=[reward], callbacks=[StepCallback()])

A sample whose group failed (the world model failed, or the sample came
after the group's deadline) or is partial (scored at its deadline without
the late samples) gets None, and so does every other sample of that
group: TRL turns None into NaN, leaves it out of the group's mean and
gives it advantage 0 (GRPOTrainer._generate_and_score_completions,
"unscorable_mask"), so the whole group trains nothing. That holds only
when lm2lm is the one reward function: with another, TRL sums the others
over a NaN (nansum) and would train the failed sample on them alone, so
the reward refuses to run beside another reward function (it finds them
through log_extra, a bound method of the trainer).

A run's identity and step floor: group names carry a run identity, so
that a resumed run's groups never meet an earlier attempt's answers
(the service refuses the same name with other completions), and a
trainer resumed behind the service's step scores its replayed steps at
the service's step (lm2lm_client.at_step). Both must be the same in every
process: StepCallback.on_train_begin makes them on rank 0 and broadcasts
them (torch.distributed.broadcast_object_list when a process group is
initialised, as accelerate and torchrun do). With one process the
reward makes its own. Nothing here needs TRL, transformers or torch;
StepCallback is a transformers TrainerCallback when transformers is
importable.
"""
import asyncio
import os
import threading
import time
import uuid

import lm2lm_client

# The launch's identity and step floor, shared by every process (share_run).
_shared = {}


def _torch_broadcast(obj):
    """torch.distributed.broadcast_object_list from rank 0, when a process
    group is initialised; the list unchanged otherwise."""
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None
    if dist is not None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast_object_list(obj, src=0)
        return obj
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise RuntimeError("lm2lm: WORLD_SIZE > 1 but no torch.distributed process group to share the run's "
                           "identity; launch with accelerate or torchrun, or give LM2LMReward(run=...) and "
                           "resume from a step the service accepts")
    return obj


# How share_run reaches the other processes; a stand-in may replace it.
broadcast = _torch_broadcast


def share_run():
    """Make this launch's run identity and step floor on rank 0 and give
    them to every process; returns them. Called by StepCallback at the
    start of training (in every process, as TRL runs callbacks)."""
    obj = [None]
    if int(os.environ.get("RANK", "0")) == 0:
        obj = [{"run": lm2lm_client.run_id() + "-" + uuid.uuid4().hex[:8], "floor": lm2lm_client.step_floor()}]
    obj = broadcast(obj)
    _shared.clear()
    _shared.update(obj[0])
    lm2lm_client.set_step_floor(_shared["floor"])
    return dict(_shared)


def _mixed(kwargs):
    """The trainer's reward functions besides this one, when TRL says."""
    trainer = getattr(kwargs.get("log_extra"), "__self__", None)
    funcs = getattr(trainer, "reward_funcs", None)
    return len(funcs) - 1 if funcs is not None else 0


class LM2LMReward:
    """A TRL reward function asking the lm2lm service.

    group_size is G (GRPOConfig.num_generations). rank and world_size
    default to the RANK and WORLD_SIZE environment variables. step, when
    set, is a fixed step; otherwise trainer_state.global_step when TRL
    passes it (GRPOTrainer; at least the step floor, lm2lm_client.at_step),
    else the service's step (GET /v1/info, as StepCallback or the
    trainer's /v1/advance calls set it). run prefixes every group name; by
    default the launch's identity that StepCallback shares (one process:
    this process's own), so a resumed run's groups never meet an earlier
    attempt's answers.

    The instance is picklable. Its last_answers holds the service's
    answers to the last call, in the call's order, and last_step its step.
    """

    __name__ = "lm2lm"

    def __init__(self, group_size=8, rank=None, world_size=None, step=None, run=None, stale_retries=3):
        if int(group_size) < 1:
            raise ValueError("lm2lm: group_size must be >= 1")
        self.group_size = int(group_size)
        self.rank = rank
        self.world_size = world_size
        self.step = step
        self.run = run
        self.stale_retries = stale_retries
        self.last_answers, self.last_step = [], None
        self._calls = {}  # step -> reward calls made at that step
        self._lock = threading.Lock()

    def __getstate__(self):
        d = dict(self.__dict__)
        d.pop("_lock")
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._lock = threading.Lock()

    def _world(self):
        return self.world_size if self.world_size is not None else int(os.environ.get("WORLD_SIZE", "1"))

    def _rank(self):
        rank = self.rank if self.rank is not None else int(os.environ.get("RANK", "0"))
        world = self._world()
        if not 0 <= rank < world:
            raise ValueError("lm2lm: rank %d outside world size %d" % (rank, world))
        return rank

    def _run(self):
        """The run identity in group names: run=, else the launch's shared one."""
        if self.run is not None:
            return self.run
        if "run" in _shared:
            return _shared["run"]
        if self._world() > 1:
            raise RuntimeError("lm2lm: %d processes need one run identity for their group names; add "
                               "callbacks=[StepCallback()] to the trainer (it shares one from rank 0), or give "
                               "LM2LMReward(run=...) a name unique to this launch" % self._world())
        return lm2lm_client.run_id()

    def _step(self, state):
        if self.step is not None:
            return int(self.step)
        if state is not None and getattr(state, "global_step", None) is not None:
            return lm2lm_client.at_step(int(state.global_step))
        return int(lm2lm_client.get("/v1/info")["step"])

    def samples(self, state_ids, step, call, rank, run):
        """The samples of a process's slice: group names and indices from
        the global positions rank*L+i of TRL's layout."""
        G, L = self.group_size, len(state_ids)
        out, seen = [], {}
        for i, sid in enumerate(state_ids):
            pos = rank * L + i
            g = pos // G
            if seen.setdefault(g, sid) != sid:
                raise ValueError(
                    "lm2lm: positions %d and %d of group %d name different states (%s, %s): the batch is not "
                    "G=%d copies of each prompt in a row; check group_size and RANK" % (pos - 1, pos, g, seen[g], sid, G))
            out.append({"group": "%s/trl/%s/s%d/c%d/g%d" % (run, sid, step, call, g), "state_id": sid,
                        "group_size": G, "index": pos % G})
        return out

    def __call__(self, prompts=None, completions=None, **kwargs):
        if completions is None:
            raise TypeError("lm2lm: completions are required")
        ids = kwargs.get("state_id")
        if ids is None:
            raise KeyError("lm2lm: the dataset has no state_id column (use the service's /v1/dataset rows)")
        if len(ids) != len(completions):
            raise ValueError("lm2lm: %d state ids for %d completions" % (len(ids), len(completions)))
        others = _mixed(kwargs)
        if others:
            raise ValueError("lm2lm: the trainer has %d other reward function(s); TRL sums them over a failed lm2lm "
                             "sample (nansum) and would train it on them alone. Use lm2lm as the only reward "
                             "function" % others)
        state = kwargs.get("trainer_state")
        with self._lock:
            rank = self._rank()
            # Without trainer_state (AsyncGRPOTrainer: one whole group per
            # call in one process), a fresh name per call is unique anyway.
            run = self._run() if state is not None or self.step is not None else \
                lm2lm_client.run_id() + "-" + uuid.uuid4().hex[:8]
            answers = None
            for attempt in range(self.stale_retries + 1):
                step = self._step(state)
                call = self._calls.get(step, 0)
                self._calls = {step: call + 1}  # a call count per step; earlier steps are done
                smps = self.samples(ids, step, call, rank, run)
                for s, c in zip(smps, completions):
                    s["completion"] = c
                try:
                    answers = lm2lm_client.score_samples(smps, step)
                    break
                except lm2lm_client.LM2LMError as e:
                    # An asynchronous trainer's step moved on between reading it and scoring.
                    if e.code != "stale_step" or state is not None or self.step is not None \
                            or attempt == self.stale_retries:
                        raise
            self.last_answers, self.last_step = answers, step
        # None (TRL: NaN, advantage 0) for every sample of a failed or
        # partial group, in this process's slice.
        bad = {a.get("group") for a in answers if lm2lm_client.unusable(a)}
        rewards = [None if a.get("group") in bad else a["reward"] for a in answers]
        log(kwargs, answers)
        return rewards

    def as_async(self):
        """An async function for GRPOTrainer, which runs async reward
        functions concurrently (asyncio.gather on its own loop)."""
        reward = self

        async def lm2lm(prompts=None, completions=None, **kwargs):
            return await asyncio.to_thread(reward, prompts, completions, **kwargs)

        return lm2lm


# Columns and metrics logged through TRL's log_extra and log_metric. Every
# process logs the same names on every call: TRL gathers them across
# processes in sorted order, so a name one process skipped would stall it.
EXTRA_COLUMNS = ("lm2lm_advantage", "lm2lm_failure", "lm2lm_gain", "lm2lm_group", "lm2lm_mechanism", "lm2lm_valid")
METRICS = ("lm2lm/failed", "lm2lm/kept", "lm2lm/valid")


def log(kwargs, answers):
    """Log per-sample facts with log_extra and batch fractions with
    log_metric when TRL passes them (GRPOTrainer does; the asynchronous
    trainer does not)."""
    extra, metric = kwargs.get("log_extra"), kwargs.get("log_metric")
    n = max(len(answers), 1)
    if extra is not None:
        extra("lm2lm_advantage", [a.get("advantage", 0.0) for a in answers])
        extra("lm2lm_failure", [a.get("failure_reason", "") for a in answers])
        extra("lm2lm_gain", [a.get("gain", 0.0) for a in answers])
        extra("lm2lm_group", [a.get("group", "") for a in answers])
        extra("lm2lm_mechanism", [a.get("mechanism", "") for a in answers])
        extra("lm2lm_valid", [bool(a.get("valid")) for a in answers])
    if metric is not None:
        metric("lm2lm/failed", sum(a.get("reward") is None for a in answers) / n)
        metric("lm2lm/kept", sum(bool(a.get("kept")) for a in answers) / n)
        metric("lm2lm/valid", sum(bool(a.get("valid")) for a in answers) / n)


_default = {}


def _default_reward():
    G = int(os.environ.get("LM2LM_GROUP_SIZE", "8"))
    if G not in _default:
        _default[G] = LM2LMReward(group_size=G)
    return _default[G]


async def lm2lm_reward(prompts=None, completions=None, **kwargs):
    """GRPOTrainer's async reward with G from LM2LM_GROUP_SIZE (default 8)."""
    return await asyncio.to_thread(_default_reward(), prompts, completions, **kwargs)


def lm2lm_reward_sync(prompts=None, completions=None, **kwargs):
    """The synchronous variant of lm2lm_reward."""
    return _default_reward()(prompts, completions, **kwargs)


try:  # a real TrainerCallback when transformers is importable
    from transformers import TrainerCallback as _CallbackBase
except ImportError:
    _CallbackBase = object


class StepCallback(_CallbackBase):
    """A transformers TrainerCallback (a subclass of it when transformers
    is importable; otherwise duck-typed: it has every event method, each
    returning None) that shares the launch's run identity and step floor
    when training begins (share_run) and posts the trainer's global_step
    to /v1/advance when a step begins and ends. With wait=True it then
    waits while a calibration point is running (the paper's synchronous
    loop). Every process posts (the same step: the service answers each
    alike) and waits, so that no process sends half a group the others
    hold back past the service's group deadline."""

    def __init__(self, wait=False, poll=1.0):
        self.wait = wait
        self.poll = poll
        self.posted = []

    def _advance(self, state):
        step = lm2lm_client.at_step(int(state.global_step))
        if self.posted and self.posted[-1] == step:
            return
        cals = lm2lm_client.advance(step)
        self.posted.append(step)
        while self.wait and any(c.get("state") == "running" for c in cals):
            time.sleep(self.poll)
            cals = lm2lm_client.calibrations()

    def on_train_begin(self, args, state, control, **kwargs):
        share_run()

    def on_step_begin(self, args, state, control, **kwargs):
        self._advance(state)

    def on_step_end(self, args, state, control, **kwargs):
        self._advance(state)

    def __getattr__(self, name):
        # Without transformers: every other TrainerCallback event (on_init_end, on_log, ...) does nothing.
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)
