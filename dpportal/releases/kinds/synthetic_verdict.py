"""The custodian-only verdict on a synthetic-data release: good / usable with care / not usable.

CUSTODIAN-ONLY: computed by the worker against the raw table, stored with the utility report,
shown to the dataset's owner alone, never in a package or on an auditor's page.

What is measured: the total variation distance (TVD) between the release's synthetic rows and
the raw table on the tables a user will read first, every pair of released columns (up to
`MAX_PAIRS`; each column on its own when one column is released), and on each column alone.
Two yardsticks, both computed here on the raw data:

- the **sampling floor**: the same TVDs for `FLOOR_DRAWS` resamples (with replacement) of as
  many raw rows as the release has synthetic rows. No release can be expected to do better
  than a fresh sample of the same size;
- the **trivial baseline**: independent noisy one-way counts at the release's ε (each column's
  counts with discrete Laplace noise of scale sensitivity·d/ε, clipped at zero, rows drawn
  from their product), `BASELINE_DRAWS` times. A release that does not beat it has learnt
  nothing about how the columns go together.

The planner's promise (`promise`, from `promise_check`: its counts within ±H, checked on the
noisy counts or MWEM's measured counts) comes first: broken (fewer within than a release
keeping it would show, `planner.kept`) or vacuous (±H at least an average count): not usable.
A release that kept it is never graded not usable for what the planner does not promise
(the synthetic rows' tables): those shortfalls make it usable with care, and the reason says
which tables.

Grades of the synthetic rows (in this order): an average pair TVD that does not beat the
baseline by at least `BEAT_MARGIN` × the floor (less is within sampling noise), or any column,
any table or the average above `UNUSABLE_TVD`: not usable (usable with care when the promise
was kept); the worst table within `GOOD_FACTOR` × its own floor (or `GOOD_MARGIN` above it, or
`SPREAD_ALLOWANCE` standard deviations of the fresh samples' TVD on it),
the average likewise and no column above `CAREFUL_TVD`: good; otherwise usable with care,
naming the tables beyond `CAREFUL_TVD` (the worst table, not only the average, decides). The
thresholds follow common practice for synthetic-data utility reports (a TVD of 0.1 moves a
tenth of the rows).
"""

import itertools

import numpy as np

from dpportal.releases.packaging import read_csv, with_numbers
from mechanisms.histogram import count_sensitivity
from mechanisms.noise import secure_source

MAX_PAIRS = 15
FLOOR_DRAWS = 20
BASELINE_DRAWS = 5
GOOD_FACTOR, GOOD_MARGIN = 2.0, 0.01
SPREAD_ALLOWANCE = 4.0  # standard deviations of a fresh sample's TVD on the same table
CAREFUL_TVD, UNUSABLE_TVD = 0.1, 0.25
BEAT_MARGIN = 0.5  # beating the baseline by less than half the floor is within sampling noise
GRADES = {"good": "Good", "care": "Usable with care", "bad": "Not usable"}
# what each grade of the synthetic rows means, in the order `_grade` decides (the results page's
# small print names the grade given first, then the other two)
GRADE_RULES = {
    "good": (
        "the planner's promise kept (where it made one), every table within about twice the "
        f"fresh sample's TVD, and no column alone above {CAREFUL_TVD}"
    ),
    "care": (
        "better than independent noisy one-way counts, but some table or column further from "
        "the data than that: broad patterns only"
    ),
    "bad": (
        "the planner's promise not kept, or wider than an average count (the counts then say "
        "nothing); or, for the synthetic rows, not clearly closer to the data than independent "
        f"noisy one-way counts at the same ε, or the average, a table or a column alone above "
        f"{UNUSABLE_TVD} (a release that kept a useful promise is graded usable with care "
        "instead)"
    ),
}


def grade_scale(grade: str) -> list[dict]:
    """The three grades with what each means, the one given (`grade`) first."""
    order = [grade, *(g for g in GRADES if g != grade)] if grade in GRADES else list(GRADES)
    return [{"label": GRADES[g], "rule": GRADE_RULES[g], "given": g == grade} for g in order]


def assess(schema, columns, frame, files, *, epsilon, neighbouring, promise=None) -> dict | None:
    """The verdict on a release with synthetic.csv, or with only `promise` (a `promise_check`
    result: a histogram without synthetic rows); None for other releases."""
    if "synthetic.csv" not in files:
        return None if promise is None else promise_grade(promise)
    real = schema.encode(with_numbers(frame, schema), columns)
    synthetic = schema.encode(read_csv(files["synthetic.csv"], schema), columns)
    shape = schema.domain_shape(columns)
    targets = _targets(len(columns))
    rng = secure_source()
    rows = len(synthetic)
    release = _tvds(real, synthetic, shape, targets)
    floor_draws = np.array(
        [
            _tvds(real, real[rng.integers(len(real), rows)], shape, targets)
            for _ in range(FLOOR_DRAWS)
        ]
    )
    baseline = None
    if len(columns) > 1:
        draws = [
            _baseline(real, shape, rows, epsilon, neighbouring, rng) for _ in range(BASELINE_DRAWS)
        ]
        baseline = float(np.mean([_tvds(real, b, shape, targets).mean() for b in draws]))
    one_way = _tvds(real, synthetic, shape, [(j,) for j in range(len(columns))])
    result = _grade(columns, targets, release, floor_draws, baseline, one_way)
    return result if promise is None else _with_promise(result, promise)


def _targets(d: int) -> list[tuple[int, ...]]:
    if d == 1:
        return [(0,)]
    pairs: list[tuple[int, ...]] = list(itertools.combinations(range(d), 2))
    return pairs[:MAX_PAIRS]


def _shares(codes, shape, attrs) -> np.ndarray:
    dims = tuple(shape[a] for a in attrs)
    if not len(codes):
        return np.zeros(int(np.prod(dims)))
    flat = np.ravel_multi_index(tuple(codes[:, a] for a in attrs), dims)
    counts = np.bincount(flat, minlength=int(np.prod(dims))).astype(float)
    return counts / counts.sum()


def _tvds(real, other, shape, targets) -> np.ndarray:
    return np.array(
        [
            0.5 * np.abs(_shares(real, shape, attrs) - _shares(other, shape, attrs)).sum()
            for attrs in targets
        ]
    )


def _baseline(real, shape, rows, epsilon, neighbouring, rng) -> np.ndarray:
    """Rows drawn from the product of noisy one-way counts, ε split evenly over the columns
    (the d one-way tables together have L1 sensitivity d × that of one table)."""
    d = len(shape)
    scale = count_sensitivity(neighbouring) * d / epsilon
    columns = []
    for j, k in enumerate(shape):
        counts = np.bincount(real[:, j], minlength=k)
        noisy = np.maximum(rng.add_discrete_laplace(counts, scale), 0).astype(float)
        p = noisy / noisy.sum() if noisy.sum() else np.full(k, 1.0 / k)
        columns.append(rng.choice(p, rows))
    return np.column_stack(columns) if columns else np.zeros((rows, 0), dtype=int)


def _grade(columns, targets, release, floor_draws, baseline, one_way) -> dict:
    floor = floor_draws.mean(axis=0)
    average, floor_average = float(release.mean()), float(floor.mean())
    worst, table = int(np.argmax(one_way)), int(np.argmax(release))
    what = "pair tables" if len(columns) > 1 else "distribution"
    names = [" × ".join(columns[a] for a in attrs) for attrs in targets]
    far = [
        f"{names[i]} ({release[i]:.3f})" for i in np.argsort(-release) if release[i] > CAREFUL_TVD
    ]
    facts = {
        "tvd": average,
        "floor": floor_average,
        "baseline": baseline,
        "worst_column": columns[worst],
        "worst_column_tvd": float(one_way[worst]),
        "worst_table": names[table],
        "worst_table_tvd": float(release[table]),
        "far_tables": far,
        "tables": names,
        "table_tvds": release.tolist(),
    }
    more = "spend more ε or release fewer columns" + (
        f" (far from the data: {', '.join(far)})" if far else ""
    )
    if baseline is not None and average > baseline - BEAT_MARGIN * floor_average:
        grade, reason = (
            "bad",
            (
                f"Its {what} are no closer to the real data (average TVD {average:.3f}) than "
                f"independent noisy one-way counts at the same ε would be ({baseline:.3f}): {more}."
            ),
        )
    elif max(average, one_way[worst], release[table]) > UNUSABLE_TVD:
        grade, reason = (
            "bad",
            (
                f"Its {what} are far from the real data (average TVD {average:.3f}; "
                f"{columns[worst]} alone {one_way[worst]:.3f}; worst table {names[table]} "
                f"{release[table]:.3f}): {more}."
            ),
        )
    elif (
        average <= max(GOOD_FACTOR * floor_average, floor_average + GOOD_MARGIN)
        and release[table] <= _good_limit(floor_draws[:, table])
        and one_way[worst] <= CAREFUL_TVD
    ):
        grade, reason = (
            "good",
            (
                f"Its {what} are about as close to the real data (average TVD {average:.3f}) as "
                f"a fresh sample of the same size would be ({floor_average:.3f})."
            ),
        )
    else:
        beats = f", better than noisy one-way counts ({baseline:.3f})" if baseline else ""
        grade, reason = (
            "care",
            (
                f"Its {what} differ from the real data by TVD {average:.3f} on average "
                f"({average / max(floor_average, 1e-9):.1f}× a fresh sample's {floor_average:.3f}"
                f"{beats}; {columns[worst]} alone {one_way[worst]:.3f}): fine for broad patterns, "
                "not for small groups"
                + (f"; far from the data: {', '.join(far)}" if far else "")
                + "."
            ),
        )
    return {"grade": grade, "label": GRADES[grade], "reason": reason, **facts}


def _good_limit(draws: np.ndarray) -> float:
    """The largest TVD on one table still graded good, from that table's TVDs in the fresh
    samples (`draws`): twice their mean, `GOOD_MARGIN` above it, or `SPREAD_ALLOWANCE` standard
    deviations above it, whichever is largest (small tables' TVDs vary by more than their mean)."""
    mean = float(draws.mean())
    spread = float(draws.std(ddof=1)) if len(draws) > 1 else 0.0
    return max(GOOD_FACTOR * mean, mean + GOOD_MARGIN, mean + SPREAD_ALLOWANCE * spread)


def promise_grade(promise: dict) -> dict:
    """The grade of a release judged by the planner's promise alone (no synthetic rows)."""
    if promise["kept"] is False or promise["vacuous"]:
        return {
            "grade": "bad",
            "label": GRADES["bad"],
            "reason": broken(promise),
            "promise": promise,
        }
    grade = "good" if promise["kept"] else "care"
    return {"grade": grade, "label": GRADES[grade], "reason": kept(promise), "promise": promise}


def _with_promise(result: dict, promise: dict) -> dict:
    """The synthetic rows' grade under the promise: broken or vacuous, not usable; kept, never
    not usable for what it does not cover (the synthetic tables), but usable with care."""
    if promise["kept"] is False or promise["vacuous"]:
        return {**result, "grade": "bad", "label": GRADES["bad"], "reason": broken(promise)}
    grade = "care" if result["grade"] == "bad" or promise["kept"] is None else result["grade"]
    reason = f"{kept(promise)} {result['reason']}"
    return {**result, "grade": grade, "label": GRADES[grade], "reason": reason, "promise": promise}


def kept(promise: dict) -> str:
    """The promise as kept, in words (or why it could not be judged)."""
    seen = f"{promise['within']:,} of its {promise['outputs']:,} promised counts were within"
    if promise["kept"] is None:
        return (
            f"The planner promised {promise['sentence']}; {seen} ±{promise['half_width']:,.0f}, "
            f"but {promise['dropped_by_bounding']:,} rows were dropped by bounding persons, so "
            "the truth it is about is not known here."
        )
    return f"It kept the planner's promise ({promise['sentence']}: {seen})."


def broken(promise: dict) -> str:
    """Why the promise makes the release not usable: not kept, or too wide to say anything."""
    if promise["vacuous"]:
        return (
            f"The planner's promise at this ε, {promise['sentence']}, is wider than an average "
            "count: the counts say nothing. Spend more ε or release fewer columns."
        )
    return (
        f"It did not keep the planner's promise ({promise['sentence']}): only "
        f"{promise['within']:,} of {promise['outputs']:,} were within, far fewer than a release "
        "keeping it would show. Report this: the release does not behave as planned."
    )
