export PYTHONUNBUFFERED=1   # rank 0's "epoch ..." progress lines reach the log as they happen
RESTARTS=${SLURM_RESTART_COUNT:-0}
say() { echo "slaq.sbatch: $(date '+%F %T') job ${SLURM_JOB_ID:-?} restart $RESTARTS: $*"; }

# A warning signal (USR1), preemption or scancel (TERM): ask rank 0 for a graceful stop by
# creating RUN_DIR/STOP, once the run owns RUN_DIR (state.json written): a fresh start moves an
# old RUN_DIR aside, so a STOP file made too early would be lost; until then a watcher waits.
caught=0
stop_requested=0
step=
ask_rank0_to_stop() {
    if [ -f "$RUN_DIR/state.json" ]; then
        touch "$RUN_DIR/STOP"
    elif [ -n "$step" ]; then
        ( while kill -0 "$step" 2>/dev/null; do
              if [ -f "$RUN_DIR/state.json" ]; then touch "$RUN_DIR/STOP"; exit 0; fi
              sleep 1
          done ) &
    fi
}
request_stop() {
    caught=1
    say "got SIG$1: asking for a graceful stop"
    [ "$stop_requested" = 1 ] || ask_rank0_to_stop
    stop_requested=1
    [ -n "$step" ] && kill -USR1 "$step" 2>/dev/null   # the supervisor: no resume after this
}
trap 'request_stop USR1' USR1
trap 'request_stop TERM' TERM

# A leftover STOP file (from a signal that came after the stop) would stop this start at once.
rm -f "$RUN_DIR/STOP"
if [ -f "$RUN_DIR/state.json" ]; then
    say "resuming $RUN_DIR"
    ARGS=(run --resume "$RUN_DIR")
else
    say "starting $CONFIG into $RUN_DIR"
    ARGS=(run "$CONFIG")
fi

# The step runs in the background under its supervisor (slaq_mpi/slurm/supervise.py: it ends a
# step stuck after its rank 0 ended, and resumes the run without the nodes that were lost), so
# the traps fire while this shell waits for it. Rank 0 writes its pid into the run's lock file
# (.NAME.lock beside RUN_DIR) as it starts: if the lock file still says what it said before the
# launch, no rank 0 ever ran (the launch failed).
lock_text() {
    local d; d=$(readlink -f "$RUN_DIR")
    cat "$(dirname "$d")/.$(basename "$d").lock" 2>/dev/null
}
say "MPI: $MPI_LIB; launcher: ${LAUNCH[*]}"
lock_before=$(lock_text)
"$PYTHON" "$SLAQ_PKG/slurm/supervise.py" --run-dir "$RUN_DIR" --launcher "$LAUNCHER" -- \
    "${LAUNCH[@]}" "$PYTHON" "$SLAQ_PKG/__main__.py" "${ARGS[@]}" &
step=$!
[ "$stop_requested" = 1 ] && ask_rank0_to_stop   # a signal that came before the launch
while :; do
    caught=0
    wait "$step"
    status=$?
    # wait returns early (status > 128) when a trapped signal arrives: keep waiting.
    [ "$caught" = 1 ] && [ "$status" -gt 128 ] && continue
    break
done
trap - USR1 TERM

if [ "$status" != 2 ] && [ "$status" != 75 ] && [ "$stop_requested" = 0 ] &&
        [ "$(lock_text)" = "$lock_before" ]; then
    say "the MPI launch failed before the run started (status $status, its message is above):" \
        "$LAUNCH_ADVICE (docs/slurm.md)"
    exit 3
fi
case $status in
    0) say "every job done" ;;
    1) say "finished; at least one job failed (see the log and $RUN_DIR/metrics.h5)" ;;
    75)
        # A stop asked inside the run (RUN_DIR/STOP, a signal to rank 0 itself) with no signal
        # to this script: the user's "stop for a later resume", not requeued.
        if [ "$stop_requested" = 0 ]; then
            say "stopped with checkpoints on request (RUN_DIR/STOP or a signal to rank 0)," \
                "not requeued; resume with: slaq run --resume $RUN_DIR (or submit again)"
            exit "$status"
        fi
        # scancel sends TERM too. A job ending with no reason of Slurm's own (not the time
        # limit) was cancelled by its owner or an admin: this script does not requeue it.
        info=$(scontrol show job "$SLURM_JOB_ID" -o 2>/dev/null)
        state=$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$info")
        reason=$(sed -n 's/.* Reason=\([^ ]*\).*/\1/p' <<< "$info")
        if { [ "$state" = COMPLETING ] || [ "$state" = CANCELLED ]; } && [ "$reason" = None ]; then
            say "ended by Slurm (scancel, or scontrol requeue, which restarts it): stopped with" \
                "checkpoints; after a scancel, resume with: slaq run --resume $RUN_DIR (or submit again)"
            exit "$status"
        fi
        if [ "$REQUEUE" = 1 ] && [ "$RESTARTS" -lt "$MAX_RESTARTS" ]; then
            say "stopped with checkpoints; requeueing"
            rm -f "$RUN_DIR/STOP"
            if scontrol requeue "$SLURM_JOB_ID"; then
                exit 0
            fi
            say "scontrol requeue failed"
        fi
        say "stopped with checkpoints; resume with: slaq run --resume $RUN_DIR (or submit again)" ;;
    2) say "bad input or run directory in use (the error is above); nothing was run" ;;
    *) say "slaq run exited with status $status; after a crash: slaq run --resume $RUN_DIR" ;;
esac
exit "$status"
