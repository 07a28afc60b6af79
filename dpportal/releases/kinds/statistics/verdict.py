"""The custodian-only verdict on a summary-statistics release: good / usable with care / not usable.

CUSTODIAN-ONLY: computed by the worker against the raw table, stored with the utility report,
shown to the dataset's owner alone, never in a package or on an auditor's page.

What is measured, per statistic and group of statistics.csv:

- the planner's promise (`promise_check.promised`: each statistic published and within ±H of
  the truth for groups of at least the rows it assumed): how many of the groups it covers were
  within, judged with the exact binomial tail (`planner.kept`); a covered group whose estimate
  was withheld counts as not within; the truth is the statistic of the clamped present values
  (`mechanisms.statistics.promise.statistic_errors`, `Measured.judged`);
- groups too small: fewer rows than the planner assumed and an interval wider than the
  promised ±H (less accurate than promised), and groups too small to publish, whose 95%
  interval says little: a count's interval reaching 0, a mean's or quantile's covering at
  least `WIDE_SHARE` of the declared range, a sum's, variance's or standard deviation's
  half-width at least the estimate;
- interval width against the estimate: the median over the groups of half-width / |estimate|
  (`WIDE_SHARE` or more: the intervals are wide against what they measure);
- comparisons: for every two groups of a statistic, whether the intervals support the order of
  the estimates (they do not overlap). An order they do not support is said so.

A promise covering no group of the release, or infinite (groups of the assumed size too often
withheld), is not judged.

Grades: the promise not kept for some statistic (fewer within than a release keeping it would
show): not usable. Otherwise good when no group is too small, no intervals are wide and every
order is supported; usable with care, saying which, when not. A release at the planner's ε is
thus never graded not usable for the accuracy it was planned for.
"""

import itertools
import math

import numpy as np
import pandas as pd

from dpportal.releases.kinds.synthetic_verdict import GRADES
from dpportal.releases.packaging import read_csv
from mechanisms import planner
from mechanisms.statistics import selected_request
from mechanisms.statistics.promise import GroupAssumption, statistic_errors

WIDE_SHARE = 0.5  # an interval this wide against the range (or the estimate) says little
EXAMPLES = 3  # unsupported orders named in the reason


def assess(
    schema, columns, frame, files, *, epsilon, neighbouring, params, promise=None
) -> dict | None:
    """The verdict on a release with statistics.csv (None for other releases).

    `params`: the release's parameters (its statistics and groups). `promise`: the planner's
    promises for this release (`promise_check.promised`), one per statistic; None when it
    could not be planned (then no promise is judged).
    """
    if "statistics.csv" not in files:
        return None
    table = read_csv(files["statistics.csv"])
    request = selected_request(schema, params, columns, epsilon=epsilon, neighbouring=neighbouring)
    blocks = _blocks(table, len(request.groups))
    estimates = [_numbers(block["estimate"]).tolist() for block in blocks]
    measured = statistic_errors(frame, schema, request, estimates)
    rows = measured.rows
    labels = [" / ".join(group) or "all rows" for group in request.groups]
    promises = {p.key: p for p in promise or ()}
    facts = {
        "kind": "statistics",
        "groups": len(labels),
        "group_rows": rows.tolist(),
        "statistics": [
            _statistic(schema, stat, block, labels, measured, index, promises.get(stat.text))
            for index, (stat, block) in enumerate(zip(request.statistics, blocks, strict=True))
        ],
    }
    return _grade(facts, labels)


def _numbers(column) -> np.ndarray:
    """A statistics.csv column as floats: a withheld group's empty cell ("too few rows to
    publish") is NaN: not a number to compare or to order."""
    return pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)


def _blocks(table, groups: int) -> list:
    """statistics.csv in per-statistic blocks of one row per group (the release's order)."""
    return [table.iloc[start : start + groups] for start in range(0, len(table), groups)]


def _statistic(schema, stat, block, labels, measured, index, promise) -> dict:
    estimate = _numbers(block["estimate"])
    lower = _numbers(block["ci_lower"])
    upper = _numbers(block["ci_upper"])
    half = (upper - lower) / 2
    says_little = _says_little(schema, stat, estimate, lower, half)
    assumed = promise.assumed_rows if promise is not None else None
    rows = measured.rows
    record = {
        "statistic": stat.text,
        "says_little": [labels[g] for g in np.nonzero(says_little)[0]],
        "smaller_than_assumed": [
            labels[g]
            for g in range(len(labels))
            if assumed
            and rows[g] < assumed
            and (np.isnan(estimate[g]) or half[g] > promise.half_width)  # withheld or wide
        ],
        "relative_width": _relative_width(stat, schema, estimate, half),
        "unsupported": _unsupported(stat.text, labels, estimate, lower, upper),
    }
    if promise is None or not math.isfinite(promise.half_width):
        return record
    group = GroupAssumption(promise.assumed_rows or 1.0, promise.assumed_missing)
    judged = measured.judged(index, group.values(stat, schema))  # withheld: not within
    if len(judged):
        within = int(np.sum(judged <= promise.half_width + 1e-9))
        record["promise"] = {
            "sentence": promise.sentence(),
            "half_width": promise.half_width,
            "within": within,
            "outputs": len(judged),
            "kept": planner.kept(within, len(judged), promise.confidence),
        }
    return record


def _says_little(schema, stat, estimate, lower, half) -> np.ndarray:
    if stat.column is None:
        return lower <= 0
    spec = schema.column(stat.column)
    if stat.kind in ("mean", "quantile"):
        return 2 * half >= WIDE_SHARE * (spec.upper - spec.lower)
    return half >= np.abs(estimate)


def _relative_width(stat, schema, estimate, half) -> float:
    """The median half-width against the estimate (quantiles and means: against the range)."""
    if stat.kind in ("mean", "quantile"):
        spec = schema.column(stat.column)
        return float(np.median(2 * half / (spec.upper - spec.lower)))
    scale = np.maximum(np.abs(estimate), 1e-12)
    return float(np.median(half / scale))


def _unsupported(text, labels, estimate, lower, upper) -> list[dict]:
    """Pairs of groups whose estimates are ordered but whose intervals overlap."""
    out = []
    for i, j in itertools.combinations(range(len(labels)), 2):
        high, low = (i, j) if estimate[i] >= estimate[j] else (j, i)
        if lower[high] <= upper[low] and estimate[high] != estimate[low]:
            out.append({"statistic": text, "higher": labels[high], "lower": labels[low]})
    return out


def _grade(facts: dict, labels) -> dict:
    stats = facts["statistics"]
    broken = [s for s in stats if "promise" in s and not s["promise"]["kept"]]
    if broken:
        first = broken[0]["promise"]
        reason = (
            f"It did not keep the planner's promise ({first['sentence']}): only "
            f"{first['within']} of {first['outputs']} groups were within, far fewer than a "
            "release keeping it would show. Report this: the release does not behave as planned."
        )
        return _graded("bad", reason, facts)
    concerns = _concerns(stats)
    kept = [s["promise"] for s in stats if "promise" in s]
    opening = ""
    if kept:
        within = sum(p["within"] for p in kept)
        total = sum(p["outputs"] for p in kept)
        opening = (
            f"It kept the planner's promises ({within} of its {total} group statistics were "
            f"within their promised ±; for example {kept[0]['sentence']}). "
        )
    if not concerns:
        reason = opening + (
            "Every group is large enough, the intervals are narrow against the estimates and "
            "they support the order of every pair of groups."
        )
        return _graded("good", reason, facts)
    return _graded("care", opening + " ".join(concerns), facts)


def _concerns(stats) -> list[str]:
    concerns = []
    small = sorted({g for s in stats for g in s["smaller_than_assumed"]})
    if small:
        concerns.append(
            f"Groups with fewer rows than the planner assumed ({', '.join(small)}): their "
            "estimates are withheld (too few rows to publish) or less accurate than promised."
        )
    little = [
        f"{s['statistic']} in {', '.join(s['says_little'])}" for s in stats if s["says_little"]
    ]
    if little:
        concerns.append(
            f"Estimates whose 95% intervals say little at this ε (a mean's or quantile's "
            f"covering at least {WIDE_SHARE:.0%} of the declared range, a count's reaching 0, "
            f"another's as wide as the estimate): {'; '.join(little)}. Do not read them as "
            "findings; a larger ε or fewer statistics would narrow them."
        )
    wide = [s["statistic"] for s in stats if s["relative_width"] >= WIDE_SHARE]
    if wide:
        concerns.append(f"Intervals wide against the estimates: {', '.join(wide)}.")
    unsupported = [pair for s in stats for pair in s["unsupported"]]
    if unsupported:
        named = "; ".join(
            f"{p['statistic']}: {p['higher']} above {p['lower']}" for p in unsupported[:EXAMPLES]
        )
        concerns.append(
            f"{len(unsupported)} comparisons between groups are not supported by the intervals "
            f"(they overlap), for example {named}: do not read an order into them."
        )
    return concerns


def _graded(grade: str, reason: str, facts: dict) -> dict:
    return {"grade": grade, "label": GRADES[grade], "reason": reason, **facts}
