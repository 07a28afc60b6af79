"""How long the tests take: the fast-loop parts, or the whole per-commit suite, as a dated table.

    python benchmarks/suite_time.py [--parts NAME ...]     the fast-loop commands of docs/developing.md
    python benchmarks/suite_time.py --whole [--workers N ...] [--venv DIR]
    python benchmarks/suite_time.py --log FILE             read a saved ./test.sh (or .ci/run) output

--parts runs each named pytest command (PARTS below, as docs/developing.md gives them) here, in
this checkout, with this interpreter and the current environment. --whole clones the committed
HEAD into an empty folder and runs ./test.sh there, as .ci/run does: with its own new virtual
environment (installing included), or with --venv's; --workers runs it once per pytest-xdist
worker count (PYTEST_WORKERS) and compares them, as ratios against the first. --log reads the
times ./test.sh printed. Every table starts with the date, the commit, the cores and the load
average when it started, since background load moves wall times; CPU is the user plus system
time of every process the run waited for.
"""

import argparse
import datetime
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
PARTS = {
    "mechanisms": ["-n", "0", "-m", "not audit", "tests/mechanisms"],
    "mechanisms-n2": ["-n", "2", "-m", "not audit", "tests/mechanisms"],
    "cli+counting": ["-n", "0", "tests/cli", "tests/counting"],
}
DEFAULT_PARTS = ["mechanisms", "cli+counting"]
SUMMARY = re.compile(r"^=* ?(\d+ \w+.*) in ([\d.]+)s\b")  # pytest's last line
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")
STEP = re.compile(r"^==> (.+)$")  # test.sh's `log` lines
COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # test.sh prints its steps in bold
DONE = re.compile(r"Done in (\d+) s \(lint, type check, tests\); (\d+) s in all")


@dataclass
class Row:
    """One timed run: what ran, its outcome as pytest counted it, wall and CPU seconds."""

    name: str
    outcome: str
    wall: float
    cpu: float | None


def header(commit_of: Path) -> str:
    """Date, commit, machine and load: the table's context."""
    commit = git(commit_of, "rev-parse", "--short", "HEAD")
    dirty = " (with uncommitted changes)" if git(commit_of, "status", "--porcelain") else ""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{when}; commit {commit}{dirty}; {os.cpu_count()} cores, load average {load} at the "
        f"start; Python {platform.python_version()}"
    )


def load_at_the_end() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg()) + " at the end"


def git(where: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=where, capture_output=True, text=True, check=True
    ).stdout.strip()


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, float, float]:
    """Run `command`; its output (stdout and stderr), wall seconds and CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        print(f"exit status {done.returncode} of {' '.join(command)}; its end:", file=sys.stderr)
        print(done.stdout[-3000:], file=sys.stderr)
    return done.stdout, wall, cpu


def outcome(output: str) -> str:
    """pytest's counts from its last summary line ("812 passed, 3 skipped"), or "no summary"."""
    summaries = [m.group(1) for line in output.splitlines() if (m := SUMMARY.match(line))]
    if not summaries:
        return "no summary"
    return ", ".join(f"{n} {kind}" for n, kind in COUNT.findall(summaries[-1]))


def run_parts(names: list[str]) -> list[Row]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
    rows = []
    for name in names:
        output, wall, cpu = timed([*PYTEST, *PARTS[name]], REPO, env)
        rows.append(Row(f"{name}: pytest {' '.join(PARTS[name])}", outcome(output), wall, cpu))
    return rows


def test_sh_rows(output: str) -> list[Row]:
    """One row per pytest pass ./test.sh printed (the step's title, pytest's counts and time),
    then its own totals: lint, type check and tests; and with installing and starting services."""
    rows, step = [], "pytest"
    for line in COLOUR.sub("", output).splitlines():
        if m := DONE.search(line):
            rows.append(Row("./test.sh: lint, type check and tests", "", float(m.group(1)), None))
            rows.append(Row("./test.sh: all, with installing", "", float(m.group(2)), None))
        elif m := STEP.match(line):
            step = m.group(1)
        elif m := SUMMARY.match(line.strip()):
            counts = ", ".join(f"{n} {kind}" for n, kind in COUNT.findall(m.group(1)))
            rows.append(Row(step, counts, float(m.group(2)), None))
    return rows


def run_whole(workers: list[int | None], venv: str | None) -> tuple[str, list[Row]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="dpportal-suite-time.") as folder:
        clone = Path(folder) / "dpportal"
        subprocess.run(["git", "clone", "--quiet", "--no-local", str(REPO), str(clone)], check=True)
        context = header(clone)
        for count in workers:
            env = {k: v for k, v in os.environ.items() if k not in ("VENV", "PYTEST_WORKERS")}
            if venv:
                env["VENV"] = venv
            if count is not None:
                env["PYTEST_WORKERS"] = str(count)
            output, wall, cpu = timed(["./test.sh"], clone, env)
            label = f"workers {count}: " if count is not None else ""
            rows += [Row(label + r.name, r.outcome, r.wall, r.cpu) for r in test_sh_rows(output)]
            rows.append(Row(f"{label}./test.sh, timed here", outcome(output), wall, cpu))
    return context, rows


def print_table(context: str, rows: list[Row], note: str) -> None:
    print(context)
    print(note)
    if not rows:
        sys.exit("no test run found")
    width, tests = max(len(r.name) for r in rows), max(len(r.outcome) for r in rows)
    print(f"{'run':<{width}}  {'tests':<{tests}}  {'wall s':>7} {'CPU s':>7}")
    for r in rows:
        cpu = f"{r.cpu:7.1f}" if r.cpu is not None else ""
        print(f"{r.name:<{width}}  {r.outcome:<{tests}}  {r.wall:7.1f} {cpu:>7}".rstrip())


def print_comparison(workers: list[int], rows: list[Row]) -> None:
    """Wall and CPU time of each worker count's whole ./test.sh run, against the first one's."""
    totals = [r for r in rows if r.name.endswith("./test.sh, timed here")]
    print(f"\n{'workers':>7} {'wall s':>7} {'CPU s':>7} {'wall / first':>12}")
    for count, r in zip(workers, totals, strict=True):
        cpu = r.cpu or 0.0
        print(f"{count:>7} {r.wall:7.1f} {cpu:7.1f} {r.wall / totals[0].wall:12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=sorted(PARTS), default=DEFAULT_PARTS)
    parser.add_argument("--whole", action="store_true", help="./test.sh in a fresh clone of HEAD")
    parser.add_argument("--workers", nargs="+", type=int, help="with --whole: PYTEST_WORKERS")
    parser.add_argument("--venv", help="with --whole: reuse this virtual environment")
    parser.add_argument("--log", type=Path, help="a saved ./test.sh output to read")
    args = parser.parse_args()
    if args.log:
        modified = datetime.datetime.fromtimestamp(args.log.stat().st_mtime, datetime.UTC)
        context = f"{args.log}, written {modified:%Y-%m-%d %H:%M UTC}"
        print_table(context, test_sh_rows(args.log.read_text()), "times as ./test.sh printed them")
    elif args.whole:
        context, rows = run_whole(args.workers or [None], args.venv)
        print_table(
            context, rows, f"./test.sh in a fresh clone of the committed HEAD; {load_at_the_end()}"
        )
        if args.workers and len(args.workers) > 1:
            print_comparison(args.workers, rows)
    else:
        context, rows = header(REPO), run_parts(args.parts)
        print_table(context, rows, f"each part run here, one after another; {load_at_the_end()}")


if __name__ == "__main__":
    main()
