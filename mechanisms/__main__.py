"""Command line: run a mechanism on a CSV file and a schema, write the public release files.

    python -m mechanisms perturbed-histogram --input data.csv --schema schema.json \
        --epsilon 1 [--rows K] [--seed S] --out DIR
    python -m mechanisms dp-schema-estimate --input data.csv --schema names.json \
        --epsilon 0.1 [--kind categorical --delta 1e-6] --out DIR   # bounds or categories
    python -m mechanisms risk --epsilon 1 [--delta D] [--unit row|person] \
        [--neighbouring add-remove|replace-one]    # the risk in words (mechanisms.risk)
    python -m mechanisms verify RECORD [--key KEY]  # a dataset's public record, offline
                                                    # (mechanisms.record_verify): exit 0 or 1
    python -m mechanisms plan perturbed-histogram --schema schema.json --row-count 2000 \
        --target 20    # the epsilon that reaches ±20 rows, or why none does (mechanisms.plan_cli)

Each subcommand is one row of mechanisms.catalogue.CATALOGUE, its options the row's parameter
schema (each option's value goes into the mechanism's `params` under the parameter's name).
Bad input prints one line to stderr and exits with status 2; the whole input is checked against the
schema (mechanisms.validation) before any noise is drawn.

The --out folder gets only public files: the same package as the portal's download
(mechanisms.package: spreadsheet-friendly CSVs, manifest.json, README.txt, report.html,
report.pdf, release.xlsx). --input may also be a Parquet file or folder, a PostgreSQL table
written postgresql://user@host:port/db?table=schema.name, or a Spark catalog table written
spark-table:db.name; --engine (inprocess, the default, duckdb, postgres, dask, spark:
mechanisms.counting) then counts the rows into cells where they
live, for the mechanisms that need only cell counts. The custodian record (input file name,
its SHA-256, the number of rows read: all computed from the raw data, so never for
publication) is written outside it, to --custodian-record or by default to OUT.custodian.json
beside the folder; its path is printed to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import io
import sys
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

from mechanisms.accounting import (
    DEFAULT_NEIGHBOURING,
    NEIGHBOURING,
    check_delta,
    check_epsilon,
    float_at_most,
)
from mechanisms.archives import (
    ChunkStream,
    open_archive,
    refuse_other_compressor,
    unpacked_chunks,
)
from mechanisms.catalogue import CATALOGUE, MechanismSpec, run_release
from mechanisms.chunks import EngineTable
from mechanisms.counting import ENGINES, engine_table, table_source
from mechanisms.counting.source import POSTGRES_SCHEMES, SPARK_TABLE_SCHEME
from mechanisms.errors import MechanismError
from mechanisms.noise import secure_source, seeded_source
from mechanisms.package import PackageContext, write_package
from mechanisms.plan_cli import add_parameter_options, add_plan_parser, run_plan
from mechanisms.public_record import key_argument
from mechanisms.range_count.api import range_query_csv
from mechanisms.record_verify import report_lines, verify
from mechanisms.release import file_sha256, json_bytes
from mechanisms.risk import UNITS, risk_report
from mechanisms.schema import NumericColumn, Schema
from mechanisms.validation import check_data

DEFAULT_MAX_INPUT_MB = 4096


def subcommands() -> dict[str, MechanismSpec]:
    """One subcommand per catalogue row: its name with hyphens ("perturbed-histogram")."""
    return {name.replace("_", "-"): spec for name, spec in CATALOGUE.items()}


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per catalogue row."""
    parser = _OneLineParser(prog="python -m mechanisms", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="subcommand", required=True, parser_class=_OneLineParser)
    for name, spec in subcommands().items():
        p = sub.add_parser(name, help=spec.summary, description=spec.summary)
        p.add_argument(
            "--input",
            required=True,
            help="CSV or TSV file of the sensitive table (also .csv.gz, .tsv.gz, or a .zip "
            "holding one of them); or a Parquet file or folder; or a PostgreSQL table as "
            "postgresql://user@host:port/db?table=schema.name; or a Spark catalog table as "
            "spark-table:db.name (counted by --engine)",
        )
        p.add_argument(
            "--engine",
            choices=sorted(ENGINES),
            help="where Parquet or PostgreSQL rows are counted into cells (default inprocess; "
            "duckdb: local Parquet; postgres: a GROUP BY inside the database; dask, spark: "
            "on the cluster DPPORTAL_DASK_SCHEDULER or DPPORTAL_SPARK_REMOTE names)",
        )
        p.add_argument(
            "--max-input-mb",
            dest="max_input_mb",
            type=int,
            default=DEFAULT_MAX_INPUT_MB,
            help=f"largest compressed input, unpacked, in MB (default {DEFAULT_MAX_INPUT_MB})",
        )
        p.add_argument("--schema", required=True, help="schema JSON (public bounds/categories)")
        # Kept as text: the exact decimal is rounded down to a float (accounting.float_at_most).
        p.add_argument("--epsilon", required=True, help="privacy loss epsilon > 0")
        p.add_argument("--delta", default="0", help="privacy parameter delta")
        p.add_argument(
            "--neighbouring",
            choices=NEIGHBOURING,
            help=f"default {DEFAULT_NEIGHBOURING}; add-remove when the schema has a person column",
        )
        p.add_argument(
            "--max-rows-per-person",
            type=int,
            help="override the schema's max_rows_per_person (needs a person_id column)",
        )
        p.add_argument("--columns", help="comma-separated columns (default: all not ignored)")
        p.add_argument("--seed", type=int, help="reproducible, NOT secure noise: tests only")
        p.add_argument("--out", required=True, help="output folder (public files only)")
        p.add_argument(
            "--custodian-record",
            dest="custodian_record",
            help="custodian-only JSON (input hash, rows) outside --out "
            "(default: OUT.custodian.json)",
        )
        add_parameter_options(p, spec)
    q = sub.add_parser("range-query", help="answer new ranges from a released structure (free)")
    q.add_argument("--structure", required=True, help="structure.json of a range-count release")
    q.add_argument("--query", required=True, help="JSON or CSV file of intervals/boxes/halfspaces")
    q.add_argument("--estimator", choices=("auto", "chain", "gls"), help="default: the structure's")
    add_plan_parser(sub, _OneLineParser)
    r = sub.add_parser("risk", help="the risk of a release in words (no data read, free)")
    r.add_argument("--epsilon", required=True, help="privacy loss epsilon >= 0")
    r.add_argument("--delta", default="0", help="privacy parameter delta in [0, 1) (default 0)")
    r.add_argument("--unit", choices=UNITS, default="row", help="protected unit (default row)")
    r.add_argument(
        "--neighbouring",
        choices=NEIGHBOURING,
        default=DEFAULT_NEIGHBOURING,
        help=f"neighbouring relation (default {DEFAULT_NEIGHBOURING})",
    )
    v = sub.add_parser("verify", help="check a dataset's public record offline (exit 0 or 1)")
    v.add_argument("record", help="the record's folder or zip (record.zip from the portal)")
    v.add_argument("--key", help="the portal's public key: 64 hex digits or a PEM file")
    return parser


def read_table(
    path: str, schema: Schema, columns: list[str], *, max_bytes: int = DEFAULT_MAX_INPUT_MB << 20
) -> pd.DataFrame:
    """Read the needed columns of a CSV or TSV; categorical and date columns as text.

    The file may be compressed with gzip or be alone in a zip: it is unpacked as a stream, at
    most `max_bytes` (see mechanisms.archives). Only an empty field is a missing value (as in
    the portal): "NA" or "null" stay text, so a category "NA" is kept and a numeric column
    holding "NA" is refused by name.
    """
    text_columns = {
        n: str
        for n in columns
        if not isinstance(spec := schema.columns[n], NumericColumn) or spec.part is not None
    }
    wanted = set(columns)
    if schema.person is not None:  # read, bounded, then dropped by run_release (never released)
        text_columns[schema.person.column] = str
        wanted.add(schema.person.column)
    try:
        with open(path, "rb") as handle:
            refuse_other_compressor(handle.read(8))
        archive = open_archive(Path(path), Path(path).name)
        name = archive.inner_name if archive else path
        if Path(name).suffix.lower() == ".xlsx":
            raise MechanismError(
                f"input file ({path!r}) is an Excel workbook; the command line reads CSV or TSV: "
                "save the sheet as CSV."
            )
        separator = "\t" if Path(name).suffix.lower() == ".tsv" else ","

        def opened() -> Any:
            if archive is None:
                return path
            return io.BufferedReader(ChunkStream(unpacked_chunks(archive, max_bytes=max_bytes)))

        check_field_counts(opened(), separator, path)
        return pd.read_csv(
            opened(),
            usecols=lambda c: c in wanted,
            dtype=text_columns,
            sep=separator,
            compression=None,
            keep_default_na=False,
            na_values=[""],
        )
    except MechanismError:
        raise
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise MechanismError(f"input file ({path!r}) cannot be read as CSV: {reason}") from None


def check_field_counts(source: Any, separator: str, path: str) -> None:
    """Refuse a file with a row of more or fewer fields than its header names columns.

    pandas reads such rows without a word: a comma at the end of every data line made it take
    the first column as the row labels, every value one column to the left (issue 44's
    hostile inputs); an extra field in a later row was dropped, a missing one made empty. The
    portal refuses them (dpportal.ingest.text); so does the command line now. Read by
    pyarrow's CSV parser, which counts the fields of every row, block by block (quoted line
    breaks allowed); the rows themselves are not kept, and the message quotes none.
    """
    found: list[Any] = []

    def note(row: Any) -> str:
        found.append(row)
        return "skip"

    try:
        with pa_csv.open_csv(
            source,
            # the header read as a row: its fields set the count; no value is converted but
            # the first field of each row (never an error)
            read_options=pa_csv.ReadOptions(
                use_threads=False, block_size=1 << 24, autogenerate_column_names=True
            ),
            parse_options=pa_csv.ParseOptions(
                delimiter=separator, newlines_in_values=True, invalid_row_handler=note
            ),
            convert_options=pa_csv.ConvertOptions(
                include_columns=["f0"], column_types={"f0": pa.string()}
            ),
        ) as reader:
            for _ in reader:
                if found:
                    break
    except pa.ArrowInvalid:  # an empty file, say: pandas' reading below says what is wrong
        return
    if found:
        row = found[0]
        separator_name = "tab" if separator == "\t" else "comma"
        if row.actual_columns > row.expected_columns:
            fix = (
                f"quote values that contain a {separator_name}; a {separator_name} at the end "
                "of each line adds an empty column: remove it"
            )
        else:
            fix = f"an empty value is written as nothing between two {separator_name}s"
        raise MechanismError(
            f"input file ({path!r}): row {row.number} (the header is row 1) has "
            f"{row.actual_columns} value{'' if row.actual_columns == 1 else 's'} where the "
            f"header names {row.expected_columns} columns; every row needs one value per column "
            f"({fix})."
        )


def run(args: argparse.Namespace) -> list[Any]:
    """Run the chosen subcommand; return the paths written."""
    if args.subcommand == "range-query":
        print(range_query_csv(args.structure, args.query, args.estimator), end="")
        return []
    if args.subcommand == "risk":
        print(risk_report(args.epsilon, args.delta, args.unit, args.neighbouring), end="")
        return []
    spec = subcommands()[args.subcommand]
    epsilon = check_epsilon(args.epsilon, allow_infinite=False)  # inf (no noise): tests only
    check_delta(args.delta)
    delta = float_at_most(args.delta)  # validated just above; rounded down like epsilon
    schema = Schema.load(args.schema, args.max_rows_per_person)
    columns = schema.resolve_columns(
        args.columns.split(",") if args.columns else None, undescribed=spec.describes_schema
    )
    record = custodian_record_path(args.out, args.custodian_record)
    data, facts = (
        engine_input(args)
        if counted_where_it_lives(args.input)
        else csv_input(args, schema, columns, checked=not spec.describes_schema)
    )
    params = {
        o.name: getattr(args, o.name) for o in spec.parameters if getattr(args, o.name) is not None
    }
    rng = secure_source() if args.seed is None else seeded_source(args.seed)
    output = run_release(
        spec.name,
        data,
        schema,
        epsilon=epsilon,
        delta=delta,
        neighbouring=args.neighbouring or default_neighbouring(schema),
        columns=columns,
        params=params,
        rng=rng,
        max_rows_per_person=args.max_rows_per_person,
    )
    output.manifest["random_source"] = "secure" if args.seed is None else "seeded: NOT private"
    context = PackageContext(
        title=f"Differentially private release: {spec.title}",
        made_on=datetime.date.today().isoformat(),
    )
    paths = write_package(output, args.out, context)
    write_custodian_record(
        record,
        {
            **facts,
            "mechanism": spec.name,
            "public_folder": str(args.out),
            **output.custodian,
        },
    )
    return paths


def counted_where_it_lives(text: str) -> bool:
    """Whether --input names a PostgreSQL or Spark table or Parquet data (else a CSV-like file)."""
    path = Path(text)
    return (
        text.startswith((*POSTGRES_SCHEMES, SPARK_TABLE_SCHEME))
        or path.is_dir()
        or path.suffix == ".parquet"
    )


def engine_input(args: argparse.Namespace) -> tuple[EngineTable, dict[str, Any]]:
    """The table --input names, counted by --engine where it lives; custodian facts."""
    source = table_source(args.input)
    engine = args.engine or "inprocess"
    return engine_table(source, engine), {"input": source.describe(), "counting_engine": engine}


def csv_input(
    args: argparse.Namespace, schema: Schema, columns: list[str], *, checked: bool = True
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The CSV --input and custodian facts (hash, rows read).

    The rows are checked against the schema unless not `checked` (a DP estimate of the
    metadata the schema lacks).
    """
    if args.engine not in (None, "inprocess"):
        raise MechanismError(
            f"--engine {args.engine} counts a Parquet file or folder or a PostgreSQL table; "
            f"input ({args.input!r}) is read as CSV"
        )
    data = read_table(args.input, schema, columns, max_bytes=args.max_input_mb << 20)
    problems = check_data(data, schema, columns) if checked else []
    if problems:
        raise MechanismError(
            f"input file ({args.input!r}) does not fit the schema: " + "; ".join(problems)
        )
    facts = {
        "input_file": str(args.input),
        "input_sha256": file_sha256(args.input),
        "rows_read": len(data),
    }
    return data, facts


def default_neighbouring(schema: Schema) -> str:
    """add-remove one person when the schema has a person column, else the global default."""
    return "add-remove" if schema.person is not None else DEFAULT_NEIGHBOURING


def custodian_record_path(out: str, given: str | None) -> Path:
    """Where the custodian record goes: `given`, or OUT.custodian.json; never inside OUT."""
    folder = Path(out).resolve()
    path = Path(given).resolve() if given else folder.with_name(folder.name + ".custodian.json")
    if path == folder or folder in path.parents:
        raise MechanismError(
            f"custodian record ({str(path)!r}) must be outside the public "
            f"output folder ({str(folder)!r}); choose another path"
        )
    return path


def write_custodian_record(path: Path, record: dict[str, Any]) -> None:
    """Write the custodian-only record and say on stderr where it went."""
    try:
        path.write_bytes(json_bytes(record))
    except OSError as exc:
        raise MechanismError(
            f"custodian record ({str(path)!r}) cannot be written: {exc.strerror}"
        ) from None
    print(
        f"custodian record (input hash and row count, NOT for publication): {path}", file=sys.stderr
    )


def verify_record(args: argparse.Namespace) -> int:
    """`verify`: print the verdict; 0 when the record verifies, 1 when it does not."""
    outcome = verify(args.record, key_argument(args.key) if args.key else None)
    for line in report_lines(args.record, outcome):
        print(line)
    return 1 if outcome.problems else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        if args.subcommand == "verify":
            return verify_record(args)
        if args.subcommand == "plan":
            return run_plan(args)
        paths = run(args)
    except MechanismError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
