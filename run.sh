#!/usr/bin/env bash
# Start DP Portal on this machine: virtual environment, pinned dependencies, database, demo
# custodian and dataset, Redis, two Celery workers (small and long jobs), the release reaper and
# the web server. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh

export DJANGO_DEBUG=${DJANGO_DEBUG:-1}
PORT=${PORT:-8000}
ensure_venv requirements.txt
ensure_redis
ensure_pdf_libraries
mkdir -p var "${DPPORTAL_DATA_DIR:-var}"  # logs, and the SQLite file (a fresh checkout has neither)
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

# Small releases have their own worker, so they never wait behind a long MWEM run; the long-job
# worker also takes small ones when it is idle. The reaper retries jobs whose worker died.
queue=${DPPORTAL_CELERY_QUEUE:-celery}
long_queue=${DPPORTAL_CELERY_LONG_QUEUE:-$queue.long}
"$PY" -m celery -A dpportal worker -n small@%h -Q "$queue" --loglevel=INFO --concurrency=1 \
  >var/worker.log 2>&1 &
pids+=($!)
"$PY" -m celery -A dpportal worker -n long@%h -Q "$long_queue,$queue" --loglevel=INFO \
  --concurrency=1 >var/worker-long.log 2>&1 &
pids+=($!)
"$PY" manage.py reap_releases --loop >var/reaper.log 2>&1 &
pids+=($!)
"$PY" manage.py runserver "127.0.0.1:$PORT" --noreload >var/web.log 2>&1 &
pids+=($!)
log "Waiting for the web server to answer at http://127.0.0.1:$PORT/healthz"
wait_until_answers "http://127.0.0.1:$PORT/healthz" "$!" var/web.log "${DPPORTAL_START_SECONDS:-120}"

log "DP Portal is running at http://127.0.0.1:$PORT/  (log in as demo / demo-portal)"
log "Logs: var/web.log, var/worker.log, var/worker-long.log, var/reaper.log. Press Ctrl-C to stop."
wait -n "${pids[@]}"
