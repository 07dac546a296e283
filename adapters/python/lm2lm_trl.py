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
after the group's deadline) gets None: TRL turns None into NaN, leaves it
out of the group's mean and gives it advantage 0. Nothing else here needs
TRL, transformers or torch.
"""
import asyncio
import os
import threading
import time

import lm2lm_client


class LM2LMReward:
    """A TRL reward function asking the lm2lm service.

    group_size is G (GRPOConfig.num_generations). rank and world_size
    default to the RANK and WORLD_SIZE environment variables. step, when
    set, is a fixed step; otherwise trainer_state.global_step when TRL
    passes it (GRPOTrainer), else the service's step (GET /v1/info, as
    StepCallback or the trainer's /v1/advance calls set it). run prefixes
    every group name (LM2LM_RUN by default): give a resumed run a new one
    so that its groups never meet the first run's answers.

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
        self.run = os.environ.get("LM2LM_RUN", "") if run is None else run
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

    def _rank(self):
        rank = self.rank if self.rank is not None else int(os.environ.get("RANK", "0"))
        world = self.world_size if self.world_size is not None else int(os.environ.get("WORLD_SIZE", "1"))
        if not 0 <= rank < world:
            raise ValueError("lm2lm: rank %d outside world size %d" % (rank, world))
        return rank

    def _step(self, state):
        if self.step is not None:
            return int(self.step)
        if state is not None and getattr(state, "global_step", None) is not None:
            return int(state.global_step)
        return int(lm2lm_client.get("/v1/info")["step"])

    def samples(self, state_ids, step, call, rank):
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
            out.append({"group": "%strl/%s/s%d/c%d/g%d" % (self.run, sid, step, call, g), "state_id": sid,
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
        state = kwargs.get("trainer_state")
        with self._lock:
            rank = self._rank()
            answers = None
            for attempt in range(self.stale_retries + 1):
                step = self._step(state)
                call = self._calls.get(step, 0)
                self._calls = {step: call + 1}  # a call count per step; earlier steps are done
                smps = self.samples(ids, step, call, rank)
                for s, c in zip(smps, completions):
                    s["completion"] = c
                try:
                    answers = lm2lm_client.score_samples(smps, step)
                    break
                except RuntimeError as e:
                    # An asynchronous trainer's step moved on between reading it and scoring.
                    if "stale_step" not in str(e) or state is not None or self.step is not None \
                            or attempt == self.stale_retries:
                        raise
            self.last_answers, self.last_step = answers, step
        rewards = [a["reward"] for a in answers]  # None: dropped by TRL (NaN, advantage 0)
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


class StepCallback:
    """A transformers TrainerCallback (duck-typed: it has every event
    method, each returning None) that posts the trainer's global_step to
    /v1/advance when a step begins and ends. With wait=True it then waits
    while a calibration point is running (the paper's synchronous loop).
    Every process posts (the same step: the service answers each alike)
    and waits, so that no process sends half a group the others hold back
    past the service's group deadline."""

    def __init__(self, wait=False, poll=1.0):
        self.wait = wait
        self.poll = poll
        self.posted = []

    def _advance(self, state):
        step = int(state.global_step)
        if self.posted and self.posted[-1] == step:
            return
        cals = lm2lm_client.advance(step)
        self.posted.append(step)
        while self.wait and any(c.get("state") == "running" for c in cals):
            time.sleep(self.poll)
            cals = lm2lm_client.calibrations()

    def on_step_begin(self, args, state, control, **kwargs):
        self._advance(state)

    def on_step_end(self, args, state, control, **kwargs):
        self._advance(state)

    def __getattr__(self, name):
        # Every other TrainerCallback event (on_init_end, on_log, ...) does nothing.
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)
