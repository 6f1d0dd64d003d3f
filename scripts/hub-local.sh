#!/usr/bin/env bash
# A local Hugging Face Hub (devtools/trainstack_dev/fakes/hub.py) for trying Hub sync without the internet.
#
#   scripts/hub-local.sh up       start it in the background; prints `export HF_ENDPOINT=...`
#   scripts/hub-local.sh status   is it up, and where
#   scripts/hub-local.sh down     stop it (by its pid file, never by name)
#
#   eval "$(scripts/hub-local.sh up)"      # the running shell talks to it from now on
#
# State is in memory, LFS objects and the Xet CAS in $TRAINSTACK_HUB_DIR/lfs (both gone after `down`); every
# request is logged to $TRAINSTACK_HUB_DIR/requests.jsonl. It serves both large-file paths: clients take Xet by
# default, Git LFS with HF_HUB_DISABLE_XET=1 (docs/hub.md).
# Settings: TRAINSTACK_HUB_DIR (default ./.hub-local), HUB_PORT (default: any free port), PYTHON (the
# interpreter with trainstack installed; default the checkout's .venv, else python3), HUB_REQUIRE_TOKEN=1
# (refuse writes without `Authorization: Bearer $HF_TOKEN`, like the real Hub).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${TRAINSTACK_HUB_DIR:-$PWD/.hub-local}
PY=${PYTHON:-}
if [[ -z $PY ]]; then
  if [[ -x $ROOT/.venv/bin/python ]]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi

say() { echo "hub-local: $*" >&2; }

alive() {  # the pid in the pid file is a live, non-zombie process
  [[ -s $DIR/hub.pid ]] || return 1
  local pid state
  pid=$(cat "$DIR/hub.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/status ]] || return 1
  state=$(awk '/^State:/{print $2}' "/proc/$pid/status")
  [[ $state != Z ]]
}

up() {
  mkdir -p "$DIR"
  if alive && [[ -s $DIR/url ]]; then
    say "already up (pid $(cat "$DIR/hub.pid"))"
    echo "export HF_ENDPOINT=$(cat "$DIR/url")"
    return 0
  fi
  rm -f "$DIR/url" "$DIR/hub.pid"
  rm -rf "$DIR/lfs"
  local args=(-m trainstack_dev.fakes.hub --port "${HUB_PORT:-0}" --log "$DIR/requests.jsonl" --ready-file "$DIR/url"
              --blob-dir "$DIR/lfs")
  [[ ${HUB_REQUIRE_TOKEN:-0} == 1 ]] && args+=(--require-token-from-env HF_TOKEN)
  PYTHONPATH="$ROOT:$ROOT/devtools${PYTHONPATH:+:$PYTHONPATH}" setsid "$PY" "${args[@]}" >"$DIR/hub.log" 2>&1 </dev/null &
  echo $! >"$DIR/hub.pid"
  for _ in $(seq 100); do
    [[ -s $DIR/url ]] && break
    alive || { say "it did not start:"; cat "$DIR/hub.log" >&2; exit 1; }
    sleep 0.1
  done
  [[ -s $DIR/url ]] || { say "no endpoint after 10 s (see $DIR/hub.log)"; exit 1; }
  say "up (pid $(cat "$DIR/hub.pid")), requests logged to $DIR/requests.jsonl"
  echo "export HF_ENDPOINT=$(cat "$DIR/url")"
}

down() {
  if ! alive; then
    say "not running"
    rm -f "$DIR/hub.pid" "$DIR/url"
    return 0
  fi
  local pid
  pid=$(cat "$DIR/hub.pid")
  kill -TERM "$pid"
  for _ in $(seq 50); do alive || break; sleep 0.1; done
  alive && kill -KILL "$pid"
  rm -f "$DIR/hub.pid" "$DIR/url"
  rm -rf "$DIR/lfs"
  say "stopped (pid $pid)"
}

status() {
  if alive; then
    say "up (pid $(cat "$DIR/hub.pid")) at $(cat "$DIR/url" 2>/dev/null)"
  else
    say "down"
    return 1
  fi
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|status|down" >&2; exit 2 ;;
esac
