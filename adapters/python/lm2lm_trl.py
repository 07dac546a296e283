"""TRL reward function: GRPOTrainer(reward_funcs=[lm2lm_reward], ...).

The dataset comes from the service's /v1/dataset (its state_id column
reaches the function as a keyword argument); the step is TRL's
trainer_state.global_step.
"""
import asyncio

from lm2lm_client import score


async def lm2lm_reward(prompts, completions, **kwargs):
    state = kwargs.get("trainer_state")
    step = getattr(state, "global_step", None)
    return await asyncio.to_thread(score, kwargs["state_id"], completions, step)
