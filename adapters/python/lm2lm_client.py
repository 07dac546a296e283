"""Minimal client of the lm2lm environment service (standard library only).

Environment: LM2LM_URL (default http://127.0.0.1:8080) and LM2LM_TOKEN
(the bearer token, when the service has one).

Retries. Every call goes through one policy (``request``): a connection
error, a timed-out attempt and the statuses 408, 429, 500, 502, 503 and 504
are tried again with the same body, after a capped exponential backoff
with full jitter (a uniform wait in [0, min(LM2LM_BACKOFF_CAP_S, default
8 s, LM2LM_BACKOFF_S * 2**attempt, default 0.5 s)], or the service's
Retry-After when that is longer), until the call's total deadline is
spent. What else goes wrong (a 400, 401, 409, 413, or the deadline spent)
raises LM2LMError, which says what happened: an adapter never turns an
error into a reward.

Timeouts follow the service's group deadline D (GET /v1/health's
group_deadline_seconds, read once; 60 s when it cannot be read), since a
score request legitimately waits up to D for its group's last sample:
each attempt may take D + 30 s (LM2LM_ATTEMPT_TIMEOUT_S) and a call
2 D + 30 s in all (LM2LM_DEADLINE_S; 150 s at the default D). Set the
deadline once, on the service (-group-deadline), and the clients follow.
Keep 2 D + 30 s below the framework's own limit on a reward call, where
it has one: OpenRLHF's HTTP reward client gives up after 180 s
(openrlhf/utils/agent.py, SingleTurnAgentExecutor._fetch_rewards_via_http);
verl, TRL, slime, prime-rl and OpenRLHF's reward file await a reward
without a limit, so an unbounded call would hang their step.

A retried score request is answered from its groups' first answers when
every sample states its index or the request is a named whole group; a
sample without an index would take a new index on a retry, so such a
request is retried only when the connection was refused or the service
answered 429 (nothing was applied).

Resume. ``step_floor`` is the service's step when this process first asks
(read once); ``at_step`` maps a trainer's step to max(step, floor). A
trainer resumed from a checkpoint behind the service's step therefore
scores its replayed steps at the service's step (under the newest world
model, no calibration point run twice) instead of being refused as
stale, and from the step after the floor on, its steps are the service's.
``run_id`` is a fresh identity per process (prefixed by LM2LM_RUN when
set) that the adapters put into group names, so that a resumed run's
groups never meet an earlier attempt's answers.
"""
import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid

URL = os.environ.get("LM2LM_URL", "http://127.0.0.1:8080")
TOKEN = os.environ.get("LM2LM_TOKEN", "")

# The statuses tried again: a timed-out request, rate limiting, and a
# server or gateway error or overload.
RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def _env_float(name, default):
    v = os.environ.get(name)
    return float(v) if v else default


BACKOFF_S = _env_float("LM2LM_BACKOFF_S", 0.5)
BACKOFF_CAP_S = _env_float("LM2LM_BACKOFF_CAP_S", 8.0)
DEFAULT_GROUP_DEADLINE_S = 60.0  # serve.DefaultConfig().GroupDeadline

_timeouts = None
_timeouts_lock = threading.Lock()


def timeouts():
    """(attempt timeout, total deadline) in seconds: the environment's, or
    derived from the service's group deadline D as (D + 30, 2 D + 30)."""
    global _timeouts
    with _timeouts_lock:
        if _timeouts is not None:
            return _timeouts
    d = DEFAULT_GROUP_DEADLINE_S
    if not (os.environ.get("LM2LM_ATTEMPT_TIMEOUT_S") and os.environ.get("LM2LM_DEADLINE_S")):
        try:
            h = json.loads(request("GET", "/v1/health", deadline=10.0, attempt_timeout=5.0))
            d = float(h.get("group_deadline_seconds") or d)
        except (LM2LMError, ValueError):
            pass
    t = (_env_float("LM2LM_ATTEMPT_TIMEOUT_S", d + 30.0), _env_float("LM2LM_DEADLINE_S", 2 * d + 30.0))
    with _timeouts_lock:
        _timeouts = t
    return t


_rng = random.Random()  # jitter only; seeded from the OS
_rng_lock = threading.Lock()


class LM2LMError(RuntimeError):
    """A call the service refused, or one that did not complete in time.

    status is the HTTP status (None for a transport error), code the
    service's error code (e.g. "stale_step"; "transport" or "deadline"
    when the service gave none), attempts the tries made.
    """

    def __init__(self, method, path, status, code, message, attempts):
        self.method, self.path, self.status, self.code, self.attempts = method, path, status, code, attempts
        self.message = message
        st = "" if status is None else "%d " % status
        super().__init__("lm2lm %s %s: %s%s: %s (after %d attempt%s)" % (
            method, path, st, code, message, attempts, "" if attempts == 1 else "s"))


def _error_of(body):
    """The service's error code and message from an error body."""
    try:
        e = json.loads(body)["error"]
        return str(e.get("code", "")), str(e.get("message", ""))
    except Exception:
        return "", body[:500].decode("utf-8", "replace") if isinstance(body, bytes) else str(body)[:500]


def _backoff(attempt, retry_after=None):
    with _rng_lock:
        wait = _rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_S * (2 ** attempt)))
    if retry_after is not None:
        wait = max(wait, retry_after)
    return wait


def _retry_after(headers):
    try:
        return float(headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None


def request(method, path, body=None, idempotent=True, deadline=None, attempt_timeout=None):
    """One call under the retry policy; returns the raw answer body.

    idempotent=False retries only what the service certainly did not
    apply (a refused connection, a 429). deadline and attempt_timeout
    default to timeouts().
    """
    if deadline is None or attempt_timeout is None:
        at, dl = timeouts()
        deadline = dl if deadline is None else deadline
        attempt_timeout = min(at, float(deadline)) if attempt_timeout is None else attempt_timeout
    deadline, attempt_timeout = float(deadline), float(attempt_timeout)
    end = time.monotonic() + deadline
    data = None if body is None else json.dumps(body).encode()
    headers = {}
    if data is not None:
        headers["Content-Type"] = "application/json"
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    attempt = 0
    while True:
        attempt += 1
        left = end - time.monotonic()
        if left <= 0:
            raise LM2LMError(method, path, None, "deadline", "no attempt left in the %.0f s deadline" % deadline,
                             attempt - 1)
        req = urllib.request.Request(URL + path, data=data, headers=headers, method=method)
        status, code, msg, retry_after, retryable = None, "", "", None, False
        try:
            with urllib.request.urlopen(req, timeout=max(0.001, min(attempt_timeout, left))) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            status = e.code
            code, msg = _error_of(e.read())
            retry_after = _retry_after(e.headers)
            retryable = status in RETRY_STATUS and (idempotent or status == 429)
            code = code or "http_%d" % status
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            refused = isinstance(reason, ConnectionRefusedError)
            timed_out = isinstance(reason, (socket.timeout, TimeoutError))
            code = "timeout" if timed_out else "transport"
            msg = "%s: %s" % (type(reason).__name__, reason)
            retryable = idempotent or refused
        if not retryable:
            raise LM2LMError(method, path, status, code, msg, attempt)
        wait = _backoff(attempt - 1, retry_after)
        if time.monotonic() + wait >= end:
            raise LM2LMError(method, path, status, code, msg + "; the %.0f s deadline is spent" % deadline, attempt)
        time.sleep(wait)


def post(path, body, idempotent=True, deadline=None):
    """POST a JSON body under the retry policy and return the decoded answer."""
    return json.loads(request("POST", path, body, idempotent=idempotent, deadline=deadline))


def get(path, deadline=None):
    """GET a JSON answer under the retry policy."""
    return json.loads(request("GET", path, deadline=deadline))


def text(completion):
    """A completion as text: a string, or a chat completion's last message."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def score_samples(samples, step, request_id=None):
    """Score samples of any granularity; return the service's answer per sample.

    samples: dicts with "group" (the trainer's name for the group, unique
    within the step), "state_id", "group_size" (G), "completion" and,
    for safe retries, "index" (0..G-1). The call returns once every group
    it touches is scored (complete, or at the service's group deadline).
    Each answer holds "reward" (None when "failure_reason" says the world
    model failed or the sample came late: drop it, do not learn from it),
    "advantage", "valid", "mechanism", "gain", "tau", "kept", "partial",
    "received" and "group_size".
    """
    body = {"step": int(step), "samples": [dict(s, completion=text(s["completion"])) for s in samples]}
    if request_id is not None:
        body["request_id"] = request_id
    safe = request_id is not None or all(s.get("index") is not None for s in samples)
    return post("/v1/score", body, idempotent=safe)["samples"]


def score_group(state_id, group, completions, step):
    """Score one whole named group; return the service's answer per completion."""
    body = {"step": int(step), "groups": [{"state_id": state_id, "group": group,
                                           "completions": [text(c) for c in completions]}]}
    return post("/v1/score", body)["groups"][0]["samples"]


def unusable(answer):
    """Why a sample's answer must not be trained on, or "" when it may.

    A failed group (no reward) and a partial one (scored at its deadline
    on the samples that had arrived: its rewards and advantages were shaped
    over a smaller group than the trainer holds) are both unusable; the
    adapters drop, refill or fail the whole group, as their framework
    allows.
    """
    if answer.get("reward") is None:
        return answer.get("failure_reason") or "no reward"
    if answer.get("partial"):
        return "partial: scored at the group deadline on %d of %d samples" % (
            int(answer.get("received", 0)), int(answer.get("group_size", 0)))
    return ""


def advance(step):
    """Tell the service the trainer's step; return every calibration's status."""
    return post("/v1/advance", {"step": int(step)})["calibrations"]


def calibrations():
    """Every calibration point started so far, with its state."""
    return get("/v1/calibrations")["calibrations"]


def wait_calibrations(poll=0.2):
    """Wait while a calibration point's runs go; return every point's status.

    A trainer that wants the paper's synchronous loop calls it after
    advancing, so that the next step is scored under the new records.
    """
    while True:
        cals = calibrations()
        if not any(c["state"] == "running" for c in cals):
            return cals
        time.sleep(poll)


def health():
    """The service's capacity: in-flight requests and their bound, and more."""
    return get("/v1/health")


_floor = None
_floor_lock = threading.Lock()


def step_floor():
    """The service's step when this process first asked (read once)."""
    global _floor
    with _floor_lock:
        if _floor is None:
            _floor = int(get("/v1/info")["step"])
        return _floor


def set_step_floor(step):
    """Set the floor (a trainer whose processes share one, read by one of them)."""
    global _floor
    with _floor_lock:
        _floor = int(step)


def at_step(step):
    """The service step of a trainer's step: max(step, step_floor())."""
    return max(int(step), step_floor())


RUN = (os.environ.get("LM2LM_RUN", "") + uuid.uuid4().hex[:12])


def run_id():
    """This process's run identity: LM2LM_RUN (when set) and a fresh id."""
    return RUN
