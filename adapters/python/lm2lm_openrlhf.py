"""OpenRLHF needs no code: --reward.remote_url http://127.0.0.1:8080/get_reward
(older: --remote_rm_url) with --label_key label on the service's dataset.

remote_reward posts what OpenRLHF's remote reward client posts, for
checking a service by hand.
"""
from lm2lm_client import post


def remote_reward(queries, prompts, labels):
    return post("/get_reward", {"query": queries, "prompts": prompts, "labels": labels})["rewards"]
