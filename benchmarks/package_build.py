"""Time to build a release package (mechanisms.package) as the synthetic table grows.

Made-up rows, no data set needed:

    python benchmarks/package_build.py [--columns C] [ROWS ...]   (default 2; 10000 100000 1000000)
    python benchmarks/package_build.py --release [--columns C] [--previous COMMIT] [--repeat R]
        [ROWS ...]   (default 2 columns; 30000 100000 300000)

The first form prints one line per size for a synthetic table of C columns (half numeric with
two decimals, half categorical with four values): CPU seconds for the spreadsheet-friendly
tables, the CSVs, release.xlsx (at most 100,000 rows per sheet), report.html and report.pdf,
the sizes of the workbook and the PDF; then release.xlsx written as before issue 44 (every row
appended cell by cell through openpyxl's write-only sheet, `cell_by_cell` below) and the ratio
of the two, in the same process on the same table.

`--release` prints the package's share of a whole release as the command line makes it: an
MWEM release from a made-up table of ROWS rows and C columns (`run_release`; MWEM writes as
many synthetic rows as the table has, up to DEFAULT_SYNTHETIC_ROWS, a million), then its
package (`build_package`), CPU seconds: the package's share of the two ("share") and its ratio
to the release ("pkg/rel"); beside it the package built by mechanisms/package as of
`--previous` (default PREVIOUS, before issue 44 item 6's third step; read from git,
`previous_package`, with the rest of mechanisms the working tree's), in the same process on the
same release, its share, the ratio of the two packages ("ratio") and whether they hold the
same files with the same contents ("same", `same_files`). Then the portal's part, which the
command line does not do: the package put into one zip for download ("zip s", CPU s, and
"zip MB", its size; `write_zip`, as `dpportal.releases.packaging.package_zip_path` does),
beside the previous package zipped as the portal did before issue 44 item 6's fourth step
("prev. zip s", "prev. zip MB"; every member deflated at zlib's default level, `zip_before`,
unless the previous package has a `write_zip` of its own), and the share of package and zip
together in what a worker spends on the release, the release included ("worker share",
"prev. worker share"). Each package is built R times (default 2), the two taking turns, and
its least CPU time kept; so is each zip; a small release is packaged by each first, so
loading openpyxl and first allocations fall on neither. The PDF library is loaded before any
timing, as a worker that has built one package has it (about 0.7 s, once per worker process).
"""

import argparse
import atexit
import contextlib
import importlib
import importlib.util
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mechanisms import Schema  # noqa: E402
from mechanisms.catalogue import run_release  # noqa: E402
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.package import PackageContext, build_package, write_zip  # noqa: E402
from mechanisms.package.report import report_html, report_pdf  # noqa: E402
from mechanisms.package.tables import csv_text, read_table  # noqa: E402
from mechanisms.package.workbook import (  # noqa: E402
    MAX_ROWS,
    _cell,
    _table_sheet,
    _with_rows,
    sheet_name,
    workbook_bytes,
)
from mechanisms.release import csv_bytes  # noqa: E402

PREVIOUS = "077bb38"  # the package before issue 44 item 6's third step
CATEGORIES = ("north", "south", "east", "west")


def synthetic(rows: int, columns: int, rng) -> tuple[pd.DataFrame, dict]:
    """A made-up table of `rows` rows and its schema: half numeric, half categorical."""
    frame, schema = {}, []
    for k in range(columns):
        if k % 2 == 0:
            frame[f"x{k}"] = rng.uniform(0, 100, rows).round(2)
            schema.append({"name": f"x{k}", "type": "numeric", "lower": 0, "upper": 100, "bins": 4})
        else:
            frame[f"c{k}"] = rng.choice(CATEGORIES, rows)
            schema.append({"name": f"c{k}", "type": "categorical", "categories": list(CATEGORIES)})
    return pd.DataFrame(frame), {"columns": schema}


def manifest_for(schema: dict) -> dict:
    return {
        "mechanism": "perturbed_histogram",
        "parameters": {"columns": [c["name"] for c in schema["columns"]]},
        "guarantee": {"unit": "one row", "neighbouring": "replace-one", "epsilon": 1, "delta": 0},
        "schema": schema,
        "files": {"synthetic.csv": "made-up rows"},
    }


def timed(step, *args):
    start = time.process_time()
    value = step(*args)
    return value, time.process_time() - start


def cell_by_cell(manifest, tables, context):
    """The reference: the workbook with every row appended through openpyxl (before issue 44)."""
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    book.create_sheet("About").append(["About"])
    for table in tables:
        sheet = book.create_sheet(sheet_name(table.name))
        _table_sheet(sheet, table)
        for row in table.head_rows(MAX_ROWS):
            sheet.append([_cell(sheet, v) if isinstance(v, str) else v for v in row])
    out = io.BytesIO()
    book.save(out)
    return _with_rows(out.getvalue(), {})


def zip_before(package, out, folder):
    """The portal's zip before issue 44 item 6's fourth step: every member deflated at zlib's
    default level, release.xlsx too."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in package.items():
            archive.writestr(f"{folder}/{name}", content)


def zipped(write, package) -> int:
    """The size in bytes of `package` zipped by `write` (as the portal does, into a file)."""
    out = io.BytesIO()
    write(package, out, "release-1")
    return len(out.getvalue())


# ------------------------------------------------ the previous package (from git)


def _package_modules() -> dict:
    """mechanisms.package and its modules as this process has them loaded now."""
    prefix = "mechanisms.package"
    return {n: m for n, m in sys.modules.items() if n == prefix or n.startswith(prefix + ".")}


def _install(modules: dict) -> None:
    for name in _package_modules():
        del sys.modules[name]
    sys.modules.update(modules)
    sys.modules["mechanisms"].package = modules["mechanisms.package"]


def previous_package(commit: str) -> dict:
    """mechanisms.package as of `commit` (git archive into a temporary folder), loaded beside
    the working tree's under the same names: its modules, to swap in with `swapped`. The rest
    of mechanisms is the working tree's."""
    folder = Path(tempfile.mkdtemp(prefix="package_build_"))
    atexit.register(shutil.rmtree, folder, True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "mechanisms/package"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    source = folder / "mechanisms" / "package"
    now = _package_modules()
    for name in now:
        del sys.modules[name]
    try:
        spec = importlib.util.spec_from_file_location(
            "mechanisms.package", source / "__init__.py", submodule_search_locations=[str(source)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["mechanisms.package"] = module
        spec.loader.exec_module(module)
        importlib.import_module("mechanisms.package.workbook")  # build_package imports it late
        return _package_modules()
    finally:
        _install(now)


@contextlib.contextmanager
def swapped(modules: dict):
    """The `with` block runs with `modules` as mechanisms.package."""
    now = _package_modules()
    _install(modules)
    try:
        yield modules["mechanisms.package"]
    finally:
        _install(now)


# ------------------------------------------------------------------ the two tables


def parts(sizes, columns):
    rng = np.random.default_rng()
    print(
        f"{'rows':>10} {'tables s':>9} {'csv s':>7} {'xlsx s':>7} {'html s':>7} {'pdf s':>7} "
        f"{'xlsx MB':>8} {'pdf kB':>7} {'before s':>8} {'ratio':>6}"
    )
    for rows in sizes:
        frame, schema = synthetic(rows, columns, rng)
        manifest = manifest_for(schema)
        content = csv_bytes(frame)
        table, t_tables = timed(read_table, "synthetic.csv", content, manifest)
        _, t_csv = timed(csv_text, table)
        xlsx, t_xlsx = timed(workbook_bytes, manifest, [table], PackageContext())
        html, t_html = timed(report_html, manifest, [table], ["synthetic.csv"], PackageContext())
        pdf, t_pdf = timed(report_pdf, html)
        _, t_before = timed(cell_by_cell, manifest, [table], PackageContext())
        print(
            f"{rows:>10,} {t_tables:>9.2f} {t_csv:>7.2f} {t_xlsx:>7.2f} {t_html:>7.2f} "
            f"{t_pdf:>7.2f} {len(xlsx) / 1e6:>8.2f} {len(pdf) / 1e3:>7.0f} {t_before:>8.2f} "
            f"{t_xlsx / t_before:>6.2f}"
        )


def mwem_release(frame, schema):
    """MWEM with its defaults: as many synthetic rows as the table has (at most a million)."""
    return run_release("mwem", frame, schema, epsilon=1.0, rng=seeded_source(1))


def least_time(builds, repeat):
    """Each build's least CPU time over `repeat` rounds, the builds taking turns; and what each
    built last."""
    times, made = [[] for _ in builds], [None] * len(builds)
    for _ in range(repeat):
        for k, build in enumerate(builds):
            made[k], spent = timed(build)
            times[k].append(spent)
    return [min(spent) for spent in times], made


def same_files(package, other) -> bool:
    """Whether two packages hold the same files with the same contents: every file byte for
    byte, release.xlsx member by member but for its time stamps (docProps/core.xml),
    report.pdf not compared (it carries its creation time; the same report.html makes it)."""

    def members(xlsx):
        with zipfile.ZipFile(io.BytesIO(xlsx)) as book:
            return {n: book.read(n) for n in book.namelist() if n != "docProps/core.xml"}

    skip = {"report.pdf", "release.xlsx"}
    return (
        set(package) == set(other)
        and all(package[n] == other[n] for n in set(package) - skip)
        and members(package["release.xlsx"]) == members(other["release.xlsx"])
    )


def release_share(sizes, columns, commit, repeat):
    """The package's share of each release, against the package as of `commit`."""
    import weasyprint  # noqa: F401

    old_modules = previous_package(commit)
    rng = np.random.default_rng(1)

    def builders(output):
        context = PackageContext()

        def now():
            return build_package(output.files, output.manifest, context)

        def previous():
            with swapped(old_modules) as old:
                return old.build_package(output.files, output.manifest, context)

        return [now, previous]

    old_zip = getattr(old_modules["mechanisms.package"], "write_zip", zip_before)

    def zips(now, before):
        return [lambda: zipped(write_zip, now), lambda: zipped(old_zip, before)]

    frame, schema = synthetic(2_000, columns, rng)
    _, made = least_time(builders(mwem_release(frame, Schema.from_dict(schema))), 1)  # warm-up
    least_time(zips(*made), 1)
    print(f"previous: mechanisms/package as of {commit}")
    print(
        f"{'rows':>10} {'columns':>7} {'release s':>9} {'package s':>9} {'share':>6} "
        f"{'pkg/rel':>7} {'prev. package s':>15} {'prev. share':>11} {'ratio':>6} {'same':>5} "
        f"{'zip s':>6} {'zip MB':>6} {'prev. zip s':>11} {'prev. zip MB':>12} "
        f"{'worker share':>12} {'prev. worker share':>18}"
    )
    for rows in sizes:
        frame, schema = synthetic(rows, columns, rng)
        output, t_release = timed(mwem_release, frame, Schema.from_dict(schema))
        (t_now, t_before), (now, before) = least_time(builders(output), repeat)
        (z_now, z_before), (mb_now, mb_before) = least_time(zips(now, before), repeat)
        worker, worker_before = t_now + z_now, t_before + z_before
        print(
            f"{rows:>10,} {columns:>7} {t_release:>9.2f} {t_now:>9.2f} "
            f"{t_now / (t_release + t_now):>6.0%} {t_now / t_release:>7.2f} {t_before:>15.2f} "
            f"{t_before / (t_release + t_before):>11.0%} {t_now / t_before:>6.2f} "
            f"{'yes' if same_files(now, before) else 'NO':>5} "
            f"{z_now:>6.2f} {mb_now / 1e6:>6.1f} {z_before:>11.2f} {mb_before / 1e6:>12.1f} "
            f"{worker / (t_release + worker):>12.0%} "
            f"{worker_before / (t_release + worker_before):>18.0%}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", type=int)
    parser.add_argument("--columns", type=int, default=2)
    parser.add_argument("--release", action="store_true", help="the package's share of a release")
    parser.add_argument("--previous", default=PREVIOUS, help="git revision of the previous package")
    parser.add_argument("--repeat", type=int, default=2, help="builds of each package per size")
    args = parser.parse_args(argv)
    if args.release:
        release_share(
            args.rows or [30_000, 100_000, 300_000], args.columns, args.previous, args.repeat
        )
    else:
        parts(args.rows or [10_000, 100_000, 1_000_000], args.columns)


if __name__ == "__main__":
    main()
