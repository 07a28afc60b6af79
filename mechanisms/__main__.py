"""Command line: run a mechanism on a CSV file and a schema, write the public release files.

    python -m mechanisms perturbed-histogram --input data.csv --schema schema.json \
        --epsilon 1 [--rows K] [--seed S] --out DIR

Each subcommand is one row of SUBCOMMANDS: the registered mechanism name and its own options
(each option's value goes into the mechanism's `params` under the option's name). Bad input
prints one line to stderr and exits with status 2; the whole input is checked against the
schema (mechanisms.validation) before any noise is drawn.

The --out folder gets only public files. The custodian record (input file name, its SHA-256,
the number of rows read: all computed from the raw data, so never for publication) is written
outside it, to --custodian-record or by default to OUT.custodian.json beside the folder; its
path is printed to stderr.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mechanisms.accounting import (
    DEFAULT_NEIGHBOURING,
    NEIGHBOURING,
    check_delta,
    check_epsilon,
    float_at_most,
)
from mechanisms.errors import MechanismError
from mechanisms.noise import secure_source, seeded_source
from mechanisms.range_count.api import range_query_csv
from mechanisms.release import file_sha256, json_bytes, run_release, write_release
from mechanisms.schema import CategoricalColumn, Schema
from mechanisms.validation import check_data


@dataclass(frozen=True)
class Option:
    """A mechanism-specific option; its value is passed as params[name]."""

    name: str
    type: type
    help: str


@dataclass(frozen=True)
class Subcommand:
    """A command-line name for a registered mechanism and its own options."""

    mechanism: str
    help: str
    options: tuple[Option, ...] = ()


ROWS = Option("rows", int, "number of synthetic rows to release")
MIX = Option("mix", float, "mixing weight of the uniform component (the paper's delta)")

SUBCOMMANDS = {
    "perturbed-histogram": Subcommand(
        "perturbed_histogram",
        "noisy cell counts and synthetic rows (Wasserman & Zhou 4.2)",
        (ROWS,),
    ),
    "smoothed-histogram": Subcommand(
        "smoothed_histogram",
        "synthetic rows from a smoothed histogram (Wasserman & Zhou 4.1)",
        (ROWS, MIX),
    ),
    "mwem": Subcommand(
        "mwem",
        "synthetic rows fitted to a workload of marginals or ranges (Hardt, Ligett & McSherry)",
        (
            Option("rounds", int, "number of MWEM rounds T (default: from n, epsilon, workload)"),
            Option("workload", str, "workload JSON file (k-way marginals, ranges, boxes, mixes)"),
            Option("marginals", int, "use all K-way marginals as the workload (default 2)"),
            Option("update", str, "damped (default) or paper (the paper's exp step, slower)"),
            Option("output", str, "last (default) or average (the iterates' mean; small domains)"),
        ),
    ),
    "range-count": Subcommand(
        "range_count",
        "private range counts (intervals, boxes, halfspaces) over a grid or point support",
        (
            Option("grid", str, "support grid, e.g. 64x64 (default: the schema's bins)"),
            Option("workload", str, "workload JSON or CSV file of intervals, boxes, halfspaces"),
            Option("random_halfspaces", int, "add M random halfspaces through support points"),
            Option("random_boxes", int, "add M random boxes inside the bounds"),
            Option(
                "mechanism",
                str,
                "auto (default), mn12, mn12_laplace, tree, path_tree, identity or per_query",
            ),
            Option("estimator", str, "mn12/path_tree answers: auto (default), chain or gls"),
        ),
    ),
}


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one sub-parser per row of SUBCOMMANDS."""
    parser = _OneLineParser(prog="python -m mechanisms", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="subcommand", required=True, parser_class=_OneLineParser)
    for name, spec in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=spec.help, description=spec.help)
        p.add_argument("--input", required=True, help="CSV file of the sensitive table")
        p.add_argument("--schema", required=True, help="schema JSON (public bounds/categories)")
        # Kept as text: the exact decimal is rounded down to a float (accounting.float_at_most).
        p.add_argument("--epsilon", required=True, help="privacy loss epsilon > 0")
        p.add_argument("--delta", default="0", help="privacy parameter delta")
        p.add_argument("--neighbouring", choices=NEIGHBOURING, default=DEFAULT_NEIGHBOURING)
        p.add_argument("--columns", help="comma-separated columns (default: all not ignored)")
        p.add_argument("--seed", type=int, help="reproducible, NOT secure noise: tests only")
        p.add_argument("--out", required=True, help="output folder (public files only)")
        p.add_argument(
            "--custodian-record",
            dest="custodian_record",
            help="custodian-only JSON (input hash, rows) outside --out "
            "(default: OUT.custodian.json)",
        )
        for option in spec.options:
            p.add_argument(
                f"--{option.name.replace('_', '-')}",
                dest=option.name,
                type=option.type,
                help=option.help,
            )
    q = sub.add_parser("range-query", help="answer new ranges from a released structure (free)")
    q.add_argument("--structure", required=True, help="structure.json of a range-count release")
    q.add_argument("--query", required=True, help="JSON or CSV file of intervals/boxes/halfspaces")
    q.add_argument("--estimator", choices=("auto", "chain", "gls"), help="default: the structure's")
    return parser


def read_table(path: str, schema: Schema, columns: list[str]) -> pd.DataFrame:
    """Read the needed columns of a CSV; categorical columns as text."""
    text_columns = {n: str for n in columns if isinstance(schema.column(n), CategoricalColumn)}
    wanted = set(columns)
    try:
        return pd.read_csv(path, usecols=lambda c: c in wanted, dtype=text_columns)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise MechanismError(f"input file ({path!r}) cannot be read as CSV: {reason}") from None


def run(args: argparse.Namespace) -> list:
    """Run the chosen subcommand; return the paths written."""
    if args.subcommand == "range-query":
        print(range_query_csv(args.structure, args.query, args.estimator), end="")
        return []
    spec = SUBCOMMANDS[args.subcommand]
    epsilon = check_epsilon(args.epsilon, allow_infinite=False)  # inf (no noise): tests only
    check_delta(args.delta)
    delta = float_at_most(args.delta)  # validated just above; rounded down like epsilon
    schema = Schema.load(args.schema)
    columns = schema.resolve_columns(args.columns.split(",") if args.columns else None)
    record = custodian_record_path(args.out, args.custodian_record)
    data = read_table(args.input, schema, columns)
    problems = check_data(data, schema, columns)
    if problems:
        raise MechanismError(
            f"input file ({args.input!r}) does not fit the schema: " + "; ".join(problems)
        )
    params = {
        o.name: getattr(args, o.name) for o in spec.options if getattr(args, o.name) is not None
    }
    rng = secure_source() if args.seed is None else seeded_source(args.seed)
    output = run_release(
        spec.mechanism,
        data,
        schema,
        epsilon=epsilon,
        delta=delta,
        neighbouring=args.neighbouring,
        columns=columns,
        params=params,
        rng=rng,
    )
    output.manifest["random_source"] = "secure" if args.seed is None else "seeded: NOT private"
    paths = write_release(output, args.out)
    write_custodian_record(
        record,
        {
            "input_file": str(args.input),
            "input_sha256": file_sha256(args.input),
            "rows_read": len(data),
            "mechanism": spec.mechanism,
            "public_folder": str(args.out),
        },
    )
    return paths


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


def write_custodian_record(path: Path, record: dict) -> None:
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


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        paths = run(args)
    except MechanismError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
