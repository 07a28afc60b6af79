"""/healthz under load, before and after, in one run: 50 simulated custodians browse the portal
on gunicorn + PostgreSQL while their /healthz requests (and compose's own probe) are timed.

    .venv/bin/python benchmarks/healthz_latency.py [--users 50] [--seconds 30] [--before 9c22f6c]

Issue 41 item 14: /healthz took 5.3 s under 50 users, past compose's 5 s health timeout.
Each phase starts the web server exactly as docker-compose.yml runs it (its gunicorn options
and database settings) on 127.0.0.1, from one tree of the code:
- "before": the code and docker-compose.yml of the --before revision (git archive),
- "new view only": this working tree's code, served as the --before docker-compose.yml did,
- "after": this working tree;
both on one seeded database, under the same load (benchmarks/page_latency.py's simulated users:
the same seed, page mix and think time, bounded by --seconds and a request cap per user). Besides
the users' own requests, one probe thread asks /healthz once a second, as compose's health check
does. Before the users, --users clients ask only /healthz, 20 times each, all at once. It prints
p50/p95/p99/max per phase and the after/before ratios.
"""

import argparse
import http.client
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import page_latency as bench
import yaml

PROBE_KIND = "compose's probe"
HAMMER_REQUESTS = 20  # per client, in the /healthz-only load


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=50, help="concurrent simulated users")
    parser.add_argument("--seconds", type=float, default=30, help="load per phase")
    parser.add_argument("--think", type=float, default=1.0, help="mean pause between clicks (s)")
    parser.add_argument("--before", default="9c22f6c", help="git revision of the 'before' code")
    parser.add_argument("--database", default="dpportal_bench_healthz")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.users < 1 or args.seconds <= 0 or args.think < 0:
        parser.error("--users must be >= 1, --seconds > 0 and --think >= 0")
    return args


def export_tree(revision: str, folder: Path) -> Path:
    """The repository at `revision` (tracked files only), unpacked into `folder`."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision],
        cwd=bench.REPO_ROOT,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    return folder


def compose_web(tree: Path) -> tuple[list[str], dict]:
    """The gunicorn options (without --bind) and the database age docker-compose.yml gives web."""
    web = yaml.safe_load((tree / "docker-compose.yml").read_text())["services"]["web"]
    command = web["command"]
    if command[:2] != ["gunicorn", "dpportal.wsgi:application"]:
        raise SystemExit(f"{tree}: web does not run gunicorn ({command})")
    options, skip = [], False
    for word in command[2:]:
        if skip or word == "--bind":
            skip = not skip
            continue
        options.append(word)
    age = str(web["environment"].get("DATABASE_CONN_MAX_AGE", "0")) if "environment" in web else "0"
    return options, {"DATABASE_CONN_MAX_AGE": age}


def timed_healthz(port: int, timings: dict, lock: threading.Lock) -> float:
    """One GET /healthz on a fresh connection, as compose's probe makes it; its seconds and
    whether it failed go into `timings`."""
    started = time.perf_counter()
    try:
        connection = http.client.HTTPConnection(bench.HOST, port, timeout=60)
        ok = bench.get(connection, "/healthz", "")[0] == 200
    except (OSError, http.client.HTTPException):
        ok = False
    seconds = time.perf_counter() - started
    with lock:
        timings["latencies"].append(seconds)
        timings["errors"] += not ok
    return seconds


def probe(port: int, stop_at: float, timings: dict):
    """Compose's health check: one /healthz a second."""
    lock = threading.Lock()
    while time.monotonic() < stop_at:
        time.sleep(max(0.0, 1 - timed_healthz(port, timings, lock)))


def hammer(port: int, clients: int) -> dict:
    """`clients` threads at once, each asking /healthz HAMMER_REQUESTS times in a row."""
    timings: dict = {"latencies": [], "errors": 0}
    lock = threading.Lock()

    def client():
        for _ in range(HAMMER_REQUESTS):
            timed_healthz(port, timings, lock)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return timings


def run_phase(name, tree, env, args, seeded, data_dir, compose_tree=None):
    """The load on the server as compose (of `compose_tree`, default `tree`) runs it from
    `tree`: (users' samples, probe's timings, /healthz-only timings, seconds, options)."""
    options, extra_env = compose_web(compose_tree or tree)
    port = bench.free_port()
    process, log = bench.start_gunicorn(
        {**env, **extra_env}, args, port, data_dir / f"gunicorn-{name}.log", options, cwd=tree
    )
    print(f"{name}: gunicorn {' '.join(options)} {extra_env}, {args.seconds:g} s ...", flush=True)
    timings: dict = {"latencies": [], "errors": 0}
    try:
        alone = hammer(port, args.users)
        prober = threading.Thread(
            target=probe, args=(port, time.monotonic() + args.seconds, timings), daemon=True
        )
        prober.start()
        samples, elapsed = bench.run_load(port, seeded, args)
        prober.join(timeout=120)
    finally:
        bench.stop_gunicorn(process, log)
    return samples, timings, alone, elapsed, options


def row(label, values, errors):
    p50, p95, p99 = (1000 * bench.percentile(values, q) for q in (50, 95, 99))
    return (
        f"{label:<30}{len(values):>9}{p50:>9.0f}{p95:>9.0f}{p99:>9.0f}"
        f"{1000 * max(values):>9.0f}{errors:>8}"
    )


def report(results):
    header = (
        f"{'phase / requests':<30}{'count':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
        f"{'max ms':>9}{'errors':>8}"
    )
    print("\n" + header + "\n" + "-" * len(header))
    for name, (samples, timings, alone, elapsed, options) in results.items():
        everything = [v for values in samples.latencies.values() for v in values]
        print(f"{name}: gunicorn {' '.join(options)}; {len(everything) / elapsed:.0f} requests/s")
        print(row("  /healthz only, all at once", alone["latencies"], alone["errors"]))
        healthz = samples.latencies[bench.REFERENCE_KIND]
        print(row("  users' /healthz", healthz, samples.errors[bench.REFERENCE_KIND]))
        print(row(f"  {PROBE_KIND} /healthz", timings["latencies"], timings["errors"]))
        print(row("  all pages of the users", everything, sum(samples.errors.values())))
    for phase in ("new view only", "after"):
        print(f"\n{phase + ' / before':<30}{'p50':>9}{'p95':>9}{'max':>9}")
        for label, pick in (
            ("/healthz only, all at once", lambda r: r[2]["latencies"]),
            ("users' /healthz", lambda r: r[0].latencies[bench.REFERENCE_KIND]),
            (f"{PROBE_KIND} /healthz", lambda r: r[1]["latencies"]),
            ("all pages of the users", lambda r: [v for vs in r[0].latencies.values() for v in vs]),
        ):
            before, now = pick(results["before"]), pick(results[phase])
            ratios = [bench.percentile(now, q) / bench.percentile(before, q) for q in (50, 95, 100)]
            print(f"  {label:<28}" + "".join(f"{ratio:>9.2f}" for ratio in ratios))


def main(argv=None):
    args = parse_args(argv)
    data_dir = Path(tempfile.mkdtemp(prefix="dpportal-bench-healthz-"))
    env = bench.bench_environment(args, data_dir)
    print(f"Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    bench.recreate_database(args.pg, args.database)
    try:
        bench.manage(env, "migrate", "--no-input")
        bench.manage(env, "collectstatic", "--no-input")
        seeded = bench.seed(env, args.users)
        before_tree = export_tree(args.before, data_dir / "before")
        here = bench.REPO_ROOT
        results = {
            "before": run_phase("before", before_tree, env, args, seeded, data_dir),
            "new view only": run_phase(
                "new view only", here, env, args, seeded, data_dir, compose_tree=before_tree
            ),
            "after": run_phase("after", here, env, args, seeded, data_dir),
        }
        report(results)
    finally:
        bench.drop_database(args.pg, args.database)
        shutil.rmtree(data_dir, ignore_errors=True)
        bench.purge_queue(env)


if __name__ == "__main__":
    sys.path.insert(0, str(bench.REPO_ROOT))
    main()
