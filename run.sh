#!/usr/bin/env bash
# Start DP Portal on this machine: virtual environment, pinned dependencies, database, demo
# custodian and dataset, Redis, one Celery worker and the web server. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh

export DJANGO_DEBUG=${DJANGO_DEBUG:-1}
PORT=${PORT:-8000}
ensure_venv requirements.txt
ensure_redis
log "Preparing the database"
"$PY" manage.py migrate --no-input >/dev/null
"$PY" manage.py load_demo

pids=()
cleanup() {
  trap - INT TERM EXIT
  log "Stopping"
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  if [ "${STARTED_REDIS:-0}" = 1 ] && [ -f var/redis.pid ]; then kill "$(cat var/redis.pid)" 2>/dev/null || true; fi
}
trap cleanup INT TERM EXIT

"$PY" -m celery -A dpportal worker --loglevel=INFO --concurrency=2 >var/worker.log 2>&1 &
pids+=($!)
"$PY" manage.py runserver "127.0.0.1:$PORT" --noreload >var/web.log 2>&1 &
pids+=($!)

log "DP Portal is running at http://127.0.0.1:$PORT/  (log in as demo / demo-portal)"
log "Logs: var/web.log, var/worker.log. Press Ctrl-C to stop."
wait -n "${pids[@]}"
