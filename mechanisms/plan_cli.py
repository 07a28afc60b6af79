"""The command line's `plan` subcommand: the ε that reaches a target accuracy, or why none does.

    python -m mechanisms plan perturbed-histogram --schema schema.json --row-count 2000 \
        --target 20 [--confidence 0.95] [--columns a,b] [--cap 10]
    python -m mechanisms plan statistics --schema s.json --row-count 406 --stat mean:age \
        --by sex --target "mean:age=2,count=20" [--group-rows 150] [--missing-share 0.1]
    python -m mechanisms plan range-count --schema s.json --row-count 2000 --grid 32x32 \
        --workload boxes.csv --target 40 [--crowding 3]

One sub-subcommand per kind the planner plans (`planner.KINDS`: every catalogue row but the
budgeted schema estimate, whose output is bounds and categories, not counts with a target
accuracy), with that row's parameters as options (as the release's own subcommand has them).
It reads the schema and the public settings only, never data, and spends nothing
(`mechanisms.planner`). It prints the ε and the promise it makes (exit status 0), or why no ε
up to the cap reaches the target (exit status 1); bad input: one line on stderr, exit status 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from mechanisms.accounting import DEFAULT_NEIGHBOURING, NEIGHBOURING, check_delta, float_at_most
from mechanisms.catalogue import CATALOGUE, MechanismSpec
from mechanisms.errors import MechanismError
from mechanisms.planner import (
    CONFIDENCE,
    DEFAULT_CROWDING,
    EPSILON_CAP,
    KINDS,
    Assumptions,
    PlanRequest,
    Proposal,
    plan_epsilon,
)
from mechanisms.schema import Schema


def add_plan_parser(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """The `plan` subcommand, with one sub-subcommand per kind the planner plans."""
    plan = sub.add_parser(
        "plan", help="the epsilon that reaches a target accuracy (no data read, free)"
    )
    # dest "planned", not "kind": a kind's own options may have that name (as --kind does)
    kinds = plan.add_subparsers(dest="planned", required=True, parser_class=parser_class)
    for name in KINDS:
        spec = CATALOGUE[name]
        p = kinds.add_parser(name.replace("_", "-"), help=spec.summary, description=spec.summary)
        _common_options(p)
        add_parameter_options(p, spec)


def add_parameter_options(p: argparse.ArgumentParser, spec: MechanismSpec) -> None:
    """One option per parameter of a catalogue row (its params key, with hyphens)."""
    for option in spec.parameters:
        p.add_argument(
            f"--{option.name.replace('_', '-')}",
            dest=option.name,
            type=option.type,
            help=option.help,
            action="append" if option.repeat else "store",
        )


def _common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--schema", required=True, help="schema JSON (public bounds/categories)")
    p.add_argument(
        "--row-count",
        dest="row_count",
        type=int,
        required=True,
        help="the number of rows (public under replace-one; otherwise your own count, "
        "kept to yourself)",
    )
    p.add_argument(
        "--target",
        required=True,
        help="the accuracy needed: ±T (rows for counts; each statistic in its own unit), or "
        "per statistic as stat=T pairs, e.g. mean:age=2,count=20",
    )
    p.add_argument(
        "--confidence", type=float, default=CONFIDENCE, help="default 0.95: 95 in 100 outputs"
    )
    p.add_argument("--columns", help="comma-separated columns (default: all not ignored)")
    p.add_argument("--delta", default="0", help="privacy parameter delta (default 0)")
    p.add_argument(
        "--neighbouring",
        choices=NEIGHBOURING,
        help=f"default {DEFAULT_NEIGHBOURING}; add-remove when the schema has a person column",
    )
    p.add_argument(
        "--max-rows-per-person",
        dest="max_rows_per_person",
        type=int,
        help="the most rows one person may contribute (overrides the schema's)",
    )
    p.add_argument("--cap", type=float, default=EPSILON_CAP, help="largest epsilon to propose")
    p.add_argument(
        "--crowding",
        type=float,
        default=DEFAULT_CROWDING,
        help=f"range counts: rows at most this many times as dense as an even spread "
        f"where a range cuts a cell (default {DEFAULT_CROWDING:g})",
    )
    p.add_argument(
        "--group-rows",
        dest="group_rows",
        type=float,
        help="statistics: the fewest rows a group holds (default: row count / groups)",
    )
    p.add_argument(
        "--missing-share",
        dest="missing_share",
        type=float,
        default=0.0,
        help="statistics: the largest share of a group's values missing (default 0)",
    )


def run_plan(args: argparse.Namespace) -> int:
    """Plan, print the answer; 0 when an ε reaches the target, 1 when none does."""
    name = args.planned.replace("-", "_")
    spec = CATALOGUE[name]
    schema = Schema.load(args.schema, args.max_rows_per_person)
    check_delta(args.delta)
    params = {
        o.name: getattr(args, o.name) for o in spec.parameters if getattr(args, o.name) is not None
    }
    request = PlanRequest(
        kind=name,
        schema=schema,
        columns=tuple(args.columns.split(",")) if args.columns else (),
        params=params,
        n=args.row_count,
        delta=float_at_most(args.delta),
        neighbouring=args.neighbouring
        or ("add-remove" if schema.person is not None else DEFAULT_NEIGHBOURING),
        confidence=args.confidence,
        max_rows_per_person=args.max_rows_per_person,
        assumptions=Assumptions(args.crowding, args.group_rows, args.missing_share),
    )
    proposal = plan_epsilon(request, parse_target(args.target), cap=args.cap)
    print(proposal_text(proposal))
    return 0 if proposal.epsilon is not None else 1


def parse_target(text: str) -> float | dict[str, float]:
    """`--target`: one number, or stat=T pairs separated by commas."""
    if "=" not in text:
        return _number(text, "target")
    targets: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        if not key.strip() or not value.strip():
            raise MechanismError(f"target ({part!r}) must read stat=T, e.g. mean:age=2")
        targets[key.strip()] = _number(value, f"target for {key.strip()}")
    return targets


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise MechanismError(f"{what} ({text!r}) must be a number, e.g. 20") from None


def proposal_text(proposal: Proposal) -> str:
    """The lines printed: the ε, the settings to give the release, each promise; or why not."""
    if proposal.epsilon is None:
        return f"no epsilon: {proposal.reason}"
    lines = [f"epsilon {proposal.epsilon:g}"]
    settings = {k: v for p in proposal.promises for k, v in p.settings.items()}
    lines += [f"with --{k.replace('_', '-')} {v}" for k, v in settings.items()]
    lines += [f"promise: {p.sentence()}" for p in proposal.promises]
    return "\n".join(lines)
