"""Quantile intervals and medians before and after a change, with means and sums, against OpenDP.

Two sets of public tables (read offline). The default, "heldout": the 30 tables of the held-out
protocol (benchmarks/heldout.py: its frozen tune / held-out split; install its data as that
file says), each with a count and the median of two or three numeric columns by one declared
categorical column or none (HELDOUT_REQUESTS, chosen from the public schema). "package": the
ten statsmodels and vega_datasets tables of the first pass (the five of
`statistics_accuracy.py`, and randhie, grunfeld, sf-temps, airports, stocks below), split by
SPLIT_SEED. Bounds and precisions are public ranges of what the columns measure, not read from
the data; the groups are the declared categories.

Per table, epsilon per statistic (EPSILONS) and release (`--releases`), each table's request
(its `count` first, so a quantile reads the released count's upper end, as a release does) is
run by the release's own code (`Computer`) on add/remove neighbours, and each quantile by
"before", the quantiles module of `--before` (default BEFORE) read from git (run in this
process, its `Computer.interval` and `Computer.estimate` steps), and "after", the working
tree's `Computer.interval` and `Computer.estimate` (on the values: the same ranks as the
engines' counts).

Printed: (1) per split, epsilon and group-size band, pooled over the tables, and (2) per table:
the intervals' coverage of the true quantile (of the clamped values; `np.quantile`,
interpolated) and their mean width as a share of the declared range, before and after; (3) per
split, epsilon and group-size band, (3b) per table and epsilon and (3c) per table, epsilon and
band, the medians' mean absolute error against OpenDP's `make_private_quantile` (its score and
permute-and-flip under max divergence, at the whole epsilon on the declared range's candidates
and bounds): pooled (sum of errors) ours / OpenDP's, and the share of groups at or below
OpenDP's. Sampled (ours over the releases, OpenDP's over `--opendp` draws per group), or with
`--exact` each estimate's expected error given its released interval, computed exactly from
permute-and-flip's chances (`noise.permute_and_flip_chances`; OpenDP's with its own score
transformation and noise scale), so a group's comparison carries no selection noise (ours
still averages the releases' intervals); (4) means and sums
against OpenDP's pipeline at the same epsilon and bounds (mean: clamped sum / count with Laplace
noise at epsilon / 2 each; sum: clamped sum with Laplace noise at epsilon), on the same columns
(heldout set) or the package tables' requests: sampled (ours over the releases that publish a
group), or with `--exact` each group's expected absolute error computed exactly (ours over the
releases that publish it: `measures.mean_expected_error` at the scales the release used;
OpenDP's over all releases: `opendp_mean_expected_error`; a sum's: its Laplace scale), per cell
(4), per table (4b) and per split (4c); with `--validate R` also (4d), the exact errors of
the CHECKED cells against R releases of the production code and of OpenDP's noise, with two
deliberately wrong twins the check must catch.

    nice -n 10 .venv/bin/python benchmarks/quantile_intervals.py [--set heldout|package]
        [--releases R] [--opendp D] [--exact [--validate R]] [--before COMMIT] [--tables a,b]
        [--role tune|held-out] [--methods before,after] [--means-only | --no-means]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
import zlib
from pathlib import Path

import numpy as np
import opendp.prelude as dp
import pandas as pd
import statsmodels.api as sm
from vega_datasets import data as vega

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import heldout  # noqa: E402
import statistics_accuracy as accuracy  # noqa: E402

from mechanisms.noise import permute_and_flip_chances, seeded_source  # noqa: E402
from mechanisms.schema import Schema  # noqa: E402
from mechanisms.statistics import (  # noqa: E402
    CANDIDATES,
    Computer,
    candidates,
    parse_request,
    quantile_shares,
)
from mechanisms.statistics import quantiles as current  # noqa: E402
from mechanisms.statistics.aggregates import exact_sum, sum_bounds  # noqa: E402
from mechanisms.statistics.measures import (  # noqa: E402
    centre,
    discrete_laplace_support,
    laplace_abs_error,
    mean_expected_error,
)
from mechanisms.statistics.support import threshold  # noqa: E402

dp.enable_features("contrib")

BEFORE = "3383e7bf"  # main before the signed rank offset and the wider skip rule (issue 44 item 4)
SPLIT_SEED = 44
EPSILONS = (0.1, 1.0, 10.0)
BANDS = (0, 100, 300, 1000, 5000, np.inf)
NEIGHBOURING = "add-remove"


def _numeric(name, lower, upper, **extra):
    return {"name": name, "type": "numeric", "lower": lower, "upper": upper, "bins": 4, **extra}


def _groups(name, labels):
    return {"name": name, "type": "categorical", "categories": sorted(labels), "unknown": "reject"}


def randhie_table():
    """RAND health insurance experiment: chronic disease index (0-60) and doctor visits (0-100)
    by individual-deductible plan (idp 0/1)."""
    frame = sm.datasets.randhie.load_pandas().data
    frame["idp"] = frame["idp"].astype(int).astype(str)
    schema = {
        "columns": [
            _numeric("disea", 0, 60, decimals=1),
            _numeric("mdvis", 0, 100, integer=True),
            _groups("idp", ["0", "1"]),
        ]
    }
    stats = ["count", "median:disea", "median:mdvis", "mean:disea", "sum:mdvis"]
    return "randhie", frame[["disea", "mdvis", "idp"]], schema, stats, "idp", False


def grunfeld_table():
    """Grunfeld's investment data: 20 years of 11 firms (small groups)."""
    frame = sm.datasets.grunfeld.load_pandas().data
    schema = {
        "columns": [
            _numeric("invest", 0, 2000, decimals=1),
            _numeric("value", 0, 10000, decimals=1),
            _groups("firm", frame["firm"].unique()),
        ]
    }
    stats = ["count", "median:invest", "median:value", "mean:invest", "sum:invest"]
    return "grunfeld", frame[["invest", "value", "firm"]], schema, stats, "firm", False


def sf_temps_table():
    """Hourly San Francisco temperatures of 2010 (degrees F, one decimal) by month."""
    frame = vega.sf_temps()
    frame["month"] = frame["date"].dt.month.astype(str)
    schema = {
        "columns": [
            _numeric("temp", 0, 120, decimals=1),
            _groups("month", [str(m) for m in range(1, 13)]),
        ]
    }
    stats = ["count", "median:temp", "q90:temp", "mean:temp"]
    return "sf-temps", frame[["temp", "month"]], schema, stats, "month", False


def airports_table():
    """US airports: latitude and longitude by state (56 groups of 1 to 263)."""
    frame = vega.airports().dropna(subset=["state"])
    schema = {
        "columns": [
            _numeric("latitude", -90, 90, decimals=2),
            _numeric("longitude", -180, 180, decimals=2),
            _groups("state", frame["state"].unique()),
        ]
    }
    stats = ["count", "median:latitude", "median:longitude", "mean:latitude"]
    return "airports", frame[["latitude", "longitude", "state"]], schema, stats, "state", False


def stocks_table():
    """Monthly prices of five stocks, 2000-2010 (dollars, two decimals)."""
    frame = vega.stocks()
    schema = {
        "columns": [
            _numeric("price", 0, 1000, decimals=2),
            _groups("symbol", frame["symbol"].unique()),
        ]
    }
    stats = ["count", "median:price", "mean:price", "sum:price"]
    return "stocks", frame[["price", "symbol"]], schema, stats, "symbol", False


def package_tables():
    """The ten package tables of the first pass (statistics_accuracy.py's five, and five more)."""
    return [
        accuracy.fair_table(),
        accuracy.weather_table(),
        accuracy.cars_table(),
        accuracy.anes_table(),
        accuracy.modechoice_table(),
        randhie_table(),
        grunfeld_table(),
        sf_temps_table(),
        airports_table(),
        stocks_table(),
    ]


def split(names):
    """{name: "tune" or "held-out"} of the package set: half each, one permutation of the names."""
    order = np.random.default_rng(SPLIT_SEED).permutation(sorted(names))
    half = len(order) // 2
    return {str(n): ("tune" if i < half else "held-out") for i, n in enumerate(order)}


# The quantiles asked of each table of benchmarks/heldout.py: (grouping column or None, columns).
# Chosen from the public schema (numeric columns that are not 0/1 flags; the categorical column
# with the most varied group sizes), never from the results.
HELDOUT_REQUESTS = {
    "baseball": ("lg", ["g", "hr"]),
    "budgetfood": ("sex", ["wfood", "age", "totexp"]),
    "diamonds": ("cut", ["price", "carat"]),
    "fertility": ("afam", ["age", "work"]),
    "gss_abortion": ("race", ["age"]),
    "happiness": ("happy", ["educ", "tvhours"]),
    "hi": ("race", ["whrswk", "experience"]),
    "injury": (None, ["durat", "age"]),
    "military": ("branch", ["rank"]),
    "mortgages": ("bpl", ["qob_minus_kw"]),
    "movies": ("mpaa", ["rating", "length"]),
    "mplsstops": ("race", ["policePrecinct"]),
    "nasscds": ("dvcat", ["ageOFocc"]),
    "nlswork": (None, ["ln_wage", "hours"]),
    "weather": ("origin", ["temp", "humid"]),
    "birthdays": ("state", ["births"]),
    "card": (None, ["educ", "IQ", "wage"]),
    "census2000": ("state", ["educ", "lweekinc", "exper"]),
    "chem97": ("gender", ["score", "gcsescore"]),
    "cps1988": ("region", ["wage", "experience"]),
    "cpssw8": ("region", ["earnings", "age"]),
    "credit_cards": ("LateSept", ["BillApril", "AGE"]),
    "flights": ("carrier", ["dep_delay", "arr_delay", "distance"]),
    "gss_wages": ("educcat", ["realrinc", "age"]),
    "htv": (None, ["wage", "educ"]),
    "insteval": (None, ["y", "dept"]),
    "k401ksubs": (None, ["inc", "nettfa", "age"]),
    "movielens": ("genre", ["rating", "year"]),
    "pizzaplace": ("size", ["price"]),
    "vocab": ("sex", ["vocabulary", "education"]),
}


def heldout_table(name):
    """One table of benchmarks/heldout.py as (name, frame, schema, stats, by, role): its count
    (by its grouping column, if any) and the median of each column of HELDOUT_REQUESTS."""
    by, columns = HELDOUT_REQUESTS[name]
    frame, _ = heldout.load(name)
    schema = {"columns": [c for c in heldout.TABLES[name].columns if c.get("role") != "person_id"]}
    stats = ["count", *(f"median:{c}" for c in columns)]
    keep = [*columns, *([by] if by else [])]
    return name, frame[keep], schema, stats, by, heldout.role(name)


def all_tables(which):
    """(tables, {name: split}) of the set `which`: "heldout" (30) or "package" (10)."""
    if which == "package":
        tables = package_tables()
        return tables, split(t[0] for t in tables)
    tables = [heldout_table(name) for name in heldout.names()]
    return tables, {t[0]: t[5] for t in tables}


def before_module(commit):
    """The quantiles module of `commit`, read from git and loaded under another name."""
    path = "mechanisms/statistics/quantiles.py"
    source = subprocess.check_output(["git", "-C", str(ROOT), "show", f"{commit}:{path}"])
    module = types.ModuleType("quantiles_before")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(source, f"{commit}:{path}", "exec"), module.__dict__)
    return module


def before_quantile(old, values, spec, alpha, epsilon, rows, rng):
    """BEFORE's one-group quantile (its `Computer.interval`, then `Computer.estimate`):
    (estimate, lower, upper, the released interval or None, the estimate's epsilon)."""
    if old.ends_skipped(spec, alpha, epsilon, NEIGHBOURING, rows):
        estimate = old.select(values, spec, alpha, epsilon, NEIGHBOURING, rng)
        return estimate, spec.lower, spec.upper, None, epsilon
    point, part = old.quantile_shares(epsilon)
    low, high = old.ends(values, spec, alpha, part, NEIGHBOURING, rng)
    estimate = old.select(values, spec, alpha, point, NEIGHBOURING, rng, (low, high))
    return estimate, low, high, (low, high), point


def after_quantile(run, values, spec, alpha, epsilon, rows):
    """The working tree's one-group quantile (`Computer.interval`, then `Computer.estimate`):
    (estimate, lower, upper, the released interval or None, the estimate's epsilon)."""
    within = run.interval(values, spec, alpha, epsilon, rows)
    point = epsilon if within is None else quantile_shares(epsilon)[0]
    return (*run.estimate(values, spec, alpha, epsilon, within), within, point)


def expected_error(module, values, spec, alpha, epsilon, within, true):
    """The exact expected absolute error of `module`'s estimate (its `select`: its candidates,
    its score, permute-and-flip at `epsilon`) given its released interval `within` (or None)."""
    grid = np.asarray(
        module.candidates(spec, module.CANDIDATES)
        if within is None
        else module.inner(spec, *within)
    )
    score = getattr(module, "rank_offsets", None) or module.rank_distances  # BEFORE: floored
    clipped = np.clip(values, spec.lower, spec.upper)
    sensitivity = module.rank_sensitivity(alpha, NEIGHBOURING)
    chances = permute_and_flip_chances(-score(clipped, grid, alpha), epsilon=epsilon,
                                       sensitivity=sensitivity)  # fmt: skip
    return float(chances @ np.abs(grid - true))


def group_labels(schema, by):
    return schema.axis_labels(by) if by else ["(all)"]


def quantile_rows(table, split_of, old, releases, methods):
    """One row per table, epsilon, quantile statistic, group, method and release."""
    name, frame, schema_dict, stats, by, _ = table
    schema = Schema.from_dict(schema_dict)
    labels = group_labels(schema, by)
    rows = []
    for epsilon in EPSILONS:
        request = parse_request(schema, {"stat": stats, "by": [by] if by else []},
                                epsilon=epsilon * len(stats), neighbouring=NEIGHBOURING)  # fmt: skip
        quantile_stats = [s for s in request.statistics if s.alpha is not None]
        for release in range(releases):
            rng = seeded_source(10_000 * release + int(epsilon * 100))
            run = Computer(frame, schema, request, NEIGHBOURING, rng)
            run.count(epsilon)
            for stat in quantile_stats:
                spec = schema.column(stat.column)
                for group, values in enumerate(run.values(stat.column)):
                    if not values.size:
                        continue
                    values = np.sort(values)
                    true = float(np.quantile(np.clip(values, spec.lower, spec.upper), stat.alpha))
                    bound = run.rows_at_most(group)
                    for method in methods:
                        if method == "before":
                            draw = before_quantile(
                                old, values, spec, stat.alpha, epsilon, bound, rng
                            )
                        else:
                            draw = after_quantile(run, values, spec, stat.alpha, epsilon, bound)
                        estimate, low, high, within, point = draw
                        module = old if method == "before" else current
                        exact = expected_error(module, values, spec, stat.alpha, point, within,
                                               true)  # fmt: skip
                        rows.append(
                            {
                                "split": split_of[name],
                                "table": name,
                                "epsilon": epsilon,
                                "statistic": stat.text,
                                "group": labels[group],
                                "n": values.size,
                                "method": method,
                                "covered": low <= true <= high,
                                "range": spec.upper - spec.lower,
                                "width": (high - low) / (spec.upper - spec.lower),
                                "error": abs(estimate - true),
                                "exact_error": exact,
                            }
                        )
    return rows


def opendp_quantile_error(values, spec, alpha, epsilon, draws):
    """Mean absolute error of OpenDP's `make_private_quantile` at epsilon (max divergence, our
    candidates and bounds, values clamped), over `draws` releases (NaN for none)."""
    if not draws:
        return float("nan")
    grid = [float(c) for c in candidates(spec, CANDIDATES)]
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
    unit = dp.m.make_private_quantile(*space, dp.max_divergence(), grid, alpha, 1.0).map(1)
    measure = dp.t.make_clamp(
        *space, bounds=(spec.lower, spec.upper)
    ) >> dp.m.then_private_quantile(dp.max_divergence(), grid, alpha, float(unit) / epsilon)
    data = np.array(values, dtype=np.float64)  # a writable copy: OpenDP refuses read-only ones
    true = float(np.quantile(np.clip(values, spec.lower, spec.upper), alpha))
    return float(np.mean([abs(measure(data) - true) for _ in range(draws)]))


def opendp_expected_error(values, spec, alpha, epsilon):
    """The exact expected absolute error of OpenDP's `make_private_quantile` as above: its own
    score (`then_quantile_score_candidates`, ties counted on neither side) and its noise scale
    (2 map(1) / epsilon), permute-and-flip's chances exactly (`noise.permute_and_flip_chances`)."""
    grid = [float(c) for c in candidates(spec, CANDIDATES)]
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
    score = dp.t.make_clamp(*space, bounds=(spec.lower, spec.upper))
    score = score >> dp.t.then_quantile_score_candidates(grid, alpha)
    scores = -np.asarray(score(np.array(values, dtype=np.float64)), dtype=float)
    chances = permute_and_flip_chances(scores, epsilon=epsilon, sensitivity=float(score.map(1)))
    true = float(np.quantile(np.clip(values, spec.lower, spec.upper), alpha))
    return float(chances @ np.abs(np.asarray(grid) - true))


def with_opendp(quantiles, tables, draws):
    """The quantile rows' groups with OpenDP's error at the same epsilon beside ours (each group's
    values as the release groups them: `Computer.values`, "(missing)" and "(other)" included)."""
    by_name = {t[0]: t for t in tables}
    keys = quantiles[["table", "epsilon", "statistic", "group"]].drop_duplicates()
    groups = {}
    errors = []
    for key in keys.itertuples(index=False):
        name, frame, schema_dict, stats, by, _ = by_name[key.table]
        schema = Schema.from_dict(schema_dict)
        column = key.statistic.partition(":")[2]
        label = key.statistic.partition(":")[0]
        alpha = 0.5 if label == "median" else float(label[1:]) / 100
        if (name, column) not in groups:
            request = parse_request(schema, {"stat": stats, "by": [by] if by else []},
                                    epsilon=1.0, neighbouring=NEIGHBOURING)  # fmt: skip
            run = Computer(frame, schema, request, NEIGHBOURING, seeded_source(0))
            labels = group_labels(schema, by)
            groups[name, column] = dict(zip(labels, run.values(column), strict=True))
        values = groups[name, column][key.group]
        spec = schema.column(column)
        errors.append(
            {
                **key._asdict(),
                "opendp_error": opendp_quantile_error(values, spec, alpha, key.epsilon, draws),
                "opendp_exact": opendp_expected_error(values, spec, alpha, key.epsilon),
            }
        )
    return pd.DataFrame(errors)


def interval_table(quantiles, keys):
    """Coverage and mean width / declared range per `keys` and group-size band, per method."""
    frame = quantiles.assign(band=pd.cut(quantiles["n"], BANDS, right=False))
    groups = [*keys, "band"]
    table = frame.pivot_table(
        index=groups, columns="method", values=["covered", "width"], aggfunc="mean", observed=True
    )
    table.columns = [f"{value}_{method}" for value, method in table.columns]
    per_method = frame.groupby(groups, observed=True)["n"].size() // frame["method"].nunique()
    return table.assign(intervals=per_method).reset_index()


def error_table(quantiles, opendp, exact, keys):
    """Per `keys` (of split, table, epsilon and the group-size band): our mean absolute error /
    OpenDP's, pooled over the groups (sum of errors, each as a share of its column's declared
    range, so columns and tables of other units weigh alike), and the share of groups at or
    below OpenDP's. `exact`: both errors their exact expectations over the estimate's selection
    (ours averaged over the releases' intervals; `expected_error`, `opendp_expected_error`),
    else the sampled errors (ours over the releases, OpenDP's over `--opendp` draws).

    A group where both errors are below 1e-9 of the range counts as at or below (0/0); exact
    errors equal to 1e-9 (relative) count as equal."""
    ours_column, theirs_column = ("exact_error", "opendp_exact") if exact else ("error",
                                                                                "opendp_error")  # fmt: skip
    group = ["split", "table", "epsilon", "statistic", "group"]
    mean = quantiles.groupby([*group, "n", "range", "method"])[ours_column].mean()
    merged = mean.unstack("method").reset_index().merge(opendp, on=group[1:])
    methods = [m for m in ("before", "after") if m in merged]
    merged[[*methods, theirs_column]] = merged[[*methods, theirs_column]].div(
        merged["range"], axis=0
    )
    merged["band"] = pd.cut(merged["n"], BANDS, right=False)
    rows = []
    for values, d in merged.groupby(keys, observed=True):
        entry = {**dict(zip(keys, values, strict=True)), "groups": len(d)}
        theirs = d[theirs_column].to_numpy()
        for method in methods:
            ours = d[method].to_numpy()
            at_or_below = (ours <= theirs * (1 + 1e-9)) | (np.maximum(ours, theirs) < 1e-9)
            entry[f"pooled_{method}"] = ours.sum() / max(theirs.sum(), 1e-12)
            entry[f"at_or_below_{method}"] = float(np.mean(at_or_below))
        rows.append(entry)
    return pd.DataFrame(rows)


def cell_runs(tables, split_of, cells=None, salt=""):
    """Each mean and sum cell of `tables` (or only the (table, statistic, epsilon) of `cells`):
    (split, table, statistic, epsilon, the column's declared spec, a `Computer` of that one
    statistic on a source fresh per cell)."""
    for name, frame, schema_dict, stats, by, _ in tables:
        schema = Schema.from_dict(schema_dict)
        specs = {c["name"]: c for c in schema_dict["columns"]}
        for text in (s for s in stats if s.startswith(("mean:", "sum:"))):
            for epsilon in EPSILONS:
                if cells is not None and (name, text, epsilon) not in cells:
                    continue
                request = parse_request(schema, {"stat": [text], "by": [by] if by else []},
                                        epsilon=epsilon, neighbouring=NEIGHBOURING)  # fmt: skip
                seed = zlib.crc32(f"{salt}{name} {text} {epsilon}".encode())
                run = Computer(frame, schema, request, NEIGHBOURING, seeded_source(seed))
                yield split_of[name], name, text, epsilon, specs[text.partition(":")[2]], run


def cell_row(role, name, text, epsilon, ours, theirs):
    """One cell's row: its groups' errors pooled (sum of errors), ours / OpenDP's, and the share
    of groups at or below OpenDP's (1e-9 relative)."""
    return {
        "split": role,
        "table": name,
        "statistic": text,
        "epsilon": epsilon,
        "groups": len(ours),
        "pooled_ratio": ours.sum() / theirs.sum(),
        "at_or_below": float(np.mean(ours <= theirs * (1 + 1e-9))),
    }


def mean_sum_table(tables, split_of, releases):
    """Means and sums: ours (the release's code) against OpenDP's pipeline, per table and epsilon,
    pooled over the groups (sum of mean absolute errors)."""
    rows = []
    for role, name, text, epsilon, spec, run in cell_runs(tables, split_of):
        kind, _, column = text.partition(":")
        groups = run.values(column)
        clipped = [np.clip(g, spec["lower"], spec["upper"]) for g in groups]
        truth = np.array([(g.mean() if kind == "mean" else g.sum()) if g.size else np.nan
                          for g in clipped])  # fmt: skip
        method = run.mean if kind == "mean" else run.sum
        ours = np.array([[r.estimate for r in method(column, epsilon)]
                         for _ in range(releases)])  # fmt: skip
        theirs_fn = (accuracy.opendp_mean if kind == "mean" else opendp_sum)(
            spec["lower"], spec["upper"], epsilon
        )
        theirs = np.array([[theirs_fn(g) for g in groups] for _ in range(releases)])
        # a group withheld by the publication rule (`support`) has no estimate: ours is its
        # error over the releases that published it; a group never published is left out
        keep = ~np.isnan(truth) & (~np.isnan(ours)).any(axis=0)
        ours_error = np.nanmean(np.abs(ours - truth)[:, keep], axis=0)
        theirs_error = np.abs(theirs - truth)[:, keep].mean(axis=0)
        rows.append(cell_row(role, name, text, epsilon, ours_error, theirs_error))
    return pd.DataFrame(rows)


def exact_means(tables, split_of, validate, fmt):
    """Tables (4) to (4c) from exact expected errors (`exact_mean_sum_table`), and with
    `validate` the Monte Carlo check of each mean cell (`monte_carlo_check`)."""
    cells = exact_mean_sum_table(tables, split_of)
    print("\n(4) means and sums, exact expected absolute error: ours (over the releases that "
          "publish the group) / OpenDP's (over all releases), per cell")  # fmt: skip
    print(cells.to_string(**fmt))
    kinds = cells.assign(kind=cells["statistic"].str.partition(":")[0])
    summary = kinds.groupby(["split", "table", "kind"])["pooled_ratio"]
    table = summary.agg(cells="size", median="median", max="max").reset_index()
    print("\n(4b) per table: the cells' pooled ratios, median and max")
    print(table.to_string(**fmt))
    print("\n(4c) per split: cells, cells above 1, median and max pooled ratio")
    above = kinds.assign(above=kinds["pooled_ratio"] > 1 + 1e-9)
    pooled = above.groupby(["split", "kind"]).agg(
        cells=("pooled_ratio", "size"), above_1=("above", "sum"),
        median=("pooled_ratio", "median"), max=("pooled_ratio", "max"))  # fmt: skip
    print(pooled.reset_index().to_string(**fmt))
    if validate:
        print(f"\n(4d) Monte Carlo check, {validate} releases per cell: z = (sampled - exact) / "
              "its standard error, per group published in 100 releases or more")  # fmt: skip
        print(monte_carlo_check(tables, split_of, validate).to_string(**fmt))


TWINS = ("share 3/4 on the sum", "the other centre")
# (table, mean, epsilon) of the Monte Carlo check: a tune table's group of 1 published only on
# a positive count noise; a held-out table whose groups are often withheld at epsilon 0.1; a
# held-out column whose bounds exclude 0 (the centre is not OpenDP's 0)
CHECKED = (("budgetfood", "mean:wfood", 10.0), ("pizzaplace", "mean:price", 0.1),
           ("card", "mean:IQ", 1.0))  # fmt: skip


def monte_carlo_check(tables, split_of, releases):
    """The CHECKED cells' exact errors per group against `releases` draws: ours from the
    production code (`Computer.mean`), OpenDP's from its own noise measurements at its scales
    on the group's exact clamped sum and count (`opendp_draws`), over the groups published in
    100 releases or more. Passes where |z| < 4 (a false alarm in about 6e-5 of the groups);
    each twin (TWINS: the epsilon split 3/4 to the sum, and the centre 0 where ours, the middle
    of the bounds, is not 0, else half the upper bound) must show |z| >= 4 in some group of
    each cell."""
    rows = []
    for _, name, text, epsilon, spec, run in cell_runs(tables, split_of, CHECKED, salt="check "):
        column = text.partition(":")[2]
        n, truth, ours, _, theirs = exact_cell(run, "mean", column, spec, epsilon)
        drawn = np.array([[r.estimate for r in run.mean(column, epsilon)]
                          for _ in range(releases)])  # fmt: skip
        c, _ = centre(run.numeric(column))
        other = spec["upper"] / 2 if c == 0 else 0.0
        twins = [exact_cell(run, "mean", column, spec, epsilon, twin)[2]
                 for twin in ((0.75, c), (0.5, other))]  # fmt: skip
        opendp = opendp_draws(n, truth, spec, epsilon, releases)
        for g in np.flatnonzero(n > 0):
            errors = np.abs(drawn[:, g] - truth[g])
            errors = errors[~np.isnan(errors)]
            if errors.size < 100:
                continue
            se = errors.std(ddof=1) / np.sqrt(errors.size)
            theirs_errors = np.abs(opendp[:, g] - truth[g])
            theirs_se = theirs_errors.std(ddof=1) / np.sqrt(releases)
            rows.append(
                {
                    "table": name,
                    "statistic": text,
                    "epsilon": epsilon,
                    "n": int(n[g]),
                    "published": errors.size / releases,
                    "ours_exact": ours[g],
                    "ours_sampled": errors.mean(),
                    "z_ours": (errors.mean() - ours[g]) / se,
                    **{
                        f"z {k}": (errors.mean() - v[g]) / se
                        for k, v in zip(TWINS, twins, strict=True)
                    },  # fmt: skip
                    "opendp_exact": theirs[g],
                    "opendp_sampled": theirs_errors.mean(),
                    "z_opendp": (theirs_errors.mean() - theirs[g]) / theirs_se,
                }
            )
    return pd.DataFrame(rows)


def opendp_draws(n, truth, spec, epsilon, releases):
    """`releases` of OpenDP's mean per group: its own Laplace and discrete Laplace measurements
    at `accuracy.opendp_mean_parts`' scales on the exact clamped sum and count (the clamp and
    sum before them are deterministic), divided as `accuracy.opendp_mean` divides."""
    _, (sum_scale, count_scale) = accuracy.opendp_mean_parts(spec["lower"], spec["upper"], epsilon)
    floats = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)
    ints = dp.vector_domain(dp.atom_domain(T=dp.i32)), dp.l1_distance(T=dp.i32)
    noisy_sums = dp.m.make_laplace(*floats, scale=sum_scale)
    noisy_counts = dp.m.make_laplace(*ints, scale=count_scale)
    out = np.full((releases, len(n)), np.nan)
    for g in np.flatnonzero(n > 0):
        sums = np.asarray(noisy_sums(np.full(releases, truth[g] * n[g])), dtype=float)
        counts = np.asarray(noisy_counts([int(n[g])] * releases), dtype=float)
        out[:, g] = sums / np.maximum(counts, 1)
    return out


def opendp_sum(low, high, epsilon):
    """OpenDP's pipeline: clamped sum with Laplace noise at epsilon."""
    noisy, scale = opendp_sum_part(low, high, epsilon)
    return noisy(scale)


def opendp_sum_part(low, high, epsilon):
    """OpenDP's clamped sum with Laplace noise as a function of its scale, and the scale that
    gives epsilon (binary search)."""
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
    total = dp.t.make_clamp(*space, bounds=(low, high)) >> dp.t.then_sum()
    noisy = lambda s: total >> dp.m.then_laplace(scale=s)  # noqa: E731
    return noisy, dp.binary_search_param(noisy, d_in=1, d_out=epsilon)


def opendp_mean_expected_error(total, n, truth, sum_scale, count_scale):
    """OpenDP's mean (`accuracy.opendp_mean`: (S + L) / max(n + K, 1), L Laplace, K discrete
    Laplace), E|estimate - truth| exactly: K's pmf (`discrete_laplace_support`; every K <= 1 - n
    divides by 1, P(K <= -j) = a^j / (1 + a)) and L's closed form (`laplace_abs_error`)."""
    ks, chances = discrete_laplace_support(count_scale)
    a = np.exp(-1 / count_scale)
    keep = ks >= 2 - n
    divisor = np.concatenate([[1.0], n + ks[keep]])
    weight = np.concatenate([[a ** (n - 1) / (1 + a)], chances[keep]])
    return float(weight @ (laplace_abs_error(total - truth * divisor, sum_scale) / divisor))


def exact_cell(run, kind, column, spec, epsilon, twin=None):
    """Per group of one cell: (n, truth, ours, P(ours published), OpenDP's), the errors exact.

    Ours from the scales `Computer.mean` (`Computer.sum`) released with its rows, over the
    releases that publish the group (`measures.mean_expected_error`); a sum's noise of scale
    b errs by at most b on average (a Laplace's b; ours, discrete Laplace on the sum's grid of
    unit u, u / sinh(u / b) < b), so its ratio is at most our scale over OpenDP's. `twin`: a deliberately wrong (sum epsilon share, centre) for
    the mean's exact error, which the Monte Carlo check must catch."""
    low, high = spec["lower"], spec["upper"]
    n = run.aggregates.present(column)
    totals = [exact_sum(g, low, high) for g in run.values(column)]
    truth = np.array([t / k if k else np.nan for t, k in zip(totals, n, strict=True)])
    if kind == "sum":
        ours = np.full(len(n), run.sum(column, epsilon)[0].scale)
        _, theirs = opendp_sum_part(low, high, epsilon)
        return n, np.array(totals), ours, np.ones(len(n)), np.full(len(n), theirs)
    rows = run.mean(column, epsilon)
    scale, counts = rows[0].scale, rows[0].count_scale
    number = run.numeric(column)
    c, bounds = centre(number)[0], sum_bounds(number, "centred")
    centred = run.aggregates.sums(column, "centred")
    if twin is not None:
        share, c = twin
        scale, counts = scale / (2 * share), counts / (2 * (1 - share))
        bounds = (low - c, high - c)
        centred = np.array([t - k * c for t, k in zip(totals, n, strict=True)])
    _, opendp_scales = accuracy.opendp_mean_parts(low, high, epsilon)
    out = []
    for k, total, s, m in zip(n, totals, centred, truth, strict=True):
        if not k:
            out.append((np.nan, 0.0, np.nan))
            continue
        ours, shown = mean_expected_error(s, int(k), m - c, bounds, scale, counts,
                                          threshold(counts))  # fmt: skip
        out.append((ours, shown, opendp_mean_expected_error(total, int(k), m, *opendp_scales)))
    ours, shown, theirs = (np.array(v) for v in zip(*out, strict=True))
    return n, truth, ours, shown, theirs


def exact_mean_sum_table(tables, split_of):
    """Means and sums, exact: per table, statistic and epsilon, ours / OpenDP's expected
    absolute error pooled over the groups (`cell_row`; ours over the releases that publish
    the group), the largest group ratio, and the smallest chance a group is published."""
    rows = []
    for role, name, text, epsilon, spec, run in cell_runs(tables, split_of):
        kind, _, column = text.partition(":")
        n, _, ours, shown, theirs = exact_cell(run, kind, column, spec, epsilon)
        keep = (n > 0) & (shown > 0)
        row = cell_row(role, name, text, epsilon, ours[keep], theirs[keep])
        row["max_group_ratio"] = (ours[keep] / theirs[keep]).max()
        rows.append(row | {"min_published": shown[keep].min()})
    return pd.DataFrame(rows)


def with_means(tables):
    """The tables with a mean and a sum of each quantile column added (for table (3))."""
    out = []
    for name, frame, schema, stats, by, role in tables:
        columns = [s.partition(":")[2] for s in stats if s.startswith("median:")]
        extra = [f"{kind}:{c}" for c in columns for kind in ("mean", "sum")]
        out.append((name, frame, schema, [*stats, *extra], by, role))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="heldout", choices=["heldout", "package"])
    parser.add_argument("--releases", type=int, default=40)
    parser.add_argument("--opendp", type=int, default=300, help="OpenDP draws per group")
    parser.add_argument("--exact", action="store_true",
                        help="table (3) from exact expected errors of the estimates' selections")  # fmt: skip
    parser.add_argument("--before", default=BEFORE, help="the commit whose quantiles are 'before'")
    parser.add_argument("--tables", default="", help="comma-separated names (default: all)")
    parser.add_argument("--role", default="all", choices=["all", "tune", "held-out"])
    parser.add_argument("--methods", default="before,after")
    parser.add_argument("--means-only", action="store_true", help="only table (3)")
    parser.add_argument("--no-means", action="store_true", help="leave table (3) out")
    parser.add_argument("--validate", type=int, default=0,
                        help="with --exact: check each mean cell against this many releases")  # fmt: skip
    args = parser.parse_args()
    tables, split_of = all_tables(args.set)
    if args.tables:
        tables = [t for t in tables if t[0] in args.tables.split(",")]
    tables = [t for t in tables if args.role in ("all", split_of[t[0]])]
    pd.set_option("display.width", 250, "display.max_rows", 1000, "display.max_columns", 30)
    fmt = {"float_format": lambda v: f"{v:.3g}", "index": False}
    print(f"set {args.set}; releases {args.releases}; OpenDP draws {args.opendp}; "
          f"before = {args.before}, after = the working tree")  # fmt: skip
    if not args.means_only:
        quantile_tables(tables, split_of, args, fmt)
    if not args.no_means:
        means = tables if args.set == "package" else with_means(tables)
        if args.exact:
            exact_means(
                means, split_of, args.validate, {**fmt, "float_format": lambda v: f"{v:.7g}"}
            )
        else:
            print("\n(4) means and sums: mean absolute error, ours / OpenDP's")
            print(mean_sum_table(means, split_of, args.releases).to_string(**fmt))


def quantile_tables(tables, split_of, args, fmt):
    """Tables (1) to (3)."""
    old = before_module(args.before)
    methods = args.methods.split(",")
    quantiles = pd.DataFrame(
        [r for t in tables for r in quantile_rows(t, split_of, old, args.releases, methods)]
    )
    print("\n(1) quantile intervals, pooled over tables: coverage and mean width / declared range")
    print(interval_table(quantiles, ["split", "epsilon"]).to_string(**fmt))
    print("\n(2) the same per table")
    print(interval_table(quantiles, ["split", "table", "epsilon"]).to_string(**fmt))
    opendp = with_opendp(quantiles, tables, args.opendp)
    kind = "exact expected" if args.exact else "sampled mean"
    print(f"\n(3) quantile estimates ({kind} absolute error), ours / OpenDP's, pooled over the "
          "tables' groups, and the share of groups at or below OpenDP's, per group size")  # fmt: skip
    print(error_table(quantiles, opendp, args.exact, ["split", "epsilon", "band"]).to_string(**fmt))
    print("\n(3b) the same per table")
    keys = ["split", "table", "epsilon"]
    print(error_table(quantiles, opendp, args.exact, keys).to_string(**fmt))
    print("\n(3c) the same per table and group size")
    print(error_table(quantiles, opendp, args.exact, [*keys, "band"]).to_string(**fmt))


if __name__ == "__main__":
    main()
