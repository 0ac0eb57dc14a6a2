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
say "MPI: $MPI_LIB; launcher: ${LAUNCH[*]}"
trap '' USR1 TERM
exec "$PYTHON" "$SLAQ_PKG/slurm/supervise.py" --run-dir "$RUN_DIR" --config "$CONFIG" \
    --launcher "$LAUNCHER" --requeue "$REQUEUE" --max-restarts "$MAX_RESTARTS" \
    --advice "$LAUNCH_ADVICE" ${STOP_ASKED:+--stop-asked "$STOP_ASKED"} -- \
    "${LAUNCH[@]}" "$PYTHON" "$SLAQ_PKG/__main__.py"
