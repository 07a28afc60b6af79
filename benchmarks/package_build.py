"""Time to build a release package (mechanisms.package) as the synthetic table grows.

Made-up rows, no data set needed:

    python benchmarks/package_build.py [--columns C] [ROWS ...]   (default 2; 10000 100000 1000000)
    python benchmarks/package_build.py --release [--columns C] [ROWS ...]

The first form prints one line per size for a synthetic table of C columns (half numeric with
two decimals, half categorical with four values): CPU seconds for the spreadsheet-friendly
tables, the CSVs, release.xlsx (at most 100,000 rows per sheet), report.html and report.pdf,
the sizes of the workbook and the PDF; then release.xlsx written as before issue 44 (every row
appended cell by cell through openpyxl's write-only sheet, `cell_by_cell` below) and the ratio
of the two, in the same process on the same table.

`--release` prints the package's share of a whole release as the command line makes it: an
MWEM release of ROWS synthetic rows from a table of ROWS rows and C columns (`run_release`),
then its package (`build_package`), CPU seconds; beside it the package as it was built before
its tables, CSVs and workbook rows went through pyarrow (the `reference_*` functions below:
pandas reading and parsing every cell, pandas writing the CSVs, the workbook's rows as pandas
string columns with cell references), in the same process on the same release, and the ratio of the two packages.
"""

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mechanisms.package as package  # noqa: E402
from mechanisms import Schema  # noqa: E402
from mechanisms.catalogue import run_release  # noqa: E402
from mechanisms.csv_safety import escape_cell  # noqa: E402
from mechanisms.noise import seeded_source  # noqa: E402
from mechanisms.package import PackageContext, build_package  # noqa: E402
from mechanisms.package import tables as package_tables  # noqa: E402
from mechanisms.package import workbook as package_workbook  # noqa: E402
from mechanisms.package.report import report_html, report_pdf  # noqa: E402
from mechanisms.package.tables import csv_text, read_table  # noqa: E402
from mechanisms.package.workbook import (  # noqa: E402
    _NOT_XML,
    MAX_ROWS,
    _cell,
    _letter,
    _table_sheet,
    _with_rows,
    sheet_name,
    workbook_bytes,
)
from mechanisms.release import csv_bytes  # noqa: E402

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


# ------------------------------------------------ the reference package (before pyarrow)


def reference_typed_column(name, cells, column, columns, whole, sd):
    """Every column parsed as numbers first, categorical ones too."""
    categorical = column is not None and column.get("type") == "categorical"
    numbers = pd.to_numeric(cells, errors="coerce").replace([np.inf, -np.inf], np.nan)
    if not categorical and len(cells) and bool((numbers.notna() | (cells == "")).all()):
        return package_tables._rounded(name, numbers.astype(float), column, whole, sd)
    texts = {c: package_tables._text(c, columns) for c in cells.unique()}
    return cells.map(texts)


def reference_cells(content):
    """Every cell read by pandas as text."""
    return pd.read_csv(io.BytesIO(content), dtype=str, keep_default_na=False, encoding="utf-8-sig")


def reference_csv_text(table):
    """The CSV written by pandas."""
    frame = table.frame.copy()
    for name in table.header:
        if not table.is_numeric(name):
            frame[name] = frame[name].map({v: escape_cell(v) for v in frame[name].unique()})
    frame.columns = pd.Index([escape_cell(h) for h in table.header])
    return frame.to_csv(index=False, lineterminator="\r\n").encode("utf-8")


def reference_rows_xml(table):
    """The workbook's rows as pandas string columns, each cell with its reference."""
    head = table.frame.head(MAX_ROWS)
    numbers = pd.Series(np.arange(2, len(head) + 2).astype(str), index=head.index)
    rows = '<row r="' + numbers + '">'
    for k, name in enumerate(table.header):
        values = head[name]
        text = values.astype(object).astype(str)
        ref = '<c r="' + _letter(k) + numbers
        if table.is_numeric(name):
            cells = ref + '" t="n"><v>' + text + "</v></c>"
        else:
            text = text.str.replace(_NOT_XML, "", regex=True).str.replace("&", "&amp;")
            text = text.str.replace("<", "&lt;").str.replace(">", "&gt;")
            cells = ref + '" t="inlineStr"><is><t xml:space="preserve">' + text + "</t></is></c>"
        rows = rows + cells.where(values.notna() & (text != ""), ref + '"/>')
    return "".join((rows + "</row>").tolist())


@contextlib.contextmanager
def reference_package():
    """Build packages with the reference_* functions, for the `with` block."""
    swaps = [
        (package_tables, "_cells", reference_cells),
        (package_tables, "_typed_column", reference_typed_column),
        (package_workbook, "_rows_xml", reference_rows_xml),
        (package, "csv_text", reference_csv_text),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, value in swaps:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


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
    """MWEM with its defaults: as many synthetic rows as the table has."""
    return run_release("mwem", frame, schema, epsilon=1.0, rng=seeded_source(1))


def release_share(sizes, columns):
    """The package's share of each release; the PDF library is loaded first, as a worker that
    has built one package has it (loading it takes about 0.7 s, once per worker process, and
    would otherwise fall on the first package timed only)."""
    import weasyprint  # noqa: F401

    rng = np.random.default_rng(1)
    print(
        f"{'rows':>10} {'columns':>7} {'release s':>9} {'package s':>9} {'share':>6} "
        f"{'ref. package s':>14} {'ref. share':>10} {'ratio':>6}"
    )
    for rows in sizes:
        frame, schema = synthetic(rows, columns, rng)
        output, t_release = timed(mwem_release, frame, Schema.from_dict(schema))
        context = PackageContext()
        now, t_now = timed(build_package, output.files, output.manifest, context)
        with reference_package():
            before, t_before = timed(build_package, output.files, output.manifest, context)
        assert set(now) == set(before)
        print(
            f"{rows:>10,} {columns:>7} {t_release:>9.2f} {t_now:>9.2f} "
            f"{t_now / (t_release + t_now):>6.0%} {t_before:>14.2f} "
            f"{t_before / (t_release + t_before):>10.0%} {t_now / t_before:>6.2f}"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="*", type=int)
    parser.add_argument("--columns", type=int, default=2)
    parser.add_argument("--release", action="store_true", help="the package's share of a release")
    args = parser.parse_args(argv)
    if args.release:
        release_share(args.rows or [30_000, 100_000, 300_000], args.columns)
    else:
        parts(args.rows or [10_000, 100_000, 1_000_000], args.columns)


if __name__ == "__main__":
    main()
