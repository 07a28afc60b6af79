"""Page latency under load: N simulated custodians browse the portal on gunicorn + PostgreSQL.

    .venv/bin/python benchmarks/page_latency.py [--users 50] [--seconds 60] [--workers 4]

What it does, all on loopback (127.0.0.1) and all cleaned up afterwards:
1. creates a dedicated PostgreSQL database (default `dpportal_bench`, dropped first), migrates it,
   collects static files, and seeds it: the demo custodian and dataset, a few finished releases
   (computed in this process, no worker needed) and a few queued ones whose progress is polled;
2. starts gunicorn (production settings, DEBUG off) with the given workers and threads;
3. logs each simulated user in with its own session, then runs the users as threads for a fixed
   time: each user picks a page kind (dataset page, results page, job progress, audit log,
   releases list, and /healthz as the in-run reference), requests it over a keep-alive HTTP
   connection, checks the answer, and waits a think time before the next click;
4. prints p50/p95/p99/max latency and the error count per page kind, and each kind's p95 as a
   ratio to the reference's p95 measured in the same run.

The load loop is bounded twice: by time (--seconds) and by a request cap per user.
Goal (issue 8): p95 under 300 ms and zero errors for every page kind with 50 users.
"""

import argparse
import http.client
import json
import math
import os
import random
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"  # loopback only: the load never leaves this machine
MAX_REQUESTS_PER_USER = 5_000
REFERENCE_KIND = "healthz (reference)"
# How often a simulated custodian opens each kind of page (relative weights).
PAGE_MIX = {
    "dataset page": 3,
    "results page": 3,
    "job progress poll": 4,
    "audit log": 2,
    "releases list": 2,
    REFERENCE_KIND: 1,
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50, help="concurrent simulated users")
    parser.add_argument("--seconds", type=float, default=60, help="length of the load phase")
    parser.add_argument(
        "--think",
        type=float,
        default=1.0,
        help="mean pause between one user's clicks in seconds (0 = no pause)",
    )
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--database", default="dpportal_bench", help="PostgreSQL database name")
    parser.add_argument(
        "--pg",
        default="postgres://postgres@127.0.0.1:5432",
        help="PostgreSQL server URL (without database)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed for the users' click choices")
    args = parser.parse_args(argv)
    if args.users < 1 or args.seconds <= 0 or args.think < 0:
        parser.error(
            f"--users ({args.users}) must be >= 1, --seconds ({args.seconds}) > 0 "
            f"and --think ({args.think}) >= 0"
        )
    return args


# ---------------------------------------------------------------- set-up


def recreate_database(server_url: str, name: str):
    import psycopg

    if not name.replace("_", "").isalnum():
        raise SystemExit(f"database name ({name!r}) must be letters, digits and underscores")
    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {name}")


def drop_database(server_url: str, name: str):
    import psycopg

    with psycopg.connect(f"{server_url}/postgres", autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def bench_environment(args, data_dir: Path) -> dict:
    """Production settings (DEBUG off) on the bench database; plain HTTP on loopback."""
    return dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="dpportal.settings",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        DJANGO_SECURE_SSL_REDIRECT="0",
        DJANGO_SECURE_COOKIES="0",
        DJANGO_LOG_LEVEL="WARNING",
        DATABASE_URL=f"{args.pg}/{args.database}",
        DATABASE_CONN_MAX_AGE="60",
        DPPORTAL_DATA_DIR=str(data_dir),
        DJANGO_STATIC_ROOT=str(data_dir / "static"),
        CELERY_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/14"),
        DPPORTAL_CELERY_QUEUE=f"bench-{secrets.token_hex(6)}",  # no worker listens: jobs stay queued
    )


def manage(env: dict, *command: str):
    subprocess.run(
        [sys.executable, "manage.py", *command],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def seed(env: dict, users: int) -> dict:
    """Seed the database in a child process; return the URLs per page kind and session cookies."""
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--_seed", str(users)],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def seed_in_django(users: int):
    """(Child process.) Demo data, finished and queued releases, and one session per user."""
    import django

    sys.path.insert(0, str(REPO_ROOT))
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test import Client
    from django.urls import reverse

    from dpportal import services
    from dpportal.models import Dataset, Release

    call_command("load_demo", password=secrets.token_urlsafe(16), stdout=open(os.devnull, "w"))
    dataset = Dataset.objects.get(name="Adult (demo)")
    user = dataset.owner
    releases = [create_release(dataset, user, spec) for spec in SEED_RELEASES]
    for release in releases[:-2]:  # the last two stay queued: their progress is polled
        services.release_run(release_id=release.pk)
    failed = Release.objects.filter(pk__in=[r.pk for r in releases], status="failed")
    if failed.exists():
        raise SystemExit(f"seed release failed: {failed.first().error_message}")
    done = releases[:-2]
    urls = {
        "dataset page": page_urls("dataset_detail", [dataset.pk]),
        "results page": page_urls("release_detail", [r.pk for r in done]),
        "job progress poll": page_urls("release_progress", [r.pk for r in releases]),
        "audit log": [reverse("audit_log")],
        "releases list": [reverse("release_list")],
        REFERENCE_KIND: [reverse("healthz")],
    }
    sessions = []
    for _ in range(users):
        client = Client()
        client.force_login(user)
        sessions.append(client.cookies[settings.SESSION_COOKIE_NAME].value)
    print(
        json.dumps(
            {"urls": urls, "sessions": sessions, "cookie_name": settings.SESSION_COOKIE_NAME}
        )
    )


def page_urls(name: str, pks: list[int]) -> list[str]:
    """The URLs of a page kind, or none if the portal has no page of that name (yet)."""
    from django.urls import NoReverseMatch, reverse

    try:
        return [reverse(name, args=[pk]) for pk in pks]
    except NoReverseMatch:
        return []


# Releases as the new-release form would submit them (the browser sends every field).
FORM_DEFAULTS = {
    "epsilon": "0.1",
    "mwem_marginal_size": "2",
    "range_workload": "prefixes",
    "range_queries": "200",
    "range_method": "auto",
}
SEED_RELEASES = [
    {"mechanism": "perturbed_histogram", "columns": ["age", "sex"], "rows": "1000"},
    {"mechanism": "smoothed_histogram", "columns": ["education", "income"]},
    {"mechanism": "mwem", "columns": ["age", "sex", "race", "income"], "mwem_rounds": "5"},
    {"mechanism": "range_count", "columns": ["age"]},
    {"mechanism": "perturbed_histogram", "columns": ["age"]},  # stays queued
    {"mechanism": "perturbed_histogram", "columns": ["sex"]},  # stays queued
]


def create_release(dataset, user, spec):
    """Validate `spec` with the portal's own release form and request the release."""
    from dpportal import services
    from dpportal.releases.forms import ReleaseForm

    form = ReleaseForm({**FORM_DEFAULTS, **spec}, dataset=dataset)
    if not form.is_valid():
        raise SystemExit(f"seed release {spec} refused by the form: {form.errors.as_text()}")
    data = form.cleaned_data
    return services.release_create(
        dataset=dataset,
        user=user,
        mechanism=data["mechanism"],
        columns=data["columns"],
        params=form.params(),
        epsilon=data["epsilon"],
        delta=data["delta"],
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def start_gunicorn(env: dict, args, port: int, log_path: Path, options=None, cwd=REPO_ROOT):
    """gunicorn on `port` with `options` (default: the --workers x --threads of `args`, gthread),
    started from `cwd`; returns once /healthz answers."""
    if options is None:
        options = ["--workers", str(args.workers), "--threads", str(args.threads)]
        options += ["--worker-class", "gthread", "--keep-alive", "30"]
    log = open(log_path, "wb")  # noqa: SIM115 (closed by stop_gunicorn)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "dpportal.wsgi:application",
            "--bind",
            f"{HOST}:{port}",
            *options,
            "--log-level",
            "warning",
        ],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"gunicorn exited early:\n{log_path.read_text()}")
        try:
            if get(http.client.HTTPConnection(HOST, port, timeout=5), "/healthz", "")[0] == 200:
                return process, log
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"gunicorn did not answer within 60 s:\n{log_path.read_text()}")


def stop_gunicorn(process, log):
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


# ---------------------------------------------------------------- load


def get(connection, path: str, cookie: str):
    connection.request("GET", path, headers={"Cookie": cookie, "Accept": "text/html"})
    response = connection.getresponse()
    return response.status, response.read()


@dataclass
class Samples:
    latencies: dict = field(default_factory=lambda: {kind: [] for kind in PAGE_MIX})
    errors: dict = field(default_factory=lambda: {kind: 0 for kind in PAGE_MIX})
    first_error: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, kind: str, seconds: float, problem: str | None):
        with self.lock:
            self.latencies[kind].append(seconds)
            if problem:
                self.errors[kind] += 1
                self.first_error.setdefault(kind, problem)


def check_answer(kind: str, status: int, body: bytes) -> str | None:
    """None if the page answered as a logged-in user expects, else what was wrong."""
    if status != 200:
        return f"HTTP {status}"
    if kind == "job progress poll":
        try:
            json.loads(body)
        except ValueError:
            return "progress answer is not JSON"
    elif kind != REFERENCE_KIND and b"Log in" in body and b"Log out" not in body:
        return "login page instead of the requested page"
    return None


def simulated_user(
    port: int,
    cookie: str,
    plan: dict,
    samples: Samples,
    stop_at: float,
    think: float,
    rng: random.Random,
):
    kinds = [kind for kind in PAGE_MIX if plan[kind]]
    weights = [PAGE_MIX[kind] for kind in kinds]
    connection = http.client.HTTPConnection(HOST, port, timeout=30)
    for _ in range(MAX_REQUESTS_PER_USER):
        if time.monotonic() >= stop_at:
            break
        kind = rng.choices(kinds, weights)[0]
        path = rng.choice(plan[kind])
        started = time.perf_counter()
        try:
            status, body = get(connection, path, cookie)
            problem = check_answer(kind, status, body)
        except (OSError, http.client.HTTPException) as exc:
            problem = f"{type(exc).__name__}: {exc}"
            connection.close()
            connection = http.client.HTTPConnection(HOST, port, timeout=30)
        samples.add(kind, time.perf_counter() - started, problem)
        if think:
            time.sleep(
                min(rng.uniform(0.5 * think, 1.5 * think), max(0, stop_at - time.monotonic()))
            )
    connection.close()


def run_load(port: int, seeded: dict, args) -> tuple[Samples, float]:
    samples = Samples()
    cookies = [f"{seeded['cookie_name']}={session}" for session in seeded["sessions"]]
    for kind, paths in seeded["urls"].items():  # warm-up: every page once, not measured
        for path in paths:
            status, body = get(http.client.HTTPConnection(HOST, port, timeout=30), path, cookies[0])
            problem = check_answer(kind, status, body)
            if problem:
                raise SystemExit(f"{kind} {path} is broken before the load: {problem}")
    master = random.Random(args.seed)
    started = time.monotonic()
    stop_at = started + args.seconds
    threads = [
        threading.Thread(
            target=simulated_user,
            daemon=True,
            args=(
                port,
                cookie,
                seeded["urls"],
                samples,
                stop_at,
                args.think,
                random.Random(master.getrandbits(64)),
            ),
        )
        for cookie in cookies
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=args.seconds + 60)
    return samples, time.monotonic() - started


# ---------------------------------------------------------------- report


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least q% of the values at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def print_table(samples: Samples, elapsed: float, args, plan: dict):
    total = sum(len(v) for v in samples.latencies.values())
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"\nMachine: {os.cpu_count()} CPUs, load average before the run {args.load_before}, "
        f"after {load}"
    )
    print(
        f"{args.users} users, {elapsed:.0f} s, think time {args.think:g} s "
        f"(uniform ±50%), gunicorn {args.workers} workers x {args.threads} threads, "
        f"PostgreSQL; {total} requests ({total / elapsed:.0f}/s)"
    )
    reference = samples.latencies[REFERENCE_KIND]
    reference_p95 = percentile(reference, 95) if reference else float("nan")
    header = (
        f"{'page kind':<22}{'requests':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
        f"{'max ms':>9}{'errors':>8}{'p95/ref':>9}  goal p95<300ms, 0 errors"
    )
    print(header)
    print("-" * len(header))
    for kind, values in samples.latencies.items():
        if not values:
            reason = "no request fell on it" if plan[kind] else "the portal has no such page"
            print(f"{kind:<22}{0:>9}  NOT MEASURED: {reason}")
            continue
        p50, p95, p99 = (1000 * percentile(values, q) for q in (50, 95, 99))
        verdict = "ok" if p95 < 300 and samples.errors[kind] == 0 else "MISSED"
        print(
            f"{kind:<22}{len(values):>9}{p50:>9.1f}{p95:>9.1f}{p99:>9.1f}"
            f"{1000 * max(values):>9.1f}{samples.errors[kind]:>8}"
            f"{p95 / 1000 / reference_p95:>9.1f}  {verdict}"
        )
    everything = [v for values in samples.latencies.values() for v in values]
    print(
        f"{'all pages':<22}{len(everything):>9}{1000 * statistics.median(everything):>9.1f}"
        f"{1000 * percentile(everything, 95):>9.1f}{1000 * percentile(everything, 99):>9.1f}"
        f"{1000 * max(everything):>9.1f}{sum(samples.errors.values()):>8}"
    )
    for kind, problem in samples.first_error.items():
        print(f"first error on {kind}: {problem}")


def main(argv=None):
    args = parse_args(argv)
    data_dir = Path(tempfile.mkdtemp(prefix="dpportal-bench-"))
    env = bench_environment(args, data_dir)
    print(f"Preparing database {args.database} and static files in {data_dir} ...", flush=True)
    args.load_before = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    recreate_database(args.pg, args.database)
    process = log = None
    try:
        manage(env, "migrate", "--no-input")
        manage(env, "collectstatic", "--no-input")
        seeded = seed(env, args.users)
        port = free_port()
        children_before = cpu_seconds(resource.RUSAGE_CHILDREN)
        process, log = start_gunicorn(env, args, port, data_dir / "gunicorn.log")
        print(
            f"gunicorn on http://{HOST}:{port}/; {args.users} users for {args.seconds:g} s ...",
            flush=True,
        )
        generator_before = cpu_seconds(resource.RUSAGE_SELF)
        samples, elapsed = run_load(port, seeded, args)
        generator = cpu_seconds(resource.RUSAGE_SELF) - generator_before
        stop_gunicorn(process, log)
        process = None
        server = cpu_seconds(resource.RUSAGE_CHILDREN) - children_before
        print_table(samples, elapsed, args, seeded["urls"])
        print(
            f"CPU time: gunicorn {server:.0f} s (start to stop), this load generator "
            f"{generator:.0f} s, of {os.cpu_count() * elapsed:.0f} s the CPUs had in the run "
            f"(PostgreSQL and other processes not counted)"
        )
    except BaseException:
        gunicorn_log = data_dir / "gunicorn.log"
        if gunicorn_log.exists():
            print("gunicorn log (last 3000 characters):\n" + gunicorn_log.read_text()[-3000:])
        raise
    finally:
        if process is not None:
            stop_gunicorn(process, log)
        drop_database(args.pg, args.database)
        shutil.rmtree(data_dir, ignore_errors=True)
        purge_queue(env)


def cpu_seconds(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def purge_queue(env: dict):
    """Delete the bench's private queues (and their routing keys) from the broker."""
    import redis

    broker = redis.Redis.from_url(env["CELERY_BROKER_URL"])
    queue = env["DPPORTAL_CELERY_QUEUE"]
    for name in (queue, f"{queue}.long"):
        broker.delete(name, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--_seed":
        seed_in_django(int(sys.argv[2]))
    else:
        main()
