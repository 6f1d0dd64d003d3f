#!/bin/sh
# The pod's entrypoint. With the run's environment set (a template or `docker run -e` passing
# TRAINSTACK_RUN_ID, TRAINSTACK_COMMANDER_URL, ...) and no command, it is the trainstack worker;
# otherwise it runs the given command (a Lium template's start command, e.g. its SSH server), and
# the commander starts the worker over SSH with the run's environment (docs/lium.md).
set -e
if [ "$#" -eq 0 ] && [ -n "${TRAINSTACK_RUN_ID:-}" ]; then
  exec python3 -m trainstack.launch.lium_worker
fi
if [ "$#" -eq 0 ]; then
  exec sleep infinity
fi
exec "$@"
