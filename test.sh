#!/usr/bin/env bash
# Run the whole test suite. Installs the pinned test dependencies and Debian's Chromium and Java,
# starts Redis and PostgreSQL if they are not running and a local Dask and Spark cluster, then
# runs pytest on PostgreSQL (when available) and the database-behaviour tests (marker
# `database`) again on SQLite. Exits non-zero on any
# failure; the slowest tests are listed at the end of the PostgreSQL run.
#   ./test.sh            per-commit suite (how long: python benchmarks/suite_time.py --whole)
#   ./test.sh --long     also the long runs (kill tests, large privacy audits, fuzzing)
#   ./test.sh -- ARGS    pass ARGS to pytest (e.g. ./test.sh -- tests/mechanisms -x)
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh

marker="not slow"
# Tests run in parallel on pytest-xdist workers: one per core plus one, since part of the suite
# waits (on the browser, a Celery worker, a time limit) and leaves its core idle; on 2 cores more
# workers did not pay. `python benchmarks/suite_time.py --whole --workers 2 3 4` measures the
# choice on this machine. PYTEST_WORKERS overrides, 0 = serial. Files that share
# one outside resource are kept on one worker with @pytest.mark.xdist_group.
workers=${PYTEST_WORKERS:-$(( $(getconf _NPROCESSORS_ONLN) + 1 ))}
parallel=(-n "$workers" --dist loadgroup)
if [ "${1:-}" = "--long" ]; then marker="slow or not slow"; shift; fi
[ "${1:-}" = "--" ] && shift

# One BLAS thread per process: the test processes (pytest-xdist workers, Celery workers, live
# servers, Chromium) already fill every core, and OpenBLAS's own threads, one per core in each
# of them, only contend (benchmarks/blas_threads.py).
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

# Keep compiled modules between processes: each test that starts a Celery worker, a CLI or a
# live server imports the project again, and pytest caches its rewritten test modules.
unset PYTHONDONTWRITEBYTECODE
ensure_venv requirements-dev.txt
ensure_java
ensure_spark_cluster  # its JVMs start while the rest is set up and checked (wait_for_spark_cluster)
ensure_redis
ensure_chromium
ensure_pdf_libraries
ensure_object_store
ensure_dask_cluster

status=0
checks_started=$SECONDS
log "Lint and format (ruff)"
"$VENV/bin/ruff" check . || status=$?
"$VENV/bin/ruff" format --check . || status=$?
log "Type check (mypy: strict on mechanisms/, basic on dpportal/; config in pyproject.toml)"
"$VENV/bin/mypy" || status=$?
spark_waited=$SECONDS
wait_for_spark_cluster
log "Waited $((SECONDS - spark_waited)) s for the Spark cluster after the checks"
if ensure_postgres; then
  log "Test suite on PostgreSQL"
  DATABASE_URL=$pg_url "$PY" -m pytest "${parallel[@]}" --durations=15 -m "$marker" "$@" || status=$?
  if [ $# -eq 0 ]; then
    log "Database-behaviour tests again on SQLite (the embedded default)"
    "$PY" -m pytest "${parallel[@]}" -m "$marker and database and not e2e" tests/dpportal -q || status=$?
  fi
else
  log "PostgreSQL is not available here: the suite runs on SQLite only"
  "$PY" -m pytest "${parallel[@]}" -m "$marker" "$@" || status=$?
fi
log "Done in $((SECONDS - checks_started)) s (lint, type check, tests); $SECONDS s in all, with installing and starting services"
exit $status
