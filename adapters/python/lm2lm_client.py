"""Minimal client of the lm2lm environment service (standard library only).

Environment: LM2LM_URL (default http://127.0.0.1:8080) and LM2LM_TOKEN
(the bearer token, when the service has one).
"""
import json
import os
import time
import urllib.error
import urllib.request

URL = os.environ.get("LM2LM_URL", "http://127.0.0.1:8080")
TOKEN = os.environ.get("LM2LM_TOKEN", "")


def post(path, body, retries=5):
    """POST a JSON body and return the decoded answer.

    A 503 (busy) or a connection error is retried with the same body, which
    the service answers from its first result (nothing is scored twice).
    """
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    for attempt in range(retries):
        req = urllib.request.Request(URL + path, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == retries - 1:
                raise RuntimeError("lm2lm %s: %d %s" % (path, e.code, e.read()[:500])) from None
        except urllib.error.URLError:
            if attempt == retries - 1:
                raise
        time.sleep(2 ** attempt)


def get(path):
    """GET a JSON answer."""
    headers = {}
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    req = urllib.request.Request(URL + path, headers=headers)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


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
    return post("/v1/score", body)["samples"]


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
