#!/bin/bash
# ci-slurm.sh - make the Slurm test tier runnable in CI: install Debian's Slurm and munge, then
# start a single-node cluster on localhost with scripts/local-slurm.sh (idempotent).
#
# Called by .ci/run before pytest; a step that fails ends it with a line naming the step (under CI
# the Slurm tier then fails too: tests/test_slurm_live.py). libpmix is deliberately NOT installed: PMIx aborts pip's
# mpich, which runs under `srun --mpi=pmi2` instead.
set -euo pipefail
trap 'echo "ci-slurm: FAILED at: $BASH_COMMAND (exit status $?); the Slurm tier cannot run" >&2' ERR
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    echo "ci-slurm: installing slurmctld slurmd slurm-client munge"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
fi
bash "$here/local-slurm.sh" start
sinfo
