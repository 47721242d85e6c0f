#!/usr/bin/env bash
# Runs the LangGraph approve cycle (langgraph_cycle.py) in a virtualenv of its own, made on first
# use from requirements.txt (pinned versions, from PyPI) and made again when that file changes.
# Usage: bench/peers/langgraph.sh --runs 300 --synchronous full|normal
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/../../target/peers/venv"
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$here/requirements.txt" "$stamp"; then
  echo "peers: making the virtualenv in target/peers/venv (once)" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
  cp "$here/requirements.txt" "$stamp"
fi
exec "$venv/bin/python" "$here/langgraph_cycle.py" "$@"
