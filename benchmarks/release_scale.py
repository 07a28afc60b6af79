"""Release at scale: a perturbed histogram of 2 columns of a 10^7-row table, from its Parquet copy.

Makes a table of ROWS x 10 columns (5 integer, 3 decimal, 2 text with 8 words), stores it as the
portal does (CSV through `dpportal.ingest`, or with --direct a Parquet file written by pyarrow
with the same types and dictionary-encoded text), then runs each contender in its own child
process, so peak memory is that process's own peak RSS (VmHWM):

- references: bare `pyarrow.parquet.read_table` of the 2 columns + `numpy.histogramdd`, or a
  flat cell index + `numpy.bincount` (exact counts, no noise, nothing else);
- portal, chunked: `release_engine.compute` end to end (record batches of the Parquet copy,
  cell counts accumulated chunk by chunk, noise, synthetic rows, package files);
- portal, whole table: the path before chunking (`load_columns` then the mechanism on the
  DataFrame), for comparison.

The release is f0 (numeric, 20 bins + "(missing)") x s0 (8 categories + "(other)" +
"(missing)") at epsilon 1, with
--synthetic-rows synthetic rows (default 10^5; 0 means as many as the table, the form's
default, whose synthetic.csv then grows with the table). Goal (issue 8): under 10 s at 10^7.

    .venv/bin/python benchmarks/release_scale.py                  # 10^7 rows, through ingest
    .venv/bin/python benchmarks/release_scale.py --direct --rows 1000000
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
COLUMNS = ["f0", "s0"]
SCHEMA = {
    "columns": [
        *({"name": f"i{k}", "type": "ignored"} for k in range(5)),
        {"name": "f0", "type": "numeric", "lower": 0, "upper": 100, "bins": 20},
        *({"name": f"f{k}", "type": "ignored"} for k in (1, 2)),
        {"name": "s0", "type": "categorical", "categories": WORDS, "unknown": "other"},
        {"name": "s1", "type": "ignored"},
    ]
}
ARROW_SCHEMA = pa.schema(
    [(f"i{k}", pa.int64()) for k in range(5)]
    + [(f"f{k}", pa.float64()) for k in range(3)]
    + [(f"s{k}", pa.string()) for k in range(2)]
)
BLOCK_ROWS = 1 << 16


def generated_blocks(rows: int, seed: int = 0):
    """Tables of BLOCK_ROWS rows (benchmark data only)."""
    draw = np.random.default_rng(seed)
    words = np.array(WORDS)
    for start in range(0, rows, BLOCK_ROWS):
        n = min(BLOCK_ROWS, rows - start)
        columns = [draw.integers(0, 100_000, n) for _ in range(5)]
        columns += [np.round(draw.normal(50, 15, n), 3) for _ in range(3)]
        columns += [words[draw.integers(0, len(words), n)] for _ in range(2)]
        yield pa.table(columns, schema=ARROW_SCHEMA)


def write_parquet(path: Path, rows: int) -> None:
    """The table written directly as Parquet, text dictionary-encoded as ingest does."""
    with pq.ParquetWriter(path, ARROW_SCHEMA, use_dictionary=["s0", "s1"]) as writer:
        for block in generated_blocks(rows):
            writer.write_table(block)


def ingest_csv(folder: Path, rows: int, parquet: Path) -> str:
    """Write the table as CSV and ingest it as an upload would be; returns a timing line."""
    from dpportal import ingest

    csv_path = folder / "table.csv"
    with pa_csv.CSVWriter(csv_path, ARROW_SCHEMA) as writer:
        for block in generated_blocks(rows):
            writer.write_table(block)
    start = time.perf_counter()
    ingest.ingest_text(csv_path, ingest.scan_file(csv_path), parquet, suffix=".csv")
    seconds = time.perf_counter() - start
    size = csv_path.stat().st_size / 2**20
    csv_path.unlink()
    return f"stored through dpportal.ingest: {size:,.0f} MB CSV ingested in {seconds:.1f} s"


def child_environment(folder: Path) -> dict:
    """The child's environment, with one glibc malloc arena.

    Each further arena reserves 64 MB of address space, and glibc opens one when threads
    contend for its lock, so under load a capped child could exceed RLIMIT_AS whatever the
    release itself holds. That is the likely cause of a C++ abort inside the chunked read seen
    once in a whole-suite run at load average 10; it never reproduced alone, with or without
    this setting.
    """
    return {
        **os.environ,
        "MALLOC_ARENA_MAX": "1",
        "DJANGO_SETTINGS_MODULE": "dpportal.settings",
        "DJANGO_DEBUG": "1",
        "DPPORTAL_DATA_DIR": str(folder),
        "DPPORTAL_STORAGE_DIR": str(folder),
        "PYTHONPATH": str(REPO),
    }


def run_child(
    mode: str,
    parquet: Path,
    synthetic_rows: int,
    limit_mb: int = 0,
    chunk_rows: int = 0,
    timeout: float = 600,
) -> dict:
    """One contender in a fresh process: {"seconds", "peak_mb", "imports_mb", "cells",
    "virtual_growth_mb"}. A child out of memory may also stall instead of failing, so it is
    stopped after `timeout` seconds (subprocess.TimeoutExpired)."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        mode,
        "--parquet",
        str(parquet),
        "--synthetic-rows",
        str(synthetic_rows),
        "--limit-mb",
        str(limit_mb),
        "--chunk-rows",
        str(chunk_rows),
    ]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_environment(parquet.parent),
    )
    if result.returncode:
        raise RuntimeError(f"{mode} failed:\n{result.stderr.strip()[-3000:]}")
    return json.loads(result.stdout)


def process_status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:"))


def peak_mb() -> float:
    """This process's peak RSS. Not ru_maxrss: Linux carries the parent's peak across fork and
    exec into it, so a child of a big parent would report the parent's peak."""
    return process_status_kb("VmHWM") / 1024


def limit_address_space(extra_mb: int) -> None:
    """Allow this process `extra_mb` more virtual memory than it has now."""
    limit = process_status_kb("VmSize") * 1024 + extra_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def child(mode: str, parquet: Path, synthetic_rows: int, limit_mb: int, chunk_rows: int) -> None:
    import django

    django.setup()
    import mechanisms
    from dpportal.models import Dataset, PrivacyBudget, Release
    from dpportal.releases import engine as release_engine

    budget = PrivacyBudget(neighbouring="replace-one", epsilon_total=1)
    dataset = Dataset(
        parquet_name=parquet.name,
        columns=ARROW_SCHEMA.names,
        schema=SCHEMA,
        sha256="0" * 64,
        budget=budget,
    )
    params = {"rows": synthetic_rows} if synthetic_rows else {}
    release = Release(
        dataset=dataset,
        mechanism="perturbed_histogram",
        columns=COLUMNS,
        params=params,
        epsilon=1,
        delta=0,
        neighbouring="replace-one",
    )
    if chunk_rows:
        release_engine.CHUNK_ROWS = chunk_rows
    imports, imports_vm = peak_mb(), process_status_kb("VmSize") / 1024
    if limit_mb:
        limit_address_space(limit_mb)
    start = time.perf_counter()
    if mode == "allocate":  # proves a limit bites: asks for more than it allows
        cells = np.ones((limit_mb + 16) * 2**17).size
    elif mode.startswith("reference"):
        cells = reference_counts(parquet, bincount=mode == "reference-bincount")
    elif mode == "chunked":
        output = release_engine.compute(release, progress=lambda *args: None)
        cells = len(output.trace["counts"])
    else:  # the whole table in memory, as before chunked reading
        frame = release_engine.load_columns(dataset, COLUMNS)
        output = mechanisms.run_release(
            "perturbed_histogram",
            frame,
            mechanisms.Schema.from_dict(SCHEMA),
            columns=COLUMNS,
            params=params,
            epsilon=1.0,
        )
        cells = len(output.trace["counts"])
    seconds = time.perf_counter() - start
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_mb": peak_mb(),
                "imports_mb": imports,
                "cells": cells,
                "virtual_growth_mb": process_status_kb("VmPeak") / 1024 - imports_vm,
            }
        )
    )


def reference_counts(parquet: Path, bincount: bool) -> int:
    """Exact counts with bare pyarrow + numpy: clamp f0, index s0 among the words, then
    numpy.histogramdd, or (faster) a flat cell index and numpy.bincount."""
    import pyarrow.compute as pc

    table = pq.read_table(parquet, columns=COLUMNS)
    values = np.clip(table.column("f0").to_numpy(), 0, 100)
    codes = pc.index_in(table.column("s0"), value_set=pa.array(WORDS))
    codes = pc.fill_null(codes, len(WORDS)).to_numpy()
    if bincount:
        bins = np.minimum((values * 0.2).astype(np.int64), 19)
        counts = np.bincount(bins * (len(WORDS) + 1) + codes, minlength=20 * (len(WORDS) + 1))
    else:
        counts, _edges = np.histogramdd(
            (values, codes), bins=(np.linspace(0, 100, 21), np.arange(len(WORDS) + 2) - 0.5)
        )
    assert counts.sum() == table.num_rows
    return counts.size


MODES = [
    ("reference: read_table + histogramdd", "reference"),
    ("reference: read_table + bincount", "reference-bincount"),
    ("portal, chunked (release_engine)", "chunked"),
    ("portal, whole table (before)", "whole"),
]


def bench(rows: int, repeats: int, direct: bool, synthetic_rows: int) -> None:
    with tempfile.TemporaryDirectory(prefix="release-scale-") as name:
        folder = Path(name)
        parquet = folder / "table.parquet"
        start = time.perf_counter()
        if direct:
            write_parquet(parquet, rows)
            how = f"written directly with pyarrow in {time.perf_counter() - start:.1f} s"
        else:
            how = ingest_csv(folder, rows, parquet)
        print(
            f"\n{rows:,} rows x 10 columns; Parquet copy {parquet.stat().st_size / 2**20:,.0f} "
            f"MB, {how}"
        )
        print(
            f"perturbed histogram of {COLUMNS} (180 cells), epsilon 1, "
            f"{synthetic_rows or rows:,} synthetic rows; median of {repeats} runs; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n"
        )
        runs = {mode: [] for _label, mode in MODES}
        for _ in range(repeats):  # interleaved, so a busy moment hits every contender alike
            for _label, mode in MODES:
                runs[mode].append(run_child(mode, parquet, synthetic_rows))
        reference = statistics.median(r["seconds"] for r in runs["reference"])
        print(
            f"| {'contender':<36} | {'seconds':>7} | {'x ref':>5} | {'peak RSS MB':>11} | "
            f"{'above imports MB':>16} |"
        )
        print(f"|{'-' * 38}|{'-' * 9}|{'-' * 7}|{'-' * 13}|{'-' * 18}|")
        for label, mode in MODES:
            seconds = statistics.median(r["seconds"] for r in runs[mode])
            peak = max(r["peak_mb"] for r in runs[mode])
            above = max(r["peak_mb"] - r["imports_mb"] for r in runs[mode])
            print(
                f"| {label:<36} | {seconds:7.2f} | {seconds / reference:5.2f} | {peak:11.0f} | "
                f"{above:16.0f} |"
            )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10**7)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--direct",
        action="store_true",
        help="write the Parquet copy with pyarrow instead of ingesting a CSV",
    )
    parser.add_argument("--synthetic-rows", type=int, default=10**5)
    parser.add_argument("--child", choices=[mode for _label, mode in MODES] + ["allocate"])
    parser.add_argument("--parquet", type=Path)
    parser.add_argument(
        "--limit-mb",
        type=int,
        default=0,
        help="child only: fail if it needs this much more memory than its imports",
    )
    parser.add_argument(
        "--chunk-rows",
        type=int,
        default=0,
        help="child only: rows per record batch (default: the portal's)",
    )
    args = parser.parse_args()
    if args.child:
        child(args.child, args.parquet, args.synthetic_rows, args.limit_mb, args.chunk_rows)
    else:
        sys.path.insert(0, str(REPO))
        os.environ.update(child_environment(Path(tempfile.gettempdir())))
        bench(args.rows, args.repeats, args.direct, args.synthetic_rows)


if __name__ == "__main__":
    main()
