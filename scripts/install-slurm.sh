#!/bin/sh
# Install the Slurm daemons and clients used by the real-Slurm test bed
# (tests/testbeds/slurm.py). Idempotent: does nothing when slurmctld exists.
set -eu

PKGS="slurmctld slurmd slurm-client munge"

if command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 \
    && command -v sbatch >/dev/null 2>&1; then
    echo "slurm already installed: $(slurmctld -V 2>/dev/null || echo unknown version)"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi

export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
if ! $SUDO apt-get install -y --no-install-recommends $PKGS; then
    echo "apt-get install failed; refreshing package lists and retrying" >&2
    $SUDO apt-get update
    # shellcheck disable=SC2086
    $SUDO apt-get install -y --no-install-recommends $PKGS
fi

# The Debian packages start their own services on install when an init system
# runs; the test bed starts its own daemons with its own config, so stop them.
for svc in slurmctld slurmd; do
    if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
        $SUDO systemctl stop "$svc" || true
    fi
done

echo "installed: $(slurmctld -V)"
