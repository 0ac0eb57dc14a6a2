#!/bin/bash
# local-slurm.sh - a single-node Slurm cluster on localhost for slaq-mpi's Slurm test tier.
#
# Usage: scripts/local-slurm.sh [start|stop|status|restart]
#
#   start    install Debian's slurmctld/slurmd/slurm-client/munge if missing, write
#            /etc/slurm/slurm.conf, start munged, slurmctld and slurmd, wait until the node is idle.
#            Idempotent: running it again on a live cluster changes nothing (or reconfigures it
#            if the generated slurm.conf changed).
#   stop     stop the three daemons started by `start` (by their pid files).
#   status   print the node state as sinfo reports it (empty if Slurm does not answer).
#
# Environment:
#   SLAQ_SLURM_DIR   state, spool, pid and log directory        (default /tmp/slaq-slurm)
#   SLAQ_SLURM_CPUS  CPUs the node declares (may exceed the real cores)  (default 8)
#
# Needs root, no systemd and no cgroups (proctrack/linuxproc, task/none). MpiDefault=pmi2 because
# pip's mpich works with srun --mpi=pmi2; PMIx aborts it, so libpmix is deliberately not installed.
set -euo pipefail

DIR=${SLAQ_SLURM_DIR:-/tmp/slaq-slurm}
CPUS=${SLAQ_SLURM_CPUS:-8}
HOST=$(hostname -s)
CONF=/etc/slurm/slurm.conf
PKGS=(slurmctld slurmd slurm-client munge)

log() { echo "local-slurm: $*" >&2; }

running() {  # running PIDFILE: the process named in PIDFILE is alive
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true; }

install_packages() {
  local missing=0 cmd
  for cmd in slurmctld slurmd sbatch munged; do
    command -v "$cmd" >/dev/null || missing=1
  done
  [[ $missing == 0 ]] && return 0
  log "installing ${PKGS[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
}

start_munge() {
  if [[ ! -s /etc/munge/munge.key ]]; then
    mkdir -p /etc/munge
    head -c 1024 /dev/urandom > /etc/munge/munge.key
  fi
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
  chmod 700 /etc/munge
  chmod 400 /etc/munge/munge.key
  chmod 755 /run/munge
  running /run/munge/munged.pid || runuser -u munge -- /usr/sbin/munged
  local _
  for _ in $(seq 50); do
    munge -n </dev/null >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  log "munged does not answer"
  return 1
}

write_conf() {  # prints 1 if slurm.conf changed, else 0
  mkdir -p /etc/slurm "$DIR/ctld" "$DIR/spool" "$DIR/log"
  local new=$CONF.slaq-new
  cat > "$new" <<CONF
# Written by slaq-mpi scripts/local-slurm.sh: one node on localhost, for tests.
ClusterName=slaqlocal
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Short credential lifetime: a requeued job may start again after ~12 s instead of minutes.
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=pmi2
ReturnToService=2
MinJobAge=300
KillWait=5
SlurmdParameters=config_overrides
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  if cmp -s "$new" "$CONF"; then
    rm -f "$new"
    echo 0
  else
    mv "$new" "$CONF"
    echo 1
  fi
}

start() {
  install_packages
  # slurmd finds its NodeName through `hostname -s`, and Hydra resolves it too.
  getent hosts "$HOST" >/dev/null || echo "127.0.0.1 $HOST" >> /etc/hosts
  start_munge
  local changed
  changed=$(write_conf)
  if running "$DIR/slurmctld.pid"; then
    [[ $changed == 1 ]] && scontrol reconfigure
  else
    slurmctld -i
  fi
  running "$DIR/slurmd.pid" || slurmd
  local i state
  for i in $(seq 160); do
    state=$(node_state)
    case $state in
      idle*|mix*|alloc*|comp*)
        log "up: node $HOST is $state after $((i / 4)) s"
        return 0 ;;
      drain*|down*)
        scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.25
  done
  log "Slurm did not come up; logs are in $DIR/log"
  sinfo -R >&2 || true
  return 1
}

stop() {
  local f pid _
  for f in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" /run/munge/munged.pid; do
    if running "$f"; then
      pid=$(cat "$f")
      kill "$pid"
      for _ in $(seq 40); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
      done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$f"
  done
  log "stopped"
}

case ${1:-start} in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) node_state ;;
  *) echo "usage: $0 [start|stop|status|restart]" >&2; exit 2 ;;
esac
