"""Wall and CPU time of a pytest selection with OpenBLAS's default threads and with one per process.

    python benchmarks/blas_threads.py [--repeat N] [--workers W] [-- PYTEST ARGS ...]

Defaults: the statistical audits (`-m audit tests/mechanisms`), 2 runs of each setting, and
one pytest-xdist worker per core plus one, as ./test.sh runs them. Runs alternate (default,
one thread, default, ...) so that background load falls on both alike. Prints one row per run,
then the medians and their ratio. CPU is the user plus system time of pytest and every process
it waited for (its xdist workers and what they started).

./test.sh sets OPENBLAS_NUM_THREADS=1 from these figures: every test process (xdist workers,
Celery workers, live servers, the browser) already has a core's worth of work, and OpenBLAS's
threads, one per core in each of them, compete for the same cores.
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"default": None, "one thread": "1"}


def run_once(threads: str | None, workers: int, pytest_args: list[str]) -> tuple[float, float]:
    """One pytest run; returns (wall seconds, CPU seconds) and fails loudly if a test fails."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = threads
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(workers)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [*command, *pytest_args], cwd=REPO, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"pytest failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workers", type=int, default=(os.cpu_count() or 1) + 1)
    parser.add_argument("pytest_args", nargs="*", default=["-m", "audit", "tests/mechanisms"])
    args = parser.parse_args()
    print(f"pytest -n {args.workers} {' '.join(args.pytest_args)} on {os.cpu_count()} cores")
    print(f"{'run':>4} {'OpenBLAS threads':>17} {'wall s':>8} {'CPU s':>8}")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in SETTINGS}
    for k in range(args.repeat):
        for name, threads in SETTINGS.items():
            wall, cpu = run_once(threads, args.workers, args.pytest_args)
            results[name].append((wall, cpu))
            print(f"{k + 1:>4} {name:>17} {wall:>8.1f} {cpu:>8.1f}", flush=True)
    medians = {
        name: (statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs))
        for name, runs in results.items()
    }
    for name, (wall, cpu) in medians.items():
        print(f"median {name:>15} {wall:>8.1f} {cpu:>8.1f}")
    (wall_d, cpu_d), (wall_1, cpu_1) = medians["default"], medians["one thread"]
    print(f"one thread / default: wall {wall_1 / wall_d:.2f}, CPU {cpu_1 / cpu_d:.2f}")


if __name__ == "__main__":
    main()
