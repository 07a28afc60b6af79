"""CPU used by an idle local Dask cluster, with Dask's defaults and with the test settings.

    python benchmarks/dask_idle.py [--seconds S] [--repeat N]

./test.sh keeps a local cluster (one scheduler, two single-thread workers without a nanny, as
scripts/common.sh's ensure_dask_cluster starts them) for the whole suite, although only the Dask
engine's tests use it. Idle, Dask's defaults poll busily (a 10 ms statistical profiler in each
worker, a 20 ms event-loop tick, a 0.5 s system monitor), which costs the other tests CPU on a
2-core machine. ensure_dask_cluster sets quieter values (its `local -x DASK_...` lines, read
from there so this script measures what the tests get). Runs alternate (defaults, quiet, ...)
so background load falls on both alike. Prints CPU seconds per idle minute for each run, then
the medians and their ratio.
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DASK = Path(sys.executable).with_name("dask")


def quiet_settings() -> dict[str, str]:
    """The Dask settings ensure_dask_cluster exports, read from scripts/common.sh."""
    text = (REPO / "scripts" / "common.sh").read_text()
    found = dict(re.findall(r"local -x (DASK_\w+)=(\S+)", text))
    if not found:
        raise SystemExit("scripts/common.sh sets no DASK_ settings: nothing to compare")
    return found


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def idle_cpu_per_minute(settings: dict[str, str], seconds: float) -> float:
    """Start a cluster with `settings`, let it settle, and measure its CPU while idle."""
    env = {**os.environ, **settings, "PYTHONPATH": str(REPO)}
    address = f"tcp://127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory() as scratch:
        scheduler = [str(DASK), "scheduler", "--host", "127.0.0.1", "--no-dashboard"]
        commands = [[*scheduler, "--port", address.rsplit(":", 1)[1]]]
        for k in (1, 2):
            commands.append(
                [str(DASK), "worker", address, "--host", "127.0.0.1", "--nthreads", "1"]
                + ["--no-nanny", "--no-dashboard", "--name", f"idle-{k}", "--local-directory"]
                + [scratch]
            )
        processes = []
        try:
            for command in commands:
                processes.append(
                    subprocess.Popen(
                        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                    )
                )
                time.sleep(1.0)
            time.sleep(5.0)  # the workers register and settle
            before = sum(cpu_seconds(p.pid) for p in processes)
            time.sleep(seconds)
            used = sum(cpu_seconds(p.pid) for p in processes) - before
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(timeout=30)
    return used * 60.0 / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="idle time measured per run")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    configurations = {"Dask defaults": {}, "test settings": quiet_settings()}
    print(f"test settings: {configurations['test settings']}")
    results: dict[str, list[float]] = {name: [] for name in configurations}
    print(f"{'run':>3}  {'configuration':<14}  {'CPU-s per idle minute':>22}")
    for run in range(args.repeat):
        for name, settings in configurations.items():
            value = idle_cpu_per_minute(settings, args.seconds)
            results[name].append(value)
            print(f"{run + 1:>3}  {name:<14}  {value:>22.2f}")
    default, quiet = (statistics.median(results[name]) for name in configurations)
    print(f"median: defaults {default:.2f}, test settings {quiet:.2f} CPU-s per idle minute")
    print(f"ratio test settings / defaults: {quiet / default:.2f}")


if __name__ == "__main__":
    main()
