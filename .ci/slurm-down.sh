#!/usr/bin/env bash
# slurm-down.sh: stop the daemons started by .ci/slurm-up.sh, by the PIDs in
# their pid files (never by name).
set -uo pipefail
for pf in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
	if [ -s "$pf" ]; then
		pid=$(cat "$pf")
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid"
			for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		fi
		rm -f "$pf"
	fi
done
