"""OpenRLHF needs no code: --reward.remote_url
http://127.0.0.1:8080/get_reward?group_size=G&step=current with the label
column of the service's dataset as the label; the samples of one label at
one step form a group of G.

remote_reward posts what OpenRLHF's remote reward client posts, for
checking a service by hand.
"""
from lm2lm_client import post


def remote_reward(queries, prompts, labels, group_size=8, step="current"):
    path = "/get_reward?group_size=%d&step=%s" % (group_size, step)
    return post(path, {"query": queries, "prompts": prompts, "labels": labels})["rewards"]
