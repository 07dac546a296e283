"""A trainer in thirty lines: a tabular softmax policy over the catalogue, trained through the service.

No framework, standard library only: it draws states, samples G changes per state from
its policy, scores them per sample (as verl's Reward Loop would), and follows the
service's group-relative advantages (REINFORCE on the logits). Run it against a service
to see the whole path work: `python3 lm2lm_tabular.py` prints the mean reward per step.
"""
import json, math, random, sys
from lm2lm_client import post, score_samples


def actions(prompt):
    """Every change the prompt's CARD lines allow, as the JSON answer the service parses."""
    out = []
    for line in prompt.splitlines():
        if line.startswith("CARD "):
            card, combos = json.loads(line[5:]), [{}]
            for p in card.get("params") or []:
                combos = [dict(c, **{p["name"]: v}) for c in combos for v in p["choices"]]
            out += [json.dumps({"mechanism": card["mechanism"], "params": c}) for c in combos]
    return out


def train(steps=30, states=8, G=8, lr=1.0, seed=1, log=None):
    rng = random.Random(seed)
    sts = post("/v1/states", {"request_id": "tabular-%d" % seed, "n": states})["states"]
    acts = actions(sts[0]["prompt"][-1]["content"])
    logits, curve = [0.0] * len(acts), []
    for step in range(steps):
        w = [math.exp(x - max(logits)) for x in logits]
        p = [x / sum(w) for x in w]
        batch = [(st, i, rng.choices(range(len(acts)), p)[0]) for st in sts for i in range(G)]
        answers = score_samples([{"group": st["state_id"], "state_id": st["state_id"], "group_size": G,
                                  "index": i, "completion": acts[a]} for st, i, a in batch], step)
        scored = [(a, ans) for (_, _, a), ans in zip(batch, answers) if ans["reward"] is not None]
        for a, ans in scored:  # d log p(a) / d logit_k = [k == a] - p_k
            for k in range(len(acts)):
                logits[k] += lr * ans["advantage"] * ((k == a) - p[k]) / len(scored)
        curve.append(sum(ans["reward"] for _, ans in scored) / max(len(scored), 1))
        if log:
            print("step %d: mean reward %+.3f" % (step, curve[-1]), file=log)
    return curve


if __name__ == "__main__":
    train(log=sys.stdout)
