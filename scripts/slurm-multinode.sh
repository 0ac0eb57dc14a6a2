#!/bin/bash
# slurm-multinode.sh - an emulated multi-node Slurm cluster on one machine, for slaq-mpi's
# multi-node test tier (pytest -m multinode).
#
# Usage: scripts/slurm-multinode.sh start|stop|status|kill-node NAME|env
#
#   start      install Debian's slurmctld/slurmd/slurm-client/munge if missing, write the
#              cluster's slurm.conf, start munged, one slurmctld and one slurmd per node, and
#              wait until every node is idle. Idempotent: daemons already running are kept.
#   stop       kill every process of every node (slurmd, job steps, ranks) and slurmctld.
#   status     sinfo of this cluster.
#   kill-node  kill every process of node NAME at once (its slurmd and everything it started):
#              what a crashed node looks like to the rest of an allocation.
#   env        print the SLURM_CONF=... line that points Slurm's commands at this cluster.
#
# Each node is one slurmd in its own UTS namespace (`unshare --uts`), so `hostname` differs per
# node (n1, n2, ...) and the job steps and MPI ranks it starts inherit that hostname. All nodes
# listen on 127.0.0.1, one port per node. The cluster has its own slurm.conf, ports and state
# directory, so it runs beside scripts/local-slurm.sh's single-node cluster: point Slurm's
# commands at it with SLURM_CONF (`eval "$(scripts/slurm-multinode.sh env)"`).
#
# Environment:
#   SLAQ_MN_DIR    state, spool, pid, log directory and slurm.conf   (default /tmp/slaq-multinode)
#   SLAQ_MN_NODES  number of nodes                                    (default 3)
#   SLAQ_MN_CPUS   CPUs each node declares (may exceed real cores)    (default 4)
#
# Needs root, no systemd and no cgroups (proctrack/linuxproc, task/none). MpiDefault=pmi2: pip's
# mpich runs under srun --mpi=pmi2 (PMIx aborts it; libpmix is deliberately not installed).
set -euo pipefail

DIR=${SLAQ_MN_DIR:-/tmp/slaq-multinode}
NODES=${SLAQ_MN_NODES:-3}
CPUS=${SLAQ_MN_CPUS:-4}
CTL_PORT=${SLAQ_MN_PORT:-6917}
CONF=$DIR/slurm.conf
CTL=$(hostname -s)
export SLURM_CONF=$CONF

log() { echo "slurm-multinode: $*" >&2; }

running() {  # running PIDFILE: the process named in PIDFILE is alive
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

node_pids() {  # node_pids NAME: every pid in the UTS namespace of node NAME's slurmd
  local pidfile=$DIR/state/slurmd-$1.pid ns p
  running "$pidfile" || return 0
  ns=$(readlink "/proc/$(cat "$pidfile")/ns/uts" 2>/dev/null) || return 0
  [[ $ns == "$(readlink /proc/self/ns/uts)" ]] && return 0   # never this shell's own namespace
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/uts" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
  done
  return 0
}

install_packages() {
  local cmd
  for cmd in slurmctld slurmd sbatch munged unshare; do
    command -v "$cmd" >/dev/null && continue
    log "installing slurmctld slurmd slurm-client munge"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      slurmctld slurmd slurm-client munge >/dev/null
    return 0
  done
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
  munge -n </dev/null >/dev/null 2>&1 || running /run/munge/munged.pid \
    || runuser -u munge -- /usr/sbin/munged
  local _
  for _ in $(seq 50); do
    munge -n </dev/null >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  log "munged does not answer"
  return 1
}

write_conf() {
  local i
  mkdir -p "$DIR/state/ctld" "$DIR/log"
  for i in $(seq "$NODES"); do mkdir -p "$DIR/state/spool-n$i"; done
  {
    cat <<CONF
# Written by slaq-mpi scripts/slurm-multinode.sh: $NODES emulated nodes on 127.0.0.1, for tests.
ClusterName=slaqmulti
SlurmctldHost=$CTL(127.0.0.1)
SlurmctldPort=$CTL_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/state/ctld
SlurmdSpoolDir=$DIR/state/spool-%n
SlurmctldPidFile=$DIR/state/slurmctld.pid
SlurmdPidFile=$DIR/state/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
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
SlurmdTimeout=300
MinJobAge=300
KillWait=5
SlurmdParameters=config_overrides
CONF
    for i in $(seq "$NODES"); do
      echo "NodeName=n$i NodeAddr=127.0.0.1 Port=$((17000 + i)) CPUs=$CPUS RealMemory=4000 State=UNKNOWN"
    done
    echo "PartitionName=emu Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } > "$CONF.new"
  mv "$CONF.new" "$CONF"
}

idle_nodes() {
  sinfo -h -o '%T %D' 2>/dev/null | awk '$1 ~ /^idle/ {s += $2} END {print s + 0}'
}

start() {
  install_packages
  local i pidfile fresh=0
  getent hosts "$CTL" >/dev/null || echo "127.0.0.1 $CTL" >> /etc/hosts
  for i in $(seq "$NODES"); do
    grep -qE "[[:space:]]n$i([[:space:]]|\$)" /etc/hosts || echo "127.0.0.1 n$i" >> /etc/hosts
  done
  start_munge
  write_conf
  if ! running "$DIR/state/slurmctld.pid"; then
    slurmctld -i -c   # -c: a fresh cluster, no jobs recovered from an earlier start
    fresh=1
  fi
  for i in $(seq "$NODES"); do
    pidfile=$DIR/state/slurmd-n$i.pid
    running "$pidfile" && continue
    # slurmd finds its NodeName by its hostname; SLURM_CONF comes with the environment
    unshare --uts bash -c "hostname n$i; exec slurmd"
  done
  local t
  for t in $(seq 240); do
    if [[ $(idle_nodes) == "$NODES" ]]; then
      log "up: $NODES nodes idle after $((t / 4)) s (SLURM_CONF=$CONF)"
      return 0
    fi
    sinfo -h -o '%T %N' 2>/dev/null | awk '$1 ~ /down|drain|fail/ {print $2}' | while read -r nl; do
      scontrol update NodeName="$nl" State=RESUME 2>/dev/null || true
    done
    sleep 0.25
  done
  [[ $fresh == 1 ]] || log "(slurmctld was already running; a node still busy with a job is not idle)"
  sinfo >&2 || true
  log "the cluster did not come up; logs are in $DIR/log"
  return 1
}

stop() {
  local i p pid _
  for i in $(seq "$NODES"); do
    p=$(node_pids "n$i")
    [[ -n $p ]] && kill -9 $p 2>/dev/null || true
  done
  if running "$DIR/state/slurmctld.pid"; then
    pid=$(cat "$DIR/state/slurmctld.pid")
    kill "$pid"
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  fi
  rm -f "$DIR"/state/*.pid
  log "stopped"
}

kill_node() {
  local name=${1:?"usage: $0 kill-node NAME"} p
  p=$(node_pids "$name")
  if [[ -z $p ]]; then
    log "node $name has no running slurmd"
    return 1
  fi
  kill -9 $p 2>/dev/null || true
  echo "killed node $name: $(echo $p)"
}

case ${1:-start} in
  start) start ;;
  stop) stop ;;
  status) sinfo ;;
  kill-node) kill_node "${2:-}" ;;
  env) echo "SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|kill-node NAME|env" >&2; exit 2 ;;
esac
