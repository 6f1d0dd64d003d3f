#!/usr/bin/env bash
# A local fake of the Lium API (devtools/trainstack_dev/fakes/lium.py) for trying the Lium flow offline.
#
#   eval "$(scripts/lium-local.sh up)"   start it (installs openssh-server if missing); prints export lines
#                                        (LIUM_BASE_URL, LIUM_API_KEY, LIUM_SSH_KEY_PATH, ...) for the real
#                                        lium.io SDK/CLI and `python run.py cluster=lium_cpu ...`, and
#                                        TRAINSTACK_HOME: the commander a launch starts keeps its state there
#   scripts/lium-local.sh status          the URL, the pods it runs, the commander started for it
#   scripts/lium-local.sh down            stop it (and every pod) and that commander, by their pids, never by name
#   scripts/lium-local.sh install         only install what pods need (openssh-server); CI runs this
#
# Pods are loopback sshd servers in their own namespaces, so this needs root. State lives in
# $LIUM_LOCAL_ROOT (default /tmp/trainstack-lium-local-<uid>-<checkout hash>: one per user and checkout, so
# two at once on one machine never meet; every port is a free one). Idempotent: `up` when it is up prints
# the exports.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
ROOT=${LIUM_LOCAL_ROOT:-/tmp/trainstack-lium-local-$(id -u)-$(printf %s "$HERE" | cksum | cut -d' ' -f1)}
HOME_DIR=$ROOT/commander  # TRAINSTACK_HOME of the launches in the shell that evaluated `up`
PY=${PYTHON:-$HERE/.venv/bin/python}
[[ -x $PY ]] || PY=python3
INFO=$ROOT/fake.json
LOG=$ROOT/fake.log
PIDFILE=$ROOT/fake.pid

say() { echo "lium-local: $*" >&2; }
die() { say "error: $*"; exit 1; }

install_packages() {
  [[ -x /usr/sbin/sshd ]] && return 0
  [[ $(id -u) == 0 ]] || die "openssh-server is missing and installing it needs root"
  say "installing openssh-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends openssh-server >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends openssh-server >/dev/null
  }
}

alive() {
  local pid
  [[ -s $PIDFILE ]] || return 1
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/status ]] || return 1
  [[ $(awk '/^State:/{print $2}' "/proc/$pid/status") != Z ]]
}

exports() {
  "$PY" - "$INFO" "$HOME_DIR" <<'PY'
import json, shlex, sys
info = json.load(open(sys.argv[1]))
env = {"LIUM_BASE_URL": info["url"], "LIUM_API_KEY": info["api_key"], "LIUM_SSH_KEY_PATH": info["ssh_key"],
       "LIUM_TELEMETRY": "0", "LIUM_SSH_PERSIST": "0", "LIUM_NONINTERACTIVE": "1", "TRAINSTACK_HOME": sys.argv[2]}
print("\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items()))
PY
}

up() {
  install_packages
  [[ $(id -u) == 0 ]] || die "pods run in their own namespaces: run as root"
  mkdir -p "$ROOT"
  if alive && [[ -s $INFO ]]; then exports; return 0; fi
  rm -f "$INFO"
  # the fake lives in devtools/ (trainstack_dev, not installed); trainstack from the checkout too
  PYTHONPATH="$HERE:$HERE/devtools${PYTHONPATH:+:$PYTHONPATH}" setsid nohup "$PY" -m trainstack_dev.fakes.lium serve --root "$ROOT" >>"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 100); do
    [[ -s $INFO ]] && break
    alive || die "the fake exited; see $LOG"
    sleep 0.1
  done
  [[ -s $INFO ]] || die "the fake did not start within 10 s; see $LOG"
  say "fake Lium at $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' "$INFO") (log $LOG)"
  exports
}

stop_commander() {  # the commander a launch started for this fake (it would poll a Lium that is gone)
  [[ -s $HOME_DIR/commander.pid ]] || return 0
  TRAINSTACK_HOME=$HOME_DIR PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m trainstack commander stop || true
}

down() {
  local pid
  stop_commander
  if ! alive; then rm -f "$PIDFILE" "$INFO"; say "not running"; return 0; fi
  pid=$(cat "$PIDFILE")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do alive || break; sleep 0.1; done
  if alive; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -f "$PIDFILE" "$INFO"
  say "stopped (pid $pid)"
}

status() {
  if alive && [[ -s $INFO ]]; then
    "$PY" - "$INFO" "$HOME_DIR" <<'PY'
import json, os, sys, urllib.request
info = json.load(open(sys.argv[1]))
req = urllib.request.Request(info["url"] + "/_fake/state", headers={"X-API-KEY": info["api_key"]})
state = json.load(urllib.request.urlopen(req, timeout=5))
print(f"fake Lium at {info['url']}: {len(state['pods'])} pod(s), {len(state['volumes'])} volume(s)")
for p in state["pods"]:
    print(f"  {p['id']}  {p['pod_name']}  {p['status']}  port {p['port']}")
try:
    cmd = json.load(open(os.path.join(sys.argv[2], "commander.json")))
    os.kill(cmd["pid"], 0)
    print(f"commander at {cmd['url']} (pid {cmd['pid']}, state in {sys.argv[2]})")
except (OSError, ValueError, KeyError):
    print(f"no commander started for it yet (a launch starts one, state in {sys.argv[2]})")
PY
  else
    say "not running"; return 1
  fi
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  install) install_packages ;;
  *) echo "usage: $0 up|down|status|install" >&2; exit 2 ;;
esac
