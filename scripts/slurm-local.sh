#!/usr/bin/env bash
# A single-node SLURM cluster on this machine for tests and development (root, no systemd).
#
#   scripts/slurm-local.sh up       install packages if missing, write config, start munge/slurmctld/slurmd
#   scripts/slurm-local.sh status   show daemons and `sinfo`
#   scripts/slurm-local.sh down     stop the daemons by their pid files (never by name)
#
# Idempotent: `up` when it is already up only checks it. The configuration is the one of
# shared/docs/infra.md §1.2, tuned for fast requeue (AuthInfo=cred_expire=10, sched/bf interval 5 s).
# Accounting (slurmdbd + MariaDB, for `sacct`) is off by default; SLURM_LOCAL_ACCOUNTING=1 turns it on.
# `trainstack status` does not need it: it reads squeue, `scontrol show job` and the jobcomp log.
set -euo pipefail

ETC=/etc/slurm
RUN=/run/slurm
LOG=/var/log/slurm
ACCOUNTING=${SLURM_LOCAL_ACCOUNTING:-0}
PKGS=(slurm-wlm slurmctld slurmd slurm-client munge)
[[ $ACCOUNTING == 1 ]] && PKGS+=(slurmdbd mariadb-server)

say() { echo "slurm-local: $*" >&2; }
die() { say "error: $*"; exit 1; }

alive() {  # alive PIDFILE: the pid in it is a live (non-zombie) process
  local f=$1 pid state
  [[ -s $f ]] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1  # a daemon that is exiting removes its pid file: not alive
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  [[ -r /proc/$pid/status ]] || return 1
  state=$(awk '/^State:/{print $2}' "/proc/$pid/status")
  [[ $state != Z ]]
}

stop_pidfile() {  # stop_pidfile NAME PIDFILE
  local name=$1 f=$2 pid i
  if ! alive "$f"; then rm -f "$f"; return 0; fi
  pid=$(cat "$f" 2>/dev/null) || return 0  # gone between the two reads: stopped already
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do alive "$f" || break; sleep 0.1; done
  if alive "$f"; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  rm -f "$f"
  say "stopped $name (pid $pid)"
}

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (it installs packages and starts daemons)"; }

install_packages() {
  local missing=() p
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  }
}

write_config() {
  local cpus mem_kb mem_mb acct
  cpus=$(nproc)
  mem_kb=$(awk '/^MemTotal:/{print $2}' /proc/meminfo)
  mem_mb=$(( mem_kb / 1024 - 2048 ))
  if [[ $ACCOUNTING == 1 ]]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30"
  else
    acct="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
  fi
  mkdir -p "$ETC" /var/spool/slurmctld /var/spool/slurmd "$LOG" "$RUN"
  cat > "$ETC/slurm.conf.new" <<CONF
# Written by trainstack scripts/slurm-local.sh: one node (this machine), tuned requeue.
ClusterName=localcluster
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=10
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5
SlurmctldParameters=preempt_send_user_signal
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
MinJobAge=600
Waittime=0
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.log
$acct
NodeName=localhost NodeHostname=localhost CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
  if ! cmp -s "$ETC/slurm.conf.new" "$ETC/slurm.conf" 2>/dev/null; then
    mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"
    CONFIG_CHANGED=1
  else
    rm -f "$ETC/slurm.conf.new"
  fi
  if [[ $ACCOUNTING != 1 ]]; then
    rm -f "$ETC/slurmdbd.conf"
  else
    install -m 600 /dev/null "$ETC/slurmdbd.conf"
    cat > "$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
  fi
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
  install -d -o munge -g munge -m 755 /run/munge
  [[ -s /etc/munge/munge.key ]] || { /usr/sbin/mungekey --create 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
  local i; for i in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "munged did not start"
}

start_accounting() {
  [[ $ACCOUNTING == 1 ]] || return 0
  if ! mysqladmin ping >/dev/null 2>&1; then
    install -d -o mysql -g mysql /run/mysqld
    (setsid mysqld_safe --skip-syslog >/dev/null 2>&1 &)
    local i; for i in $(seq 1 100); do mysqladmin ping >/dev/null 2>&1 && break; sleep 0.2; done
    mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
  fi
  alive "$RUN/slurmdbd.pid" || /usr/sbin/slurmdbd
  local i; for i in $(seq 1 50); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.2; done
  sacctmgr -n -P list cluster format=cluster | grep -qx localcluster || sacctmgr -i add cluster localcluster >/dev/null
}

wait_idle() {
  local i state
  for i in $(seq 1 150); do
    state=$(sinfo -h -o %T 2>/dev/null | head -1 || true)
    case $state in idle|mixed|allocated|completing) return 0;; esac
    if [[ $state == down* || $state == drain* ]] && (( i % 10 == 0 )); then
      scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true
    fi
    sleep 0.2
  done
  die "node not idle after 30 s (state: ${state:-none}); see $LOG/slurmctld.log and $LOG/slurmd.log"
}

cmd_up() {
  need_root
  local t0=$SECONDS
  CONFIG_CHANGED=0
  install_packages
  write_config
  start_munge
  start_accounting
  if [[ $CONFIG_CHANGED == 1 ]] && alive "$RUN/slurmctld.pid"; then
    say "configuration changed: restarting the daemons"
    stop_pidfile slurmd "$RUN/slurmd.pid"; stop_pidfile slurmctld "$RUN/slurmctld.pid"
  fi
  alive "$RUN/slurmctld.pid" || /usr/sbin/slurmctld
  alive "$RUN/slurmd.pid" || /usr/sbin/slurmd -N localhost
  wait_idle
  say "up in $((SECONDS - t0)) s: $(sinfo -h -o '%P %D %T %c CPUs %m MB' | head -1)"
}

cmd_down() {
  need_root
  stop_pidfile slurmd "$RUN/slurmd.pid"
  stop_pidfile slurmctld "$RUN/slurmctld.pid"
  stop_pidfile slurmdbd "$RUN/slurmdbd.pid"
  # MariaDB only when this script set it up for accounting (slurmdbd.conf written by `up`)
  if [[ -e $ETC/slurmdbd.conf ]] && command -v mysqladmin >/dev/null && mysqladmin ping >/dev/null 2>&1; then
    mysqladmin shutdown && say "stopped mariadb (mysqladmin shutdown)" || true
  fi
  stop_pidfile munged /run/munge/munged.pid
}

cmd_status() {
  local f rc=0
  for f in /run/munge/munged.pid "$RUN/slurmctld.pid" "$RUN/slurmd.pid" "$RUN/slurmdbd.pid"; do
    if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(<"$f"))"; else echo "$(basename "$f" .pid): stopped"; fi
  done
  if alive "$RUN/slurmctld.pid" && command -v sinfo >/dev/null; then sinfo; else rc=1; fi
  return $rc
}

case ${1:-} in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
