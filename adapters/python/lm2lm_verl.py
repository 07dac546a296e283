"""verl compute_score for the batch reward manager.

custom_reward_function.path=lm2lm_verl.py, custom_reward_function.name=
compute_score, reward_model.reward_manager=batch. The batch manager calls it
once per batch with lists (data_sources, solution_strs, ground_truths,
extra_infos); the naive manager's one-sample call (data_source,
solution_str, ground_truth, extra_info) works too. The state id is in
extra_info["state_id"] (and reward_model.ground_truth) of the service's
dataset rows; the step is the service's current step (set by /v1/advance).
"""
from lm2lm_client import score


def compute_score(data_sources=None, solution_strs=None, ground_truths=None, extra_infos=None,
                  data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kwargs):
    if solution_strs is None:  # one sample
        return score([(extra_info or {}).get("state_id") or ground_truth], [solution_str])[0]
    ids = [(e or {}).get("state_id") or g for e, g in zip(extra_infos, ground_truths)]
    return score(ids, solution_strs)
