"""The planner's promise at its own ε, measured: the figures of tests/mechanisms/test_planner_promise.py.

One row per case of tests/mechanisms/planner_cases.py (every catalogue kind and person level,
on several public and made-up tables): the target, the ε the planner proposes for it, N
releases at that ε (secure source), the mean over the releases of the share of outputs within
±target (the promise: at least 95%) with its standard error, and the broken twin's promise at
the same ε with the share of the same outputs within it (the test requires the twin to fall
short of 95% by more than 4.265 standard errors). "N for the twin": the releases the twin
check needs to miss the twin with probability at most 1e-5, from this run's figures: N >=
((Z + Z) s / (C - m))^2, m and s the twin's mean and per-release spread, Z = 4.265 (the
figure the cases' `releases` are set from, with a margin).

    nice -n 10 .venv/bin/python benchmarks/planner_promise.py [--only KIND] [--releases N]
"""

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mechanisms import planner  # noqa: E402
from mechanisms.noise import secure_source  # noqa: E402
from tests.mechanisms import planner_cases as cases  # noqa: E402


def needed(values, confidence: float) -> str:
    """The releases a twin check needs to miss it with probability at most 1e-5 (docstring)."""
    mean, spread = float(values.mean()), float(values.std(ddof=1))
    if mean >= confidence:
        return "never caught"
    return f"{math.ceil((2 * cases.Z * spread / (confidence - mean)) ** 2)}"


def row(case) -> str:
    started = time.perf_counter()
    request = cases.request(case)
    proposal = planner.plan_epsilon(request, case.target)
    if proposal.epsilon is None:
        return f"| {case.kind} | {case.label} | no ε: {proposal.reason} |"
    targets = cases.targets(case, proposal.promises)
    within = {"planned": targets}
    if case.twin:
        within["twin"] = {case.twin_key: cases.twin_targets(case, proposal.epsilon)[case.twin_key]}
    params = cases.release_params(case, proposal)
    measured = cases.shares(case, proposal.epsilon, params, within, secure_source())
    kept = "; ".join(
        f"{key or 'all'} ±{targets[key]:g}: {mean:.3f} ± {error:.3f}"
        for key, values in measured["planned"].items()
        for mean, error in [cases.summary(values)]
    )
    twin, enough = "—", "—"
    if case.twin:
        values = measured["twin"][case.twin_key]
        mean, error = cases.summary(values)
        twin = f"{case.twin} ±{within['twin'][case.twin_key]:.3g}: {mean:.3f} ± {error:.3f}"
        enough = needed(values, request.confidence)
    seconds = time.perf_counter() - started
    return (
        f"| {case.kind} | {case.label} | {proposal.epsilon:g} | {case.releases} | {kept} | "
        f"{twin} | {enough} | {seconds:.0f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="cases whose kind or label contains this")
    parser.add_argument("--releases", type=int, help="N for every case (default: the test's)")
    args = parser.parse_args()
    print(
        "| kind | table | ε | N | share within ±target (mean ± s.e.) | twin | N for the twin "
        "| time |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in cases.cases():
        if args.only and args.only not in str(case):
            continue
        if args.releases:
            case = dataclasses.replace(case, releases=args.releases)
        print(row(case), flush=True)


if __name__ == "__main__":
    main()
