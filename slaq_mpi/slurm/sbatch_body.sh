export PYTHONUNBUFFERED=1   # rank 0's "epoch ..." progress lines reach the log as they happen
say() { echo "slaq.sbatch: $(date '+%F %T') job ${SLURM_JOB_ID:-?} restart ${SLURM_RESTART_COUNT:-0}: $*"; }

# The step supervisor (slaq_mpi/slurm/supervise.py) takes this process over: it starts the run
# (or resumes it: RUN_DIR/state.json exists), turns a warning signal (USR1), preemption or
# scancel (TERM) into RUN_DIR/STOP for a graceful stop, resumes the run without the nodes lost,
# and decides on the requeue. A signal before then is remembered here and passed on; one that
# comes while the supervisor starts is ignored (a moment: it sets its own handlers first).
STOP_ASKED=
trap 'STOP_ASKED=USR1' USR1
trap 'STOP_ASKED=TERM' TERM
# MPICH's UCX netmod hands PMI a 4096-byte block per node for its address of about a hundred
# bytes (the rest: whatever memory follows the address). Hex-encoded, a piece of it can make a
# PMI-1 line longer than the 1024 bytes srun's pmi2 plugin reads at once; the line is then cut
# in two and every rank waits in MPI_Init until the time limit. MPICH's OFI netmod hands PMI its
# address alone: use it under srun's pmi2 when this MPICH has it, unless the environment
# already chose a netmod.
NETMOD_SAID=
if [[ $MPI_LIB == *MPICH* && " ${LAUNCH[*]} " == *" --mpi=pmi2 "* && -z ${MPIR_CVAR_CH4_NETMOD:-} ]] &&
    "$PYTHON" -c 'import mpi4py, sys; mpi4py.rc.initialize = False; from mpi4py import MPI
sys.exit(not any(l.startswith("MPICH Device:") and "ofi" in l for l in MPI.Get_library_version().splitlines()))' \
    2>/dev/null; then
    export MPIR_CVAR_CH4_NETMOD=ofi
    NETMOD_SAID="; MPIR_CVAR_CH4_NETMOD=ofi"
fi
say "MPI: $MPI_LIB; launcher: ${LAUNCH[*]}$NETMOD_SAID"
trap '' USR1 TERM
exec "$PYTHON" "$SLAQ_PKG/slurm/supervise.py" --run-dir "$RUN_DIR" --config "$CONFIG" \
    --launcher "$LAUNCHER" --requeue "$REQUEUE" --max-restarts "$MAX_RESTARTS" \
    --advice "$LAUNCH_ADVICE" ${STOP_ASKED:+--stop-asked "$STOP_ASKED"} -- \
    "${LAUNCH[@]}" "$PYTHON" "$SLAQ_PKG/__main__.py"
