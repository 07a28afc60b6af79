"""Time to build a release package (mechanisms.package) as the synthetic table grows.

Made-up rows (uniform ages 17-90, sex drawn 50/50), no data set needed:

    python benchmarks/package_build.py [ROWS ...]      (default 10000 100000 1000000)

Prints one line per size: CPU seconds for the spreadsheet-friendly tables, the CSVs,
release.xlsx (at most 100,000 rows per sheet), report.html and report.pdf, and the sizes of the
workbook and the PDF; then release.xlsx written as before issue 44 (every row appended cell by
cell through openpyxl's write-only sheet, `cell_by_cell` below: the reference) and the ratio
of the two, in the same process on the same table.
"""

import io
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms.package import PackageContext  # noqa: E402
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

MANIFEST = {
    "mechanism": "perturbed_histogram",
    "parameters": {"columns": ["age", "sex"]},
    "guarantee": {"unit": "one row", "neighbouring": "replace-one", "epsilon": 1, "delta": 0},
    "schema": {
        "columns": [
            {"name": "age", "type": "numeric", "lower": 17, "upper": 90, "bins": 8},
            {"name": "sex", "type": "categorical", "categories": ["Female", "Male"]},
        ]
    },
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


def main(sizes):
    rng = np.random.default_rng()
    print(
        f"{'rows':>10} {'tables s':>9} {'csv s':>7} {'xlsx s':>7} {'html s':>7} {'pdf s':>7} "
        f"{'xlsx MB':>8} {'pdf kB':>7} {'before s':>8} {'ratio':>6}"
    )
    for rows in sizes:
        frame = pd.DataFrame(
            {"age": rng.uniform(17, 90, rows), "sex": rng.choice(["Female", "Male"], rows)}
        )
        content = csv_bytes(frame)
        table, t_tables = timed(read_table, "synthetic.csv", content, MANIFEST)
        _, t_csv = timed(csv_text, table)
        xlsx, t_xlsx = timed(workbook_bytes, MANIFEST, [table], PackageContext())
        html, t_html = timed(report_html, MANIFEST, [table], ["synthetic.csv"], PackageContext())
        pdf, t_pdf = timed(report_pdf, html)
        _, t_before = timed(cell_by_cell, MANIFEST, [table], PackageContext())
        print(
            f"{rows:>10,} {t_tables:>9.2f} {t_csv:>7.2f} {t_xlsx:>7.2f} {t_html:>7.2f} "
            f"{t_pdf:>7.2f} {len(xlsx) / 1e6:>8.2f} {len(pdf) / 1e3:>7.0f} {t_before:>8.2f} "
            f"{t_xlsx / t_before:>6.2f}"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10_000, 100_000, 1_000_000])
