#!/usr/bin/env bash
# setup.sh: install and start everything `go test ./...` needs on a fresh
# Debian machine that has only Go and Debian's package mirror:
#   - Debian's python3-sklearn (the code-solution grader's tasks and reference
#     solutions), python3-torch and python3-numpy (examples/pytorch and the
#     PyTorch cross-checks; the tests run Debian's /usr/bin/python3);
#   - munge and a one-node Slurm cluster (.ci/slurm-up.sh) for builder/slurm.
# Idempotent: packages already installed are not fetched again and a cluster
# that answers is left as it is. Needs root (re-runs itself with sudo -n when
# not root). The README's test command is `bash .ci/setup.sh && go test ./...`.
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
	if command -v sudo >/dev/null 2>&1; then
		exec sudo -n bash "$0" "$@"
	fi
	log "must run as root (or with passwordless sudo)"; exit 1
fi

want=(python3-sklearn python3-torch python3-numpy)
missing=()
for p in "${want[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
/usr/bin/python3 -c 'import sklearn, torch, numpy; print("setup: python3", "sklearn", sklearn.__version__, "torch", torch.__version__, "numpy", numpy.__version__)' >&2

bash "$(dirname "$0")/slurm-up.sh"
