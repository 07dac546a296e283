#!/usr/bin/env python3
"""A small decoder-only transformer proposer trained through lm2lm's service.

    LM2LM_URL=http://127.0.0.1:8080 python3 train.py --out summary.json [sizes]
    python3 train.py --check batch.json out.json

Training mode reads research states from the environment service
(POST /v1/states), writes proposals in the proposer's JSON answer format
({"mechanism": ..., "params": {...}}, what proposer/openai.ParseProposal
accepts), and trains in two phases:

1. Warm-up: supervised next-token training on catalogue-valid answers drawn
   uniformly (a card, then one allowed value per parameter) for prompts made
   of the service's training states' TASK lines and zero to three synthetic
   HISTORY lines (uniform catalogue changes, made-up gains). The catalogue comes from the prompt's CARD
   lines. Measured gains are not used (that is the SFT baseline's data).
2. RL (METHOD.md §1 Policy optimisation): per step, new states; G sampled
   completions per state with their token log-probs; POST /v1/score (the
   service parses, predicts, shapes and returns group-relative advantages and
   the dynamic-sampling "kept" flags: groups with equal rewards are dropped);
   token-level DAPO update (token-mean, clip 0.2/0.28); POST /v1/advance.
   Calibrations run inside the service at its schedule's steps.

Before and after RL it samples four completions for each of a fixed set of
held-out states and asks POST /v1/evaluate for real runs: valid share and
Avg@4 (mean real gain in sigma units, invalid or infeasible samples count 0).

The model reads a condensed prompt, not the whole chat prompt (which is
several KB with the catalogue): the TASK line's family, metric and budget,
then the last three HISTORY lines as mechanism, parameters and gain in sigma
units; with --prompt full also the description's "name value" pairs (each
value as a quarter-octave token) and every HISTORY line. The catalogue is constant across states, so it is learned, not read.
The tokenizer is greedy longest match over pieces built from the catalogue
(each card's answer opening up to its first value, each later parameter's
name with its JSON punctuation, every mechanism, parameter name and value),
the families and metrics of the first states' TASK lines, the answer format's JSON pieces and printable ASCII (anything else is UNK):
a valid answer is four to eight tokens, any string can still be written.

--check-sampler OUT compares the two fast paths (the key-value-cached sampler
and the grouped update, group_logprobs) with the model's full forward.
--save DIR keeps the policy after the warm-up and after RL (DIR/warmup.pt,
DIR/final.pt); --serve CHECKPOINT serves a saved policy as an
OpenAI-compatible chat completions endpoint on a free loopback port (the
bearer token in LM2LM_POLICY_TOKEN) until stdin closes.

--check mode computes dapo_loss (the function the RL update uses) and its
gradient with autograd in float64 for a batch
{"sequences": [{"old": [...], "new": [...], "advantage": a}, ...]} and writes
{"loss": l, "grad": [[...], ...], "tokens": n}.

Standard library and torch only. Device: cuda when available, else cpu
(deterministic for a seed on cpu).
"""

import argparse
import concurrent.futures
import json
import math
import os
import random
import re
import sys
import time
import urllib.error
import urllib.request

EPS_LOW, EPS_HIGH = 0.2, 0.28
HISTORY_LINES = 3
MAX_HISTORY = 8  # records.MaxHistory: a state's history holds at most 8 records
MAX_PROMPT = 64
MAX_PROMPT_FULL = 224
MAX_ANSWER = 24
PROMPT = "condensed"  # or "full" (--prompt)
NUMBER = re.compile(r"([A-Za-z][A-Za-z0-9_\-]*)\s+(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)")
PAD, BOS, SEP, EOS, UNK = "<pad>", "<bos>", "<sep>", "<eos>", "<unk>"


def dapo_loss(torch, new, old, adv, mask, eps_low=EPS_LOW, eps_high=EPS_HIGH):
    """Token-level clipped surrogate, token-mean (dapo.Loss, DefaultLossConfig).

    new, old, mask: (B, T); adv: (B,). Per token rho = exp(new - old),
    l = max(-A rho, -A clip(rho, 1 - eps_low, 1 + eps_high)); the loss is
    the masked sum over the number of tokens (0 without tokens). Returns
    (loss, clip_fraction).
    """
    tokens = mask.sum()
    if tokens.item() == 0:
        return (new * 0).sum(), 0.0
    a = adv.unsqueeze(-1)
    ratio = torch.exp(new - old)
    l1 = -a * ratio
    l2 = -a * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    loss = (torch.maximum(l1, l2) * mask).sum() / tokens
    clipped = ((l2 > l1).to(mask.dtype) * mask).sum() / tokens
    return loss, clipped.item()


def check(args):
    import torch

    torch.use_deterministic_algorithms(True)
    with open(args.check[0]) as f:
        seqs = json.load(f)["sequences"]
    b, t = len(seqs), max([len(s["old"]) for s in seqs] + [1])
    old = torch.zeros(b, t, dtype=torch.float64)
    new = torch.zeros(b, t, dtype=torch.float64)
    mask = torch.zeros(b, t, dtype=torch.float64)
    adv = torch.zeros(b, dtype=torch.float64)
    for i, s in enumerate(seqs):
        n = len(s["old"])
        if len(s["new"]) != n:
            raise ValueError("sequence %d: %d new log-probs for %d old ones" % (i, len(s["new"]), n))
        old[i, :n] = torch.tensor(s["old"], dtype=torch.float64)
        new[i, :n] = torch.tensor(s["new"], dtype=torch.float64)
        mask[i, :n] = 1
        adv[i] = s["advantage"]
    new.requires_grad_(True)
    loss, clip = dapo_loss(torch, new, old, adv, mask)
    loss.backward()
    out = {"loss": loss.item(), "clip_frac": clip, "tokens": int(mask.sum().item()),
           "grad": [new.grad[i, : len(s["old"])].tolist() for i, s in enumerate(seqs)]}
    with open(args.check[1], "w") as f:
        json.dump(out, f)
    return 0


def check_sampler(args):
    """Checks the two fast paths against the model's full forward (the
    warm-up's path) on a randomly initialised policy: the key-value-cached
    sampler's log-probs, and group_logprobs' log-probs and parameter
    gradients (prompts of different lengths, one answer only EOS). Writes
    {"sample_diff": d, "group_diff": d, "grad_diff": d, "tokens": n}."""
    import torch

    torch.manual_seed(args.seed)
    cat = [("mech_a", [("x", ["1", "2", "3"]), ("y", ["lo", "hi"])]), ("mech_b", [])]
    tok = Tokenizer(cat, ["ar-prose", "loss"])
    pol = Policy(torch, tok, "cpu", args.seed)
    sdiff, n, groups = 0.0, 0, []
    for text in ("T ar-prose loss 1000", "T ar-prose loss 3\nH mech_a x=1 y=hi +1.5\nH mech_b  -0.3"):
        pol.prompt_ids = lambda _st, text=text: pol.prompt_text_ids(text)
        _, ids, lps = pol.sample({}, 8)
        p = pol.prompt_ids({})
        with torch.no_grad():
            lp, _, _ = pol.logprobs([p] * len(ids), ids)
        for i, a in enumerate(ids):
            sdiff = max([sdiff] + [abs(u - v) for u, v in zip(lp[i, : len(a)].tolist(), lps[i])])
            n += len(a)
        groups.append((p, ids[:3] + [ids[3][:2]]))
    groups.append((groups[0][0][:3], [[pol.eos], groups[0][1][0]]))
    prompts = [p for p, ans in groups for _ in ans]
    answers = [a for _, ans in groups for a in ans]
    grads = []
    for full in (True, False):
        pol.model.zero_grad()
        lp, m, _ = pol.logprobs(prompts, answers) if full else pol.group_logprobs(groups)
        (lp * m * torch.linspace(-1, 1, m.numel()).view_as(m)).sum().backward()
        grads.append((lp.detach(), torch.cat([q.grad.flatten() for q in pol.model.parameters()])))
    out = {"sample_diff": sdiff, "tokens": n,
           "group_diff": (grads[0][0] - grads[1][0]).abs().max().item(),
           "grad_diff": (grads[0][1] - grads[1][1]).abs().max().item(),
           "grad_norm": grads[0][1].norm().item()}
    with open(args.check_sampler, "w") as f:
        json.dump(out, f)
    return 0


# Serving a saved policy (--serve).

MAX_BODY = 1 << 20


def completion(pol, body, lock):
    """Answers one OpenAI chat-completions request body with pol: n
    completions of the prompt's last message (the service's prompt form,
    read by condense), sampled from a generator seeded with the request's
    seed, with each token's log-prob. Raises ValueError for a bad body."""
    torch = pol.torch
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
        raise ValueError("messages: want a non-empty list of {role, content}")
    n = body.get("n", 1)
    if n is None:
        n = 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 64:
        raise ValueError("n: want an integer in [1, 64]")
    temp = body.get("temperature", 1.0)
    if temp is None:
        temp = 1.0
    if not isinstance(temp, (int, float)) or isinstance(temp, bool) or not 0 <= temp <= 2:
        raise ValueError("temperature: want a number in [0, 2]")
    seed = body.get("seed", 0)
    if seed is None:
        seed = 0
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError("seed: want an integer")
    gen = torch.Generator(device=pol.device)
    gen.manual_seed(seed & (2 ** 63 - 1))
    state = {"prompt": msgs}
    with lock:
        texts, ids, lps = pol.sample(state, n, gen=gen, temperature=float(temp))
        prompt_tokens = len(pol.prompt_ids(state))
    choices = []
    for i, (text, toks, lp) in enumerate(zip(texts, ids, lps)):
        stopped = bool(toks) and toks[-1] == pol.eos
        # Each sampled token but EOS with its log-prob; a special token
        # (padding, UNK) writes no text, as in the content.
        content = [{"token": pol.tok.decode([t]), "logprob": v, "bytes": list(pol.tok.decode([t]).encode()), "top_logprobs": []}
                   for t, v in zip(toks, lp) if t != pol.eos]
        choices.append({"index": i, "message": {"role": "assistant", "content": text, "refusal": None},
                        "logprobs": {"content": content, "refusal": None},
                        "finish_reason": "stop" if stopped else "length"})
    done = sum(len(t) for t in ids)
    return {"id": "chatcmpl-llm-rl-%d" % (seed & 0xFFFFFFFF), "object": "chat.completion", "created": 0,
            "model": body.get("model") or "llm-rl", "system_fingerprint": "", "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": prompt_tokens + done}}


SERVE_TIMEOUT = 10  # seconds a connection may take over each read and write
SERVE_CONNS = 16  # connections handled at once (one thread each); more wait in the listen backlog


def policy_server(token, answer, timeout=SERVE_TIMEOUT, conns=SERVE_CONNS):
    """Returns an HTTP server on a free loopback port that answers POST
    /v1/chat/completions with answer(body) (body a JSON object; answer
    raises ValueError for a bad one), each request needing the bearer
    token. Every connection has a socket timeout (a client that stops
    sending is dropped after it), at most conns connections are handled at
    once (each by a thread; the next waits in the listen backlog, and one
    that finds no slot within twice the timeout is closed: a handler whose
    client stops sending frees its slot within the timeout, so the margin
    is for a loaded machine's scheduling), and each serves one
    request (HTTP/1.0). A body that cannot be parsed, whatever the reason
    (not UTF-8, not JSON, nested past the parser's recursion limit, shorter
    than its Content-Length), is answered 400; an error of answer other
    than ValueError, 500."""
    import http.server
    import threading

    slots = threading.BoundedSemaphore(conns)

    class Handler(http.server.BaseHTTPRequestHandler):
        def setup(self):
            self.timeout = timeout  # StreamRequestHandler sets it on the socket
            super().setup()

        def reply(self, code, obj):
            b = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b)
            self.close_connection = True

        def fail(self, code, msg):
            self.reply(code, {"error": {"message": msg, "type": "invalid_request_error"}})

        def do_POST(self):
            if self.headers.get("Authorization", "") != "Bearer " + token:
                return self.fail(401, "a bearer token is needed")
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                return self.fail(404, "only /v1/chat/completions is served")
            try:
                size = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self.fail(411, "Content-Length is needed")
            if not 0 <= size <= MAX_BODY:
                return self.fail(413, "the body exceeds %d bytes" % MAX_BODY)
            raw = self.rfile.read(size)  # a socket timeout ends the connection
            if len(raw) != size:
                return self.fail(400, "the body is shorter than its Content-Length")
            try:
                body = json.loads(raw)
            except Exception as e:  # ValueError, UnicodeDecodeError, RecursionError, ...
                return self.fail(400, "the body is not JSON: %s" % type(e).__name__)
            if not isinstance(body, dict):
                return self.fail(400, "want a JSON object")
            try:
                out = answer(body)
            except ValueError as e:
                return self.fail(400, str(e)[:300])
            except Exception as e:
                print("serve: %s: %s" % (type(e).__name__, str(e)[:300]), file=sys.stderr, flush=True)
                return self.fail(500, "internal error")
            self.reply(200, out)

        def log_message(self, *a):
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

        def process_request(self, request, client_address):
            if not slots.acquire(timeout=2 * timeout):
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                slots.release()
                raise

        def process_request_thread(self, request, client_address):
            try:
                super().process_request_thread(request, client_address)
            finally:
                slots.release()

        def handle_error(self, request, client_address):
            pass  # a client that timed out or went away

    return Server(("127.0.0.1", 0), Handler)


def run_policy_server(srv):
    """Serves srv until stdin closes, after printing its address."""
    import threading

    threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("listening on http://127.0.0.1:%d" % srv.server_address[1], flush=True)
    sys.stdin.read()  # the owner closes stdin to stop the server
    srv.shutdown()
    return 0


def serve(args):
    """Serves the policy saved at args.serve as an OpenAI-compatible chat
    completions endpoint on 127.0.0.1 (a free port: the first line on
    stdout is "listening on http://127.0.0.1:PORT"), each request needing
    the bearer token in LM2LM_POLICY_TOKEN, until stdin closes
    (policy_server: timeouts, a bound on connections, 400 for a body that
    cannot be parsed)."""
    import threading
    import torch

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    token = os.environ.get("LM2LM_POLICY_TOKEN", "")
    if not token:
        raise RuntimeError("LM2LM_POLICY_TOKEN is empty: the policy server needs a token")
    pol, _ = load_policy(torch, args.serve, "cpu", args.seed)
    lock = threading.Lock()
    return run_policy_server(policy_server(token, lambda body: completion(pol, body, lock)))


# The service.

URL = os.environ.get("LM2LM_URL", "http://127.0.0.1:8080")
TOKEN = os.environ.get("LM2LM_TOKEN", "")


def call(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    for attempt in range(6):
        req = urllib.request.Request(URL + path, data=data, headers=headers, method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(req, timeout=900) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == 5:
                raise RuntimeError("lm2lm %s: %d %s" % (path, e.code, e.read()[:500])) from None
        time.sleep(0.5 * 2 ** attempt)


def states(n, split, rid):
    return call("/v1/states", {"request_id": rid, "n": n, "split": split})["states"]


def data_lines(state):
    """The TASK, HISTORY and CARD lines of a state's user message."""
    user = state["prompt"][-1]["content"]
    out = {"TASK": [], "HISTORY": [], "CARD": []}
    for line in user.splitlines():
        kind, _, rest = line.partition(" ")
        if kind in out and rest.startswith("{"):
            out[kind].append(json.loads(rest))
    return out


def catalogue_of(state):
    return [(c["mechanism"], [(p["name"], list(p["choices"])) for p in c.get("params", [])])
            for c in data_lines(state)["CARD"]]


def condense(state):
    """The prompt the model reads (see the module doc)."""
    d = data_lines(state)
    return condense_lines(d["TASK"][0] if d["TASK"] else {}, d["HISTORY"])


def qbin(v):
    """A value's quarter-octave token: q<floor(4 log2 |v|)>, "n" before it
    for a negative value, q0z for zero. Learning rates a factor 2 apart,
    widths 64 and 128, budgets 1e9 and 3e9 get different tokens."""
    if v == 0:
        return "q0z"
    return ("n" if v < 0 else "") + "q%d" % int(math.floor(4 * math.log2(abs(v))))


def description_pairs(text):
    """The "name value" pairs of a task description, each value binned."""
    out = []
    for name, value in NUMBER.findall(text or ""):
        try:
            out.append("%s %s" % (name.lower(), qbin(float(value))))
        except (ValueError, OverflowError):
            continue
    return out


def condense_lines(task, history):
    parts = ["T %s %s %s" % (task.get("family", "?"), task.get("metric", "?"), task.get("budget", "?"))]
    if PROMPT == "full":
        parts.append("D " + " ".join(description_pairs(task.get("description", ""))))
    for h in history[-(MAX_HISTORY if PROMPT == "full" else HISTORY_LINES):]:
        ps = " ".join("%s=%s" % kv for kv in sorted((h.get("params") or {}).items()))
        g = h.get("gain_sigmas")
        parts.append("H %s %s %s" % (h.get("mechanism", "?"), ps, "inf" if g is None else "%+.1f" % g))
    return "\n".join(parts)


def synthetic_prompt(pool, cat, rng):
    """A warm-up prompt: a pool state's TASK line and zero to three HISTORY
    lines of uniformly drawn catalogue changes with made-up gains, so that
    the model has seen every shape of prompt it will read (no measured gain
    is used)."""
    st = rng.choice(pool)
    d = data_lines(st)
    hist = []
    for _ in range(rng.randint(0, MAX_HISTORY if PROMPT == "full" else HISTORY_LINES)):
        mech, specs = rng.choice(cat)
        g = None if rng.random() < 0.1 else rng.gauss(0, 2)
        hist.append({"mechanism": mech, "params": {n: rng.choice(ch) for n, ch in specs}, "gain_sigmas": g})
    return condense_lines(d["TASK"][0] if d["TASK"] else {}, hist)


def task_words(pool):
    """The families and metrics of the TASK lines, and under the full
    prompt the description's names and every bin: whole tokens."""
    words = set()
    for st in pool:
        for t in data_lines(st)["TASK"]:
            words.update(str(t.get(k, "")) for k in ("family", "metric"))
            if PROMPT == "full":
                words.update(p.split()[0] for p in description_pairs(t.get("description", "")))
    if PROMPT == "full":
        words.update("q%d" % b for b in range(-160, 200))
        words.update("nq%d" % b for b in range(-160, 200))
        words.add("q0z")
    return sorted(w for w in words if len(w) > 1)


def answer(mech, params):
    return json.dumps({"mechanism": mech, "params": dict(params)}, separators=(",", ":"))


def valid(text, cat):
    """train.py's own check of an answer against the catalogue."""
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    if not isinstance(obj, dict):
        return False
    m, ps = obj.get("mechanism"), obj.get("params") or {}
    for mech, specs in cat:
        if mech == m:
            return isinstance(ps, dict) and set(ps) == {n for n, _ in specs} and all(ps[n] in ch for n, ch in specs)
    return m == "none" and not ps


class Tokenizer:
    def __init__(self, cat, words=()):
        pieces = set(words) | {'{"mechanism":"', '","params":{', '"', '":"', '","', '"}}', '}}', "{}", "none"}
        for mech, specs in cat:
            pieces.add(mech)
            # A card's opening up to its first value is one token, and so is
            # each later parameter's name with its JSON punctuation.
            if specs:
                pieces.add('{"mechanism":"%s","params":{"%s":"' % (mech, specs[0][0]))
            else:
                pieces.add('{"mechanism":"%s","params":{}}' % mech)
            for n, ch in specs:
                pieces.add(n)
                pieces.add('","%s":"' % n)
                pieces.update(ch)
        chars = {chr(c) for c in range(32, 127)} | {"\n"}
        self._index([PAD, BOS, SEP, EOS, UNK] + sorted(chars) + sorted(p for p in pieces if len(p) > 1))

    def _index(self, itos):
        self.itos = list(itos)
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.longest = max(len(s) for s in self.itos[5:])

    @classmethod
    def from_itos(cls, itos):
        """The tokenizer whose vocabulary is itos (a saved policy's)."""
        tok = cls.__new__(cls)
        tok._index(itos)
        return tok

    def encode(self, text):
        out, i = [], 0
        while i < len(text):
            for n in range(min(self.longest, len(text) - i), 0, -1):
                j = self.stoi.get(text[i : i + n])
                if j is not None and j > 4:
                    out.append(j)
                    i += n
                    break
            else:
                out.append(self.stoi[UNK])
                i += 1
        return out

    def decode(self, ids):
        return "".join(self.itos[i] for i in ids if i > 4)


def build_model(torch, vocab, ctx, d=64, heads=4, layers=2):
    nn = torch.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(ctx, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab)

        def hidden(self, x):
            t = x.shape[1]
            mask = torch.triu(torch.full((t, t), float("-inf"), device=x.device), diagonal=1)
            h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
            return self.norm(self.blocks(h, mask=mask))

        def forward(self, x):
            return self.head(self.hidden(x))

    return LM()


class Policy:
    def __init__(self, torch, tok, device, seed):
        self.torch, self.tok, self.device = torch, tok, device
        self.max_prompt = MAX_PROMPT_FULL if PROMPT == "full" else MAX_PROMPT
        self.ctx = self.max_prompt + MAX_ANSWER + 2
        self.model = build_model(torch, len(tok.itos), self.ctx).to(device)
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)

    def prompt_ids(self, state):
        return self.prompt_text_ids(condense(state))

    def prompt_text_ids(self, text):
        ids = self.tok.encode(text)[-self.max_prompt:]
        return [self.tok.stoi[BOS]] + ids + [self.tok.stoi[SEP]]

    def batch(self, prompts, answers):
        """Right-padded inputs (causal: padding on the right changes
        nothing), each answer token's position in its row (the position
        whose output predicts it) and the answer tokens, both (B, A) with
        A the longest answer, and the answer mask."""
        torch = self.torch
        seqs = [p + a for p, a in zip(prompts, answers)]
        t, na = max(len(s) for s in seqs), max(len(a) for a in answers)
        x = torch.zeros(len(seqs), t, dtype=torch.long)
        at = torch.zeros(len(seqs), na, dtype=torch.long)
        y = torch.zeros(len(seqs), na, dtype=torch.long)
        m = torch.zeros(len(seqs), na)
        for i, (p, a) in enumerate(zip(prompts, answers)):
            x[i, : len(p) + len(a)] = torch.tensor(p + a)
            at[i, : len(a)] = torch.arange(len(p) - 1, len(p) - 1 + len(a))
            y[i, : len(a)] = torch.tensor(a)
            m[i, : len(a)] = 1
        return x.to(self.device), at.to(self.device), y.to(self.device), m.to(self.device)

    def logprobs(self, prompts, answers):
        """The answers' per-token log-probs (B, A), their mask and the mean
        entropy per answer token. The output layer runs at the answer
        positions only: the prompt's positions predict nothing trained."""
        torch = self.torch
        x, at, y, m = self.batch(prompts, answers)
        h = self.model.hidden(x[:, :-1])
        h = h.gather(1, at.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        lp = torch_log_softmax(torch, self.model.head(h).float())
        tok = lp.gather(-1, y.unsqueeze(-1)).squeeze(-1) * m
        ent = -(lp.exp() * lp).sum(-1)
        return tok, m, ((ent * m).sum() / m.sum().clamp(min=1)).item()

    @property
    def eos(self):
        return self.tok.stoi[EOS]

    def _layer(self, layer, h, prefix=None, bias=None):
        """One norm-first layer of the model (its own weights, ReLU) over h
        (B, t, d), attending to prefix's keys and values (B, heads, P,
        d_head) before its own; bias (B or 1, 1, t, P + t) is added to the
        attention scores (-inf where a key is hidden). Returns the layer's
        output and the keys and values attended to (prefix's, then h's)."""
        torch, F = self.torch, self.torch.nn.functional
        att = layer.self_attn
        heads = att.num_heads
        b, t, d = h.shape
        q, k, v = F.linear(layer.norm1(h), att.in_proj_weight, att.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        kk, vv = (k, v) if prefix is None else (torch.cat([prefix[0], k], dim=2), torch.cat([prefix[1], v], dim=2))
        w = q @ kk.transpose(-2, -1) / math.sqrt(d // heads)
        if bias is not None:
            w = w + bias
        a = (torch.softmax(w, dim=-1) @ vv).transpose(1, 2).reshape(b, t, d)
        h = h + att.out_proj(a)
        return h + layer.linear2(F.relu(layer.linear1(layer.norm2(h)))), kk, vv

    def _causal(self, t, p=0):
        """The additive mask of t new tokens after p earlier ones: each sees
        every earlier one and itself."""
        torch = self.torch
        return torch.triu(torch.full((t, p + t), float("-inf"), device=self.device), diagonal=p + 1)

    def _step(self, x, pos, cache):
        """One incremental forward over new tokens x (B, n) at positions
        pos.. pos+n-1, reading and extending cache (one (keys, values) pair
        per layer); returns the last position's logits. The arithmetic of
        forward() with its causal mask, computed once per token instead of
        over the whole prefix at every token."""
        torch, m = self.torch, self.model
        n = x.shape[1]
        h = m.tok(x) + m.pos(torch.arange(pos, pos + n, device=x.device))
        bias = self._causal(n, pos) if n > 1 else None
        for li, layer in enumerate(m.blocks.layers):
            h, k, v = self._layer(layer, h, cache[li], bias)
            cache[li] = (k, v)
        return m.head(m.norm(h[:, -1]))

    def group_logprobs(self, groups):
        """The per-token log-probs of groups of answers that share a prompt,
        [(prompt ids, [answer ids, ...]), ...], flattened in order: (N, A)
        with A the longest answer, the mask and the mean entropy per answer
        token. Equal to logprobs() over each (prompt, answer) pair (tested by
        --check-sampler), but each prompt goes through the model once for
        its G answers: the answers attend to their prompt's keys and values."""
        torch, m = self.torch, self.model
        dev = self.device
        s, pl = len(groups), max(len(p) for p, _ in groups)
        x = torch.zeros(s, pl, dtype=torch.long)
        hide = torch.zeros(s, pl)
        rows, ans = [], []
        for i, (p, answers) in enumerate(groups):
            x[i, : len(p)] = torch.tensor(p)
            hide[i, len(p):] = float("-inf")
            rows += [i] * len(answers)
            ans += list(answers)
        x, hide = x.to(dev), hide.to(dev)
        lens = torch.tensor([len(p) for p, _ in groups], device=dev)
        rows_t = torch.tensor(rows, device=dev)
        na = max(len(a) for a in ans)
        # The answers' inputs: each answer but its last token, at the
        # positions after its own prompt.
        y = torch.zeros(len(ans), na, dtype=torch.long)
        mask = torch.zeros(len(ans), na)
        for i, a in enumerate(ans):
            y[i, : len(a)] = torch.tensor(a)
            mask[i, : len(a)] = 1
        y, mask = y.to(dev), mask.to(dev)
        xa = y[:, : na - 1]
        pos = lens[rows_t].unsqueeze(-1) + torch.arange(na - 1, device=dev)
        hp = m.tok(x) + m.pos(torch.arange(pl, device=dev))
        ha = m.tok(xa) + m.pos(pos)
        # An answer sees its prompt's real tokens and its own earlier tokens.
        bias = torch.cat([hide[rows_t].unsqueeze(1).expand(-1, na - 1, -1),
                          self._causal(na - 1).unsqueeze(0).expand(len(ans), -1, -1)], dim=-1).unsqueeze(1)
        pbias = self._causal(pl)
        for layer in m.blocks.layers:
            hp, k, v = self._layer(layer, hp, None, pbias)
            ha, _, _ = self._layer(layer, ha, (k[rows_t], v[rows_t]), bias)
        last = hp[torch.arange(s, device=dev), lens - 1][rows_t].unsqueeze(1)
        h = m.norm(torch.cat([last, ha], dim=1))
        lp = torch_log_softmax(torch, m.head(h).float())
        tok = lp.gather(-1, y.unsqueeze(-1)).squeeze(-1) * mask
        ent = -(lp.exp() * lp).sum(-1)
        return tok, mask, ((ent * mask).sum() / mask.sum().clamp(min=1)).item()

    def sample(self, state, g, gen=None, temperature=1.0):
        """g completions of one state: (texts, answer ids incl. EOS, old log-probs).

        The prompt is encoded once and its keys and values shared by the g
        completions (a key-value cache): the per-token log-probs equal the
        full forward's to float rounding (tested by --check-sampler). gen
        is the random source (default the policy's own); temperature
        divides the logits (0: the most likely token)."""
        torch = self.torch
        gen = self.gen if gen is None else gen
        p = self.prompt_ids(state)
        done = torch.zeros(g, dtype=torch.bool, device=self.device)
        outs, lps = [[] for _ in range(g)], [[] for _ in range(g)]
        cache = [None] * len(self.model.blocks.layers)
        with torch.no_grad():
            logits = self._step(torch.tensor([p], device=self.device), 0, cache)
            cache = [(k.expand(g, -1, -1, -1), v.expand(g, -1, -1, -1)) for k, v in cache]
            logits = logits.expand(g, -1)
            for t in range(MAX_ANSWER):
                if temperature == 0:
                    lp = torch_log_softmax(self.torch, logits.float())
                    nxt = lp.argmax(-1)
                else:
                    lp = torch_log_softmax(self.torch, logits.float() / temperature)
                    nxt = torch.multinomial(lp.exp(), 1, generator=gen).squeeze(-1)
                chosen = lp.gather(-1, nxt.unsqueeze(-1)).squeeze(-1).tolist()
                ids = nxt.tolist()
                for i in range(g):
                    if not done[i]:
                        outs[i].append(ids[i])
                        lps[i].append(chosen[i])
                done |= nxt == self.eos
                if bool(done.all()) or t == MAX_ANSWER - 1:
                    break
                logits = self._step(nxt.unsqueeze(-1), len(p) + t, cache)
        texts = [self.tok.decode([t for t in o if t != self.eos]) for o in outs]
        return texts, outs, lps


CHECKPOINT_FORMAT = "lm2lm-llm-rl-policy/1"


def save_policy(pol, path, kind, seed):
    """Writes the policy (weights, vocabulary, prompt form) to path,
    atomically; load_policy reads it back (torch.load with weights_only)."""
    torch = pol.torch
    obj = {"format": CHECKPOINT_FORMAT, "kind": kind, "seed": seed, "prompt": PROMPT,
           "itos": list(pol.tok.itos), "state_dict": {k: v.detach().cpu() for k, v in pol.model.state_dict().items()}}
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_policy(torch, path, device, seed):
    """The policy save_policy wrote to path; sets the prompt form."""
    global PROMPT
    obj = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(obj, dict) or obj.get("format") != CHECKPOINT_FORMAT:
        raise ValueError("%s: not a %s checkpoint" % (path, CHECKPOINT_FORMAT))
    PROMPT = obj["prompt"]
    pol = Policy(torch, Tokenizer.from_itos(obj["itos"]), device, seed)
    pol.model.load_state_dict(obj["state_dict"])
    pol.model.eval()
    return pol, obj


def torch_log_softmax(torch, logits):
    return torch.log_softmax(logits, dim=-1)


def warmup(pol, cat, pool, steps, bsz, rng, log):
    torch = pol.torch
    opt = torch.optim.AdamW(pol.model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1 - 0.9 * k / max(steps, 1))
    for step in range(steps):
        prompts, answers = [], []
        for _ in range(bsz):
            text = synthetic_prompt(pool, cat, rng)
            mech, specs = rng.choice(cat)
            a = answer(mech, [(n, rng.choice(ch)) for n, ch in specs])
            prompts.append(pol.prompt_text_ids(text))
            answers.append(pol.tok.encode(a) + [pol.eos])
        lp, m, _ = pol.logprobs(prompts, answers)
        loss = -(lp * m).sum() / m.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            log("warm-up step %d: nll %.3f" % (step, loss.item()))


def evaluate(pol, held, tag):
    groups = []
    for st in held:
        texts, _, _ = pol.sample(st, 4)
        groups.append({"state_id": st["state_id"], "completions": texts})
    out = call("/v1/evaluate", {"request_id": "eval-" + tag, "groups": groups})
    gains, ok, n = [], 0, 0
    for g in out["groups"]:
        s = 0.0
        for r in g:
            n += 1
            ok += bool(r.get("valid"))
            if r.get("valid") and r.get("measured") and not r.get("infeasible") and not r.get("failure"):
                s += r.get("gain_sigmas", 0.0)
        gains.append(s / len(g))
    # Each state's outcomes, for the comparison's convention (an invalid
    # sample counts in no average, an infeasible one counts -c).
    per_state = [{"state_id": st["state_id"], "task": st.get("task", ""), "results": g}
                 for st, g in zip(held, out["groups"])]
    return {"valid": ok / max(n, 1), "avg4": sum(gains) / max(len(gains), 1), "runs": out.get("runs", 0),
            "mean_feasible_sigmas": out.get("mean_gain_sigmas", 0.0), "samples": n,
            "completions": [g["completions"] for g in groups], "states": per_state}


def score_per_sample(step, sts, samples, g):
    """Scores every completion with its own request, concurrently, as verl's
    Reward Loop does (the samples form of /v1/score: the service assembles
    each group from its G samples), and returns the groups in the whole-group
    form's shape plus the summary."""
    jobs = []
    for i, (st, s) in enumerate(zip(sts, samples)):
        for k, text in enumerate(s[0]):
            jobs.append((i, k, {"request_id": "score-%d-%d-%d" % (step, i, k), "step": step,
                                "samples": [{"group": "g%d" % i, "state_id": st["state_id"], "group_size": g,
                                             "index": k, "completion": text}]}))
    groups = [{"samples": [None] * g, "kept": False} for _ in sts]
    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as ex:
        futs = {ex.submit(call, "/v1/score", body): (i, k) for i, k, body in jobs}
        for f in concurrent.futures.as_completed(futs):
            i, k = futs[f]
            smp = f.result()["samples"][0]
            groups[i]["samples"][k] = smp
            groups[i]["kept"] = groups[i]["kept"] or bool(smp.get("kept"))
    rewards = [s["reward"] for gr in groups for s in gr["samples"] if s.get("reward") is not None]
    return {"groups": groups, "mean_reward": sum(rewards) / max(len(rewards), 1),
            "kept": sum(gr["kept"] for gr in groups), "flat": sum(not gr["kept"] for gr in groups)}


def rl_step(pol, opt, step, sts, g, epochs, per_sample=False):
    torch = pol.torch
    samples = [pol.sample(st, g) for st in sts]
    if per_sample:
        sc = score_per_sample(step, sts, samples, g)
    else:
        body = {"request_id": "score-%d" % step, "step": step,
                "groups": [{"state_id": st["state_id"], "completions": s[0]} for st, s in zip(sts, samples)]}
        sc = call("/v1/score", body)
    groups, olds, advs, gains, mechs = [], [], [], [], {}
    nvalid = ntotal = 0
    for st, (texts, ids, lps), gs in zip(sts, samples, sc["groups"]):
        kept = []
        for i, smp in enumerate(gs["samples"]):
            if smp.get("reward") is None:
                continue  # the world model failed: no reward, the sample is dropped
            ntotal += 1
            nvalid += bool(smp.get("valid"))
            if smp.get("valid"):
                gains.append(smp.get("gain", 0.0))
                mechs[smp.get("mechanism", "")] = mechs.get(smp.get("mechanism", ""), 0) + 1
            if not gs.get("kept"):
                continue  # dynamic sampling: a group with equal rewards has no signal
            kept.append(ids[i])
            olds.append(lps[i])
            advs.append(smp["advantage"])
        if kept:
            groups.append((pol.prompt_ids(st), kept))
    loss_v, clip_v, ent = 0.0, 0.0, float("nan")
    if groups:
        t = max(len(o) for o in olds)
        old = torch.zeros(len(olds), t, device=pol.device)
        for i, o in enumerate(olds):
            old[i, : len(o)] = torch.tensor(o)
        adv = torch.tensor(advs, device=pol.device)
        for _ in range(epochs):
            new, mask, ent = pol.group_logprobs(groups)
            loss, clip = dapo_loss(torch, new, old, adv, mask)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(pol.model.parameters(), 1.0)
            opt.step()
            loss_v, clip_v = loss.item(), clip
    else:
        _, _, ent = pol.logprobs([pol.prompt_ids(st) for st in sts], [[pol.eos] for _ in sts])
    adv_resp = call("/v1/advance", {"request_id": "advance-%d" % (step + 1), "step": step + 1})
    # A calibration's runs go in the background; this trainer waits for
    # them, as the paper's loop does, so that step + 1 is scored under
    # M_{u+1} (the service applies finished runs at the next step).
    started = len(adv_resp.get("calibrations") or [])
    while any(c["state"] == "running" for c in adv_resp.get("calibrations") or []):
        time.sleep(0.2)
        adv_resp = call("/v1/calibrations")
    return {"step": step, "mean_reward": sc.get("mean_reward", 0.0), "valid": nvalid / max(ntotal, 1),
            "mean_gain": sum(gains) / max(len(gains), 1),
            "top_share": max(mechs.values(), default=0) / max(len(gains), 1),
            "entropy": ent, "kept": sc.get("kept", 0), "flat": sc.get("flat", 0), "loss": loss_v,
            "clip_frac": clip_v}, started


def train(args):
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    if device == "cpu":
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(1)  # a shared CPU: more threads spin and wait
    rng = random.Random(args.seed)

    t0 = time.time()

    def log(msg):
        print("train.py: %6.1fs " % (time.time() - t0) + msg, file=sys.stderr, flush=True)

    pool = states(max(8, args.states), "train", "warmup-states")
    cat = catalogue_of(pool[0])
    if not cat:
        raise RuntimeError("the service's prompt has no CARD lines: a catalogue is needed")
    tok = Tokenizer(cat, task_words(pool))
    pol = Policy(torch, tok, device, args.seed)
    nparams = sum(p.numel() for p in pol.model.parameters())
    log("device %s, %d cards, vocabulary %d, %d parameters" % (device, len(cat), len(tok.itos), nparams))
    ex = pol.prompt_ids(pool[-1])
    log("%s prompt of a state (%d tokens): %r" % (PROMPT, len(ex), condense(pool[-1])))
    warmup(pol, cat, pool, args.warmup_steps, args.warmup_batch, rng, log)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        save_policy(pol, os.path.join(args.save, "warmup.pt"), "warmup", args.seed)

    held = states(args.eval_states, "test", "held-out")
    probe = [t for st in (pool[:4] + held) for t in pol.sample(st, 8)[0]]
    wvalid = sum(valid(t, cat) for t in probe) / len(probe)
    log("after warm-up: %.1f%% of %d samples valid (training and held-out states)" % (100 * wvalid, len(probe)))
    before = evaluate(pol, held, "before")
    log("before RL: valid %.2f, Avg@4 %+.3f (%d runs)" % (before["valid"], before["avg4"], before["runs"]))

    opt = torch.optim.AdamW(pol.model.parameters(), lr=args.lr, weight_decay=0.0)
    steps, cals, applied = [], [], 0
    for step in range(args.steps):
        sts = states(args.states, "train", "rl-%d" % step)
        row, started = rl_step(pol, opt, step, sts, args.group, args.epochs, args.per_sample)
        steps.append(row)
        log("RL step %d: reward %+.3f predicted %+.3f valid %.2f entropy %.3f clip %.3f kept %d flat %d" % (
            step, row["mean_reward"], row["mean_gain"], row["valid"], row["entropy"], row["clip_frac"], row["kept"], row["flat"]))
        # The monitors of a calibration are read once it applied (at the
        # step after its runs finished).
        done = [c for c in call("/v1/calibrations")["calibrations"] if c["state"] == "applied"]
        if len(done) > applied:
            mon = call("/v1/monitors")
            for c in done[applied:]:
                cals.append({"result": c, "monitors": mon})
                log("calibration at step %d: %d runs" % (c["step"], c["result"]["executed"]))
            applied = len(done)
    if args.save:
        save_policy(pol, os.path.join(args.save, "final.pt"), "final", args.seed)
    after = evaluate(pol, held, "after")
    log("after RL: valid %.2f, Avg@4 %+.3f (%d runs)" % (after["valid"], after["avg4"], after["runs"]))
    with open(args.out, "w") as f:
        json.dump({"device": device, "vocab": len(tok.itos), "params": nparams, "warmup_valid": wvalid,
                   "before": before, "after": after, "steps": steps, "calibrations": cals}, f)
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", nargs=2, metavar=("BATCH", "OUT"))
    ap.add_argument("--check-sampler", metavar="OUT", help="write the largest differences of the cached sampler's and the grouped update's log-probs and gradients from the full forward")
    ap.add_argument("--out", default="summary.json")
    ap.add_argument("--serve", metavar="CHECKPOINT", help="serve the saved policy as an OpenAI-compatible chat completions endpoint on 127.0.0.1 (token in LM2LM_POLICY_TOKEN) until stdin closes")
    ap.add_argument("--save", metavar="DIR", help="write the policy after the warm-up (DIR/warmup.pt) and after RL (DIR/final.pt)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup-steps", type=int, default=150)
    ap.add_argument("--warmup-batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--states", type=int, default=2)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--eval-states", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--prompt", choices=("condensed", "full"), default="condensed")
    ap.add_argument("--per-sample", action="store_true", help="score each completion with its own concurrent request")
    args = ap.parse_args(argv[1:])
    global PROMPT
    PROMPT = args.prompt
    if args.check:
        return check(args)
    if args.check_sampler:
        return check_sampler(args)
    if args.serve:
        return serve(args)
    return train(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
