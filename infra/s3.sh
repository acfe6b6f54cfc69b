#!/usr/bin/env bash
# A local S3 endpoint (moto_server on 127.0.0.1, one bucket) for the demo and manual runs.
#   eval "$(infra/s3.sh start)"   start it in the background (or find the running one) and
#                                 export CDCLAKE_STORE_URL / CDCLAKE_S3_* for it
#   infra/s3.sh env               print the exports again
#   infra/s3.sh stop              stop it
# State (pid, endpoint, log) lives in $CDCLAKE_S3_STATE_DIR (default .cdclake/s3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON_BIN:-.venv/bin/python}
STATE=${CDCLAKE_S3_STATE_DIR:-.cdclake/s3}
case "${1:-}" in
  start|stop|env) exec "$PY" -m cdclake.local.s3 "$1" --state-dir "$STATE" "${@:2}" ;;
  *) echo "usage: $0 start|env|stop [--bucket NAME] [--port N]" >&2; exit 64 ;;
esac
