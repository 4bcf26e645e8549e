#!/usr/bin/env bash
# Install Slurm and munge for the Slurm end-to-end tests (tests/test_slurm_e2e.py).
#
#   bash .ci/slurm-setup.sh            install slurm-wlm + munge if missing (root, Debian/Ubuntu)
#   bash .ci/slurm-setup.sh --check    also start a private 4-node test cluster and stop it
#
# Idempotent. The tests start their own private munged, slurmctld and slurmds
# (temporary directory, random non-default ports, own munge key and socket) and
# stop them afterwards; nothing here configures or starts a system-wide Slurm.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

missing=()
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged; do
    [ -x "$b" ] || missing+=("$b")
done
for c in sbatch squeue sinfo scontrol scancel munge unmunge; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "slurm-setup: installing slurm-wlm and munge (missing: ${missing[*]})"
    if [ "$(id -u)" != 0 ]; then
        echo "slurm-setup: must run as root to install packages" >&2
        exit 1
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "slurm-setup: apt-get not found; install slurm-wlm and munge by hand" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurm-wlm munge >/dev/null
fi
echo "slurm-setup: $(slurmctld -V), $(munge --version 2>&1 | head -1)"

if [ "${1:-}" = "--check" ]; then
    dir="$(mktemp -d /tmp/slurm-check.XXXXXX)"
    trap 'python3 "$here/tests/slurm_cluster.py" stop "$dir" || true; rm -rf "$dir"' EXIT
    python3 "$here/tests/slurm_cluster.py" start "$dir"
    SLURM_CONF="$dir/etc/slurm.conf" sinfo -N
    echo "slurm-setup: test cluster started and answered; stopping it"
fi
