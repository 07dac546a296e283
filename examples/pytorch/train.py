#!/usr/bin/env python3
"""Train a tiny character-level GPT under lm2lm's subprocess protocol.

    python3 train.py <job file> <result file>

The job file is the JSON of builder.JobFile (protocol 1): the task, the
proposal (its free text is data and only ever logged, as hex), the seed and
the spec. The spec, written by the example's Go Builder, names everything
the run needs:

    {
      "corpus": "/abs/path/text.txt",   # any text file; one symbol per byte
      "block": 1024, "val_every": 10,   # every 10th 1 KiB block is validation
      "eval_bytes": 8192,               # validation bytes scored
      "heldout": "/abs/path/val.txt",   # optional: the validation text, kept apart
      "recipe": {...},                  # the recipe to train (see RECIPE)
      "reference": {...},               # the task's reference recipe (optional)
      "reference_losses": {"1": 2.9},   # its loss by seed, when known (optional)
      "device": "auto",                 # auto | cpu | cuda
      "threads": 1                      # CPU threads (torch.set_num_threads)
    }

With "heldout" the corpus is all training text and the validation bytes are
the held-out file's (the interleaved split written to two files gives the
same training and validation bytes as the one file). When the environment
names a checkpoint (LM2LM_CHECKPOINT, set by overlay.SandboxRunner's trusted
evaluation), the trained weights are saved there (a state dict of tensors,
torch.save) for evaluate.py, which measures the run; a run that cannot read
the held-out file (hidden from it) then reports its last training loss in
bits per byte, which the evaluator's measurement replaces.

The loss is validation bits per byte. The gain is measured against the
reference recipe with the same seed: the reference loss of the job's seed
from "reference_losses" when given, else the reference is trained here with
that seed (same initialisation where the shapes agree, same data order).

The result file is {"loss", "gain", "seeds", "cost"} (exit 0), or
{"infeasible": reason} with exit 3 when the recipe is invalid or training
diverged (a non-finite or exploding loss), or nothing with exit 75 when the
device or the corpus is unavailable (retrying elsewhere may succeed). A job
file this script cannot read exits 2.

Determinism: on CPU a seed gives the same loss bit for bit (one thread by
default, deterministic algorithms). "device": "auto" uses CUDA when
torch.cuda.is_available() (e.g. under Slurm with --gres=gpu:1); CUDA runs are
deterministic only up to the kernels' own non-determinism.

Standard library and torch only.
"""

import json
import math
import os
import sys
import time

EXIT_OK, EXIT_BAD_JOB, EXIT_INFEASIBLE, EXIT_TRANSIENT = 0, 2, 3, 75
PROTOCOL = 1
VOCAB = 256  # bytes

# RECIPE: name -> (kind, low, high); numbers are inclusive bounds, strings
# list their choices.
RECIPE = {
    "width": ("int", 8, 4096),  # model width d
    "depth": ("int", 1, 64),  # transformer blocks
    "heads": ("int", 1, 64),  # attention heads; must divide width
    "mlp_ratio": ("float", 0.25, 16),  # MLP hidden = round(mlp_ratio * width)
    "context": ("int", 4, 8192),  # training and evaluation window
    "batch": ("int", 1, 65536),  # windows per step
    "steps": ("int", 1, 10**7),  # optimiser steps
    "lr": ("float", 1e-7, 100),  # peak learning rate
    "min_lr_frac": ("float", 0, 1),  # final rate / peak for decaying schedules
    "warmup": ("int", 0, 10**7),  # linear warm-up steps (≤ steps)
    "schedule": ("str", "cosine", "linear", "constant"),
    "optimizer": ("str", "adamw", "sgd"),
    "beta1": ("float", 0, 0.9999),  # AdamW β1; SGD momentum
    "beta2": ("float", 0, 0.99999),
    "weight_decay": ("float", 0, 10),  # decoupled, on matrices only
    "grad_clip": ("float", 0, 1e6),  # global norm; 0 = off
    "dropout": ("float", 0, 0.9),
    "activation": ("str", "gelu", "relu", "silu"),
    "tie_embeddings": ("bool",),
    "init_std": ("float", 1e-4, 1),
}


class Infeasible(Exception):
    """The proposal's fault: an invalid recipe or a diverged run."""


class Transient(Exception):
    """Infrastructure trouble: retrying (elsewhere) may succeed."""


class BadJob(Exception):
    """A job file or spec this script cannot read."""


def log(*args):
    print("train.py:", *args, file=sys.stderr, flush=True)


def check_recipe(r, what):
    if not isinstance(r, dict):
        raise BadJob("%s is not an object" % what)
    unknown = sorted(set(r) - set(RECIPE))
    missing = sorted(set(RECIPE) - set(r))
    if unknown or missing:
        raise BadJob("%s: unknown fields %s, missing fields %s" % (what, unknown, missing))
    for name, spec in RECIPE.items():
        v, kind = r[name], spec[0]
        if kind == "bool":
            if not isinstance(v, bool):
                raise BadJob("%s.%s = %r is not a boolean" % (what, name, v))
        elif kind == "str":
            if v not in spec[1:]:
                raise Infeasible("%s = %r, want one of %s" % (name, v, ", ".join(spec[1:])))
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind == "int" and v != int(v)):
                raise BadJob("%s.%s = %r is not %s" % (what, name, v, "an integer" if kind == "int" else "a number"))
            if not (spec[1] <= v <= spec[2]) or (isinstance(v, float) and not math.isfinite(v)):
                raise Infeasible("%s = %r out of range [%g, %g]" % (name, v, spec[1], spec[2]))
    if r["width"] % r["heads"]:
        raise Infeasible("width %d is not a multiple of heads %d" % (r["width"], r["heads"]))
    if r["warmup"] > r["steps"]:
        raise Infeasible("warmup %d exceeds steps %d" % (r["warmup"], r["steps"]))
    return r


def read_job(path):
    try:
        with open(path, "rb") as f:
            job = json.load(f)
    except OSError as e:
        raise Transient("read job file: %s" % e)
    except ValueError as e:
        raise BadJob("job file is not JSON: %s" % e)
    if not isinstance(job, dict) or job.get("protocol") != PROTOCOL:
        raise BadJob("job file protocol %r, want %d" % (job.get("protocol") if isinstance(job, dict) else None, PROTOCOL))
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise BadJob("job has no spec object")
    seed = job.get("seed")
    if not isinstance(seed, int) or seed < 0:
        raise BadJob("seed %r" % seed)
    for key in ("corpus", "recipe"):
        if key not in spec:
            raise BadJob("spec has no %r" % key)
    return job, spec


def load_corpus(spec):
    """Returns (train, val) byte strings split by interleaved blocks, or
    with "heldout" the corpus and the held-out file's bytes (val None when
    the run cannot read them: they are the evaluator's)."""
    block, every = int(spec.get("block", 1024)), int(spec.get("val_every", 10))
    if block < 1 or every < 2:
        raise BadJob("block %d, val_every %d" % (block, every))
    try:
        with open(spec["corpus"], "rb") as f:
            data = f.read()
    except OSError as e:
        raise Transient("corpus: %s" % e)
    if spec.get("heldout"):
        try:
            with open(spec["heldout"], "rb") as f:
                val = f.read()
        except OSError:
            val = b""
        if len(data) < 2:
            raise BadJob("corpus %s (%d bytes) is too small" % (spec["corpus"], len(data)))
        return data, (val if len(val) >= 2 else None)
    train, val = bytearray(), bytearray()
    for i in range(0, len(data), block):
        (val if (i // block) % every == every - 1 else train).extend(data[i : i + block])
    if len(val) < 2 or len(train) < 2:
        raise BadJob("corpus %s (%d bytes) is too small to split" % (spec["corpus"], len(data)))
    return bytes(train), bytes(val)


def build_model(torch, r):
    nn, F = torch.nn, torch.nn.functional
    act = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}[r["activation"]]
    d, h, p = r["width"], r["heads"], r["dropout"]
    hidden = max(1, round(r["mlp_ratio"] * d))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
            self.drop = nn.Dropout(p)

        def forward(self, x, mask):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // h)
            att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = (self.drop(att) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.drop(self.proj(y))
            return x + self.drop(self.out(act(self.fc(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(r["context"], d)
            self.blocks = nn.ModuleList(Block() for _ in range(r["depth"]))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, VOCAB, bias=False)
            self.drop = nn.Dropout(p)
            if r["tie_embeddings"]:
                self.head.weight = self.tok.weight
            mask = torch.ones(r["context"], r["context"], dtype=torch.bool).triu(1)
            self.register_buffer("mask", mask, persistent=False)

        def forward(self, idx):
            t = idx.shape[1]
            x = self.drop(self.tok(idx) + self.pos(torch.arange(t, device=idx.device)))
            for blk in self.blocks:
                x = blk(x, self.mask)
            return self.head(self.ln(x))

    model = GPT()
    std = r["init_std"]
    for name, prm in model.named_parameters():
        if prm.dim() == 1:
            continue  # LayerNorm gains and biases keep their defaults
        s = std / math.sqrt(2 * r["depth"]) if name.endswith(("proj.weight", "out.weight")) else std
        torch.nn.init.normal_(prm, 0.0, s)
    for mod in model.modules():
        if isinstance(mod, nn.Linear) and mod.bias is not None:
            nn.init.zeros_(mod.bias)
    return model


def lr_at(r, step):
    """Learning rate of 0-based step: linear warm-up, then the schedule."""
    peak, n, w = r["lr"], r["steps"], r["warmup"]
    if step < w:
        return peak * (step + 1) / w
    if r["schedule"] == "constant" or n <= w:
        return peak
    frac = (step - w) / max(1, n - 1 - w)
    lo = r["min_lr_frac"]
    if r["schedule"] == "linear":
        return peak * (1 - (1 - lo) * frac)
    return peak * (lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(torch, model, r):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": r["weight_decay"]}, {"params": rest, "weight_decay": 0.0}]
    if r["optimizer"] == "sgd":
        # Decoupled weight decay is AdamW's; SGD gets it as L2 (library choice).
        return torch.optim.SGD(groups, lr=r["lr"], momentum=r["beta1"])
    return torch.optim.AdamW(groups, lr=r["lr"], betas=(r["beta1"], r["beta2"]))


def flops_of(r, tokens_trained, tokens_scored):
    """Matrix-multiply FLOPs: 2 per multiply-add forward, ×3 when training."""
    d, L, t = r["width"], r["depth"], r["context"]
    hidden = max(1, round(r["mlp_ratio"] * d))
    per_token = 2 * (L * (3 * d * d + d * d + 2 * d * hidden) + d * VOCAB) + 4 * L * t * d  # QKᵀ and AV, unmasked
    return 3 * per_token * tokens_trained + per_token * tokens_scored


def train(torch, r, data, seed, device, eval_bytes, checkpoint=None):
    """Trains recipe r with seed and returns (validation bits per byte, steps, flops).
    With checkpoint, the trained weights are saved there; without
    validation bytes (val None), the loss is the last step's training loss
    in bits per byte."""
    train_data, val_data = data
    ctx = r["context"]
    if len(train_data) <= ctx + 1:
        raise Infeasible("context %d exceeds the training text (%d bytes)" % (ctx, len(train_data)))
    torch.manual_seed(seed)  # initialisation, then dropout
    model = build_model(torch, r).to(device)
    opt = make_optimizer(torch, model, r)
    gen = torch.Generator().manual_seed(seed)  # data order, independent of the model
    stream = torch.frombuffer(bytearray(train_data), dtype=torch.uint8).long()
    offsets = torch.arange(ctx + 1)
    first = None
    model.train()
    for step in range(r["steps"]):
        starts = torch.randint(0, len(stream) - ctx - 1, (r["batch"],), generator=gen)
        win = stream[starts[:, None] + offsets].to(device)
        logits = model(win[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), win[:, 1:].reshape(-1))
        value = loss.item()
        if first is None:
            first = value
        if not math.isfinite(value) or value > 3 * max(first, math.log(VOCAB)):
            raise Infeasible("diverged: training loss %.4g at step %d (first %.4g)" % (value, step + 1, first))
        for g in opt.param_groups:
            g["lr"] = lr_at(r, step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if r["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), r["grad_clip"])
        opt.step()
        if (step + 1) % max(1, r["steps"] // 4) == 0 or step == 0:
            log("step %d/%d loss %.4f nats lr %.3g" % (step + 1, r["steps"], value, lr_at(r, step)))
    if checkpoint:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, checkpoint)
    if val_data is None:
        log("validation left to the evaluator")
        return value / math.log(2), r["steps"], flops_of(r, r["steps"] * r["batch"] * ctx, 0)
    bpb, scored = evaluate(torch, model, val_data, ctx, device, eval_bytes)
    if not math.isfinite(bpb):
        raise Infeasible("diverged: validation loss %r" % bpb)
    return bpb, r["steps"], flops_of(r, r["steps"] * r["batch"] * ctx, scored)


def evaluate(torch, model, val, ctx, device, eval_bytes):
    """Bits per byte over the first eval_bytes predicted bytes of val, in
    windows of ctx (the last one shorter), each window's bytes predicted
    from the window's own prefix."""
    n = min(eval_bytes, len(val) - 1)
    ids = torch.frombuffer(bytearray(val[: n + 1]), dtype=torch.uint8).long()
    model.eval()
    total = 0.0
    with torch.no_grad():
        full = n // ctx
        parts = []
        if full:
            x = ids[: full * ctx + 1]
            parts.append((x[:-1].view(full, ctx), x[1:].view(full, ctx)))
        if n % ctx:
            x = ids[full * ctx :]
            parts.append((x[:-1].view(1, -1), x[1:].view(1, -1)))
        for xs, ys in parts:
            for i in range(0, xs.shape[0], 64):
                lg = model(xs[i : i + 64].to(device))
                total += torch.nn.functional.cross_entropy(
                    lg.reshape(-1, VOCAB).double(), ys[i : i + 64].reshape(-1).to(device), reduction="sum"
                ).item()
    return total / n / math.log(2), n


def pick_device(torch, want):
    if want not in ("auto", "cpu", "cuda"):
        raise BadJob("device %r, want auto, cpu or cuda" % want)
    if want == "cuda" and not torch.cuda.is_available():
        raise Transient("device cuda requested but torch.cuda.is_available() is false")
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "cpu"


def run(job, spec):
    recipe = check_recipe(spec["recipe"], "recipe")
    reference = spec.get("reference")
    if reference is not None:
        reference = check_recipe(reference, "reference")
    threads = int(spec.get("threads", 1))
    import torch

    device = pick_device(torch, spec.get("device", "auto"))
    if device == "cpu":
        torch.set_num_threads(max(1, threads))
        torch.use_deterministic_algorithms(True)
    log("torch %s on %s, %d thread(s)" % (torch.__version__, device, torch.get_num_threads()))
    data = load_corpus(spec)
    seed, eval_bytes = job["seed"], int(spec.get("eval_bytes", 8192))
    start, cpu0 = time.time(), time.process_time()
    try:
        loss, steps, flops = train(torch, recipe, data, seed, device, eval_bytes, os.environ.get("LM2LM_CHECKPOINT"))
        log("validation %.5f bits per byte after %d steps" % (loss, steps))
        out = {"loss": loss, "seeds": [seed]}
        ref = (spec.get("reference_losses") or {}).get(str(seed))
        if ref is None and reference is not None:
            if reference == recipe:
                ref = loss
            else:
                log("training the reference recipe with seed %d for the gain" % seed)
                ref, _, rflops = train(torch, reference, data, seed, device, eval_bytes)
                flops += rflops
                log("reference: %.5f bits per byte" % ref)
        if ref is not None:
            out["gain"] = float(ref) - loss
    except RuntimeError as e:
        if "out of memory" in str(e):
            raise Infeasible("out of memory: %s" % str(e).splitlines()[0])
        raise
    wall = time.time() - start
    dev = wall if device == "cuda" else time.process_time() - cpu0
    out["cost"] = {"wall_seconds": wall, "device_seconds": dev, "flops": flops}
    return out


def write_result(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def main(argv):
    if len(argv) != 3:
        print("usage: train.py <job file> <result file>", file=sys.stderr)
        return EXIT_BAD_JOB
    result_path = argv[2]
    try:
        job, spec = read_job(argv[1])
        task, prop = job.get("task") or {}, job.get("proposal") or {}
        log("task %s proposal %s seed %d" % (task.get("id"), job.get("key"), job["seed"]))
        log("proposal-text-hex: " + str(prop.get("text", "")).encode("utf-8").hex())
        out = run(job, spec)
    except BadJob as e:
        log("bad job:", e)
        return EXIT_BAD_JOB
    except Infeasible as e:
        log("infeasible:", e)
        write_result(result_path, {"infeasible": str(e)})
        return EXIT_INFEASIBLE
    except Transient as e:
        log("transient:", e)
        return EXIT_TRANSIENT
    write_result(result_path, out)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv))
