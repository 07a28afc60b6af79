"""MWEM: validation, convergence at epsilon = inf, factored = dense, record-and-replay accounting,
the event test (docs/testing-privacy.md) on one selection and one measurement with broken
twins, the paper's contingency-table experiment (small version, on tests/data's log-linear
tables), scaling, and the release.

Event tests: n = 10^5 outputs per side, alpha = 1e-6 family-wise (privacy_audit helper); each
has a twin with the declared sensitivity halved that the same test must fail.
Contingency test: 5 seeds per point; the asserted gaps are ones the 5-seed benchmark
(benchmarks/mwem_contingency.py) shows by a factor of 2 or more.
"""

import importlib
import io
import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from mechanisms.catalogue import run_release
from mechanisms.errors import MechanismError
from mechanisms.mwem import FactoredDistribution, measure_all, mwem
from mechanisms.mwem.release import model_record
from mechanisms.noise import RecordingSource, exponential_mechanism, seeded_source
from mechanisms.schema import Schema
from mechanisms.workload import Query, expand_workload, marginals_spec, random_marginals_spec
from tests.conftest import TEST_DATA
from tests.mechanisms.privacy_audit import audit_neighbours

mwem_measure = importlib.import_module("mechanisms.mwem.measure")  # the only code touching data
mwem_module = importlib.import_module("mechanisms.mwem")  # the package exports the function
mwem_fit = importlib.import_module("mechanisms.mwem.fit")
N_AUDIT = 100_000


def load_table(name):
    """A binary contingency table of tests/data/ (README there), one row per person."""
    table = pd.read_csv(TEST_DATA / f"{name}.csv")
    columns = list(table.columns[:-1])
    codes = np.repeat(table[columns].to_numpy(np.int64), table["count"].to_numpy(), axis=0)
    return codes, (2,) * len(columns), columns


def workload_of(columns, shape, k):
    return expand_workload(marginals_spec(k), columns, shape, set())


def true_table(codes, shape):
    table = np.zeros(shape)
    np.add.at(table, tuple(codes.T), 1)
    return table / table.sum()


def relative_entropy(codes, shape, estimate):
    true = true_table(codes, shape)
    mask = true > 0
    return float(np.sum(true[mask] * np.log(true[mask] / np.maximum(estimate[mask], 1e-300))))


def max_workload_error(codes, shape, workload, distribution):
    """Largest |q(synthetic) - q(true)| / n over every cell of every workload query."""
    true = true_table(codes, shape)
    worst = 0.0
    for q in workload:
        other = tuple(a for a in range(len(shape)) if a not in q.attrs)
        exact, model = true.sum(axis=other), distribution.marginal(q.attrs)
        if q.box is not None:
            box = tuple(slice(lo, hi + 1) for lo, hi in q.box)
            exact, model = exact[box].sum(), model[box].sum()
        worst = max(worst, float(np.abs(exact - model).max()))
    return worst


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon": -1}, r"epsilon \(-1\) must be > 0"),
        ({"epsilon": 1, "neighbouring": "swap"}, r"neighbouring \('swap'\)"),
        ({"epsilon": 1, "init_fraction": 1.5}, r"init_fraction \(1.5\) must be in \[0, 1\]"),
        ({"epsilon": 1, "select_fraction": 0}, r"select_fraction \(0\) must be in \(0, 1\)"),
        ({"epsilon": 1, "output": "best"}, r"output \('best'\) must be 'last' or 'average'"),
        ({"epsilon": 1, "update": "exp"}, r"update \('exp'\) must be 'damped' or 'paper'"),
        ({"epsilon": 1, "output": "average", "memory_cells": 10}, r"dense domain \(64 cells\)"),
        ({"epsilon": 1, "neighbouring": "add-remove", "init_fraction": 0}, r"init_fraction \(0\)"),
        ({"epsilon": 1, "rounds": 0}, r"rounds \(0\) must be a whole number >= 1"),
        ({"epsilon": 1, "mw_passes": 2.5}, r"mw_passes \(2.5\) must be a whole number"),
        ({"epsilon": 1, "memory_cells": -1}, r"memory_cells \(-1\)"),
    ],
)
def test_it_refuses_bad_parameters_with_one_line(kwargs, message):
    codes, shape, columns = load_table("loglinear6")
    with pytest.raises(MechanismError, match=message):
        mwem(codes, shape, workload_of(columns, shape, 2), rng=seeded_source(0), **kwargs)


def test_it_refuses_codes_outside_the_domain_before_counting():
    codes, shape, columns = load_table("loglinear6")
    workload = workload_of(columns, shape, 2)
    for bad in (shape[0], -1):  # one past the last bin, and below the first
        wrong = codes.copy()
        wrong[5, 0] = bad
        with pytest.raises(MechanismError, match=r"codes must lie in 0..k-1"):
            mwem(wrong, shape, workload, epsilon=1.0, rng=seeded_source(0))


def test_it_refuses_empty_data_only_when_the_row_count_is_public():
    codes, shape, columns = load_table("loglinear6")
    workload = workload_of(columns, shape, 2)
    with pytest.raises(MechanismError, match=r"data \(0 rows\)"):
        mwem(codes[:0], shape, workload, epsilon=1.0)
    result = mwem(
        codes[:0], shape, workload, epsilon=1.0, neighbouring="add-remove", rng=seeded_source(1)
    )
    assert result.n >= 1 and len(result.trace) == result.rounds


# --- exactness and representations -------------------------------------------------------------


@pytest.mark.parametrize("update", ["damped", "paper"])
@pytest.mark.parametrize("k", [2, 3])
def test_it_converges_to_the_workload_at_infinite_epsilon(k, update):
    codes, shape, columns = load_table("loglinear6")
    workload = workload_of(columns, shape, k)
    before = max_workload_error(
        codes, shape, workload, FactoredDistribution.independent([np.ones(2)] * len(shape))
    )
    result = mwem(codes, shape, workload, epsilon=math.inf, rounds=40, mw_passes=10, update=update)
    after = max_workload_error(codes, shape, workload, result.distribution)
    assert before > 0.05
    assert after < 0.005, after
    assert result.trace[-1]["max_error_estimate"] < 0.005


def test_ranges_converge_at_infinite_epsilon():
    rng = seeded_source(3)
    codes = np.stack([(rng.uniform(500) ** 2 * 8).astype(int), rng.integers(3, 500)], axis=1)
    shape = (8, 3)
    workload = expand_workload(
        {"queries": [{"type": "ranges", "column": "x"}]}, ["x", "g"], shape, {"x"}
    )
    result = mwem(codes, shape, workload, epsilon=math.inf, rounds=60, mw_passes=10)
    assert max_workload_error(codes, shape, workload, result.distribution) < 0.01


@pytest.mark.parametrize("k", [2, 3])
def test_factored_and_dense_give_the_same_distribution(k):
    codes, shape, columns = load_table("loglinear8")
    workload = workload_of(columns, shape, k)
    runs = [
        mwem(codes, shape, workload, epsilon=1.0, dense=dense, rng=seeded_source(5))
        for dense in (False, True)
    ]
    factored, dense = runs
    assert len(dense.distribution.groups()) == 1
    assert len(factored.distribution.groups()) > 1 or k == 3
    assert [t["query"] for t in factored.trace] == [t["query"] for t in dense.trace]
    np.testing.assert_allclose(
        factored.distribution.to_dense(), dense.distribution.to_dense(), rtol=1e-9, atol=1e-14
    )


def test_average_output_is_the_mean_of_the_iterates(monkeypatch):
    # the t-th iterate is a t-round run's output when its last round updates as the others do
    # (its half steps, FINAL_STEP, made the same; at ε infinite its targets are the measured)
    monkeypatch.setattr(mwem_fit, "FINAL_STEP", mwem_fit.DAMPED_STEP)
    codes, shape, columns = load_table("loglinear6")
    workload = workload_of(columns, shape, 2)
    iterates = [
        mwem(
            codes, shape, workload, epsilon=math.inf, rounds=t, mw_passes=2
        ).distribution.to_dense()
        for t in (1, 2, 3)
    ]
    averaged = mwem(
        codes, shape, workload, epsilon=math.inf, rounds=3, mw_passes=2, output="average"
    ).distribution.to_dense()
    np.testing.assert_allclose(averaged, np.mean(iterates, axis=0), rtol=1e-9)
    assert not np.allclose(averaged, iterates[-1])


def test_sampling_is_systematic_within_a_group_and_independent_across_groups():
    probs = np.array([[0.1, 0.2], [0.3, 0.4]])
    model = FactoredDistribution((2, 2, 3), [((0, 1), probs), ((2,), np.array([0.5, 0.25, 0.25]))])
    codes = model.sample(1000, seeded_source(1))
    counts = np.zeros((2, 2))
    np.add.at(counts, (codes[:, 0], codes[:, 1]), 1)
    assert np.abs(counts - 1000 * probs).max() <= 1
    assert abs(np.mean(codes[:, 2] == 0) - 0.5) <= 0.001


# --- accounting: record-and-replay --------------------------------------------------------------


def epsilon_of(call, neighbouring="replace-one"):
    """The epsilon a recorded call spends, from its scale and the declared sensitivity."""
    if call.primitive == "report_noisy_max":
        return 2 * 1 / call.scale  # scores have sensitivity 1 (normalised)
    marginal_l1 = 2 if neighbouring == "replace-one" else 1
    return marginal_l1 / call.scale  # marginal-only workloads here


def test_the_papers_split_spends_epsilon_over_2t_per_selection_and_measurement():
    codes, shape, columns = load_table("loglinear6")
    source = RecordingSource(seeded_source(2))
    mwem(
        codes,
        shape,
        workload_of(columns, shape, 2),
        epsilon=1.0,
        rounds=5,
        init_fraction=0,
        select_fraction=0.5,
        rng=source,
    )
    calls = source.noise_calls()
    assert [c.primitive for c in calls] == ["report_noisy_max", "discrete_laplace"] * 5
    assert all(epsilon_of(c) == pytest.approx(1.0 / 10) for c in calls)


@pytest.mark.parametrize("neighbouring", ["replace-one", "add-remove"])
def test_the_default_split_sums_to_epsilon_and_is_the_same_on_neighbours(neighbouring):
    codes, shape, columns = load_table("loglinear6")
    neighbour = codes.copy()
    neighbour[0] = 1 - neighbour[0]  # replace one record by its complement
    if neighbouring == "add-remove":
        neighbour = neighbour[1:]
    sequences = []
    for data in (codes, neighbour):
        source = RecordingSource(seeded_source(9))
        result = mwem(
            data,
            shape,
            workload_of(columns, shape, 3),
            epsilon=0.7,
            neighbouring=neighbouring,
            rng=source,
        )
        calls = source.noise_calls()
        assert sum(epsilon_of(c, neighbouring) for c in calls) == pytest.approx(0.7, rel=1e-12)
        rounds, count = result.rounds, int(neighbouring == "add-remove")  # the noisy row count
        assert [c.primitive for c in calls] == (
            ["discrete_laplace"] * (count + 6) + ["report_noisy_max", "discrete_laplace"] * rounds
        )
        assert len(result.measurements) == 6 + rounds and len(result.trace) == rounds
        sequences.append([(c.primitive, c.scale) for c in calls])
    # every scale depends only on public values (selected query sizes may differ, scales may
    # not); under add-remove also on the noisy row count, the same here at the same seed
    assert sequences[0] == sequences[1]


# --- event tests (docs/testing-privacy.md) ----------------------------------------------------

# Two binary attributes, candidates = the two 1-way marginals, model uniform. D has 60 records;
# D' replaces a (1, 0) record by (0, 1): one L1-error score rises by 2 and the other falls by 2
# (±1 after normalising), the worst case for the selection; the first marginal's two cells move
# by one each, the worst case for its measurement.
PAIR_SHAPE = (2, 2)
PAIR_D = np.array([[0, 0]] * 30 + [[0, 1]] * 10 + [[1, 0]] * 5 + [[1, 1]] * 15)
PAIR_D2 = np.vstack([PAIR_D[:40], [[0, 1]], PAIR_D[41:]])
PAIR_WORKLOAD = [Query((0,)), Query((1,))]


def selection_samples(codes, epsilon, draws=N_AUDIT):
    """`draws` selections by the exponential mechanism on MWEM's scores for `codes`."""
    model = FactoredDistribution.independent([np.ones(2), np.ones(2)])
    true = mwem_measure.TrueAnswers(codes, PAIR_SHAPE)
    scores = mwem_measure._selection_scores(model, true, PAIR_WORKLOAD, len(codes), 1.0, 2)
    rng = seeded_source(11)
    return np.array(
        [
            exponential_mechanism(scores, epsilon=epsilon, sensitivity=1, rng=rng)
            for _ in range(draws)
        ]
    )


def measurement_samples(codes, epsilon, draws=N_AUDIT):
    """Noisy (cell 0 - cell 1) of the first 1-way marginal, as MWEM measures it."""
    true = mwem_measure.TrueAnswers(codes, PAIR_SHAPE)
    rng = seeded_source(12)
    out = np.empty(draws, dtype=np.int64)
    for i in range(draws):
        noisy, _ = mwem_measure.measure_query(true, Query((0,)), epsilon, 2, rng)
        out[i] = noisy[0] - noisy[1]
    return out


def halve_sensitivity(monkeypatch):
    honest = mwem_measure._sensitivity
    monkeypatch.setattr(mwem_measure, "_sensitivity", lambda q, l1: honest(q, l1) / 2)


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True])
def test_one_selection_passes_the_event_test_and_its_twin_fails(monkeypatch, broken):
    if broken:
        halve_sensitivity(monkeypatch)
    epsilon = 0.5
    result = audit_neighbours(
        selection_samples(PAIR_D, epsilon),
        selection_samples(PAIR_D2, epsilon),
        epsilon=epsilon,
        thresholds=np.arange(2),
    )
    assert result.passed != broken, result.summary()


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True])
def test_one_measurement_passes_the_event_test_and_its_twin_fails(monkeypatch, broken):
    if broken:
        halve_sensitivity(monkeypatch)
    epsilon = 1.0
    x, x2 = measurement_samples(PAIR_D, epsilon), measurement_samples(PAIR_D2, epsilon)
    grid = np.arange(20 - 40, 22 + 41)  # f(D) = 20, f(D') = 22, noise scale 2 per cell: ±20 scales
    result = audit_neighbours(x, x2, epsilon=epsilon, thresholds=grid)
    assert result.passed != broken, result.summary()


def count_samples(codes, epsilon, draws=N_AUDIT):
    """The add-remove default plan's noisy row count, as MWEM draws it."""
    true = mwem_measure.TrueAnswers(codes, PAIR_SHAPE)
    rng = seeded_source(13)
    return np.array([mwem_measure.noisy_row_count(true, epsilon, rng) for _ in range(draws)])


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True])
def test_the_noisy_row_count_passes_the_event_test_and_its_twin_fails(monkeypatch, broken):
    """D has 60 records, D' one more (add-remove); the twin draws at half the scale."""
    if broken:
        honest = mwem_measure.noise_scale
        monkeypatch.setattr(mwem_measure, "noise_scale", lambda s, e: honest(s, e) / 2)
    epsilon = 1.0
    added = np.vstack([PAIR_D, [[1, 0]]])
    x, x2 = count_samples(PAIR_D, epsilon), count_samples(added, epsilon)
    grid = np.arange(60 - 20, 61 + 21)  # noise scale 1: ±20 scales around both counts
    result = audit_neighbours(x, x2, epsilon=epsilon, thresholds=grid)
    assert result.passed != broken, result.summary()


# --- the paper's contingency-table experiment (small version) -------------------------------


def mean_relative_entropy(name, epsilon, fit, seeds=5):
    codes, shape, columns = load_table(name)
    workload = workload_of(columns, shape, 3)
    values = []
    for seed in range(seeds):
        if fit == "mwem":
            dist = mwem(codes, shape, workload, epsilon=epsilon, rng=seeded_source(seed))
            dist = dist.distribution
        else:
            dist = measure_all(codes, shape, workload, epsilon=epsilon, rng=seeded_source(seed))
        values.append(relative_entropy(codes, shape, dist.to_dense()))
    return float(np.mean(values))


@pytest.mark.parametrize("name", ["loglinear6", "loglinear8"])
def test_relative_entropy_falls_as_epsilon_grows(name):
    low, high = (mean_relative_entropy(name, e, "mwem") for e in (0.1, 10.0))
    assert high < low / 2, (low, high)


@pytest.mark.parametrize("name", ["loglinear6", "loglinear8"])
def test_at_small_epsilon_selecting_beats_measuring_every_marginal(name):
    ours = mean_relative_entropy(name, 0.5, "mwem")
    theirs = mean_relative_entropy(name, 0.5, "measure_all")
    assert ours < theirs / 2 if name == "loglinear6" else ours < theirs, (ours, theirs)


# --- scaling beyond memory ----------------------------------------------------------------------


def test_wide_binary_data_runs_factored_and_merges_only_measured_groups():
    d, n = 200, 2000
    rng = seeded_source(21)
    base = rng.integers(2, (n, d))
    base[:, 1] = base[:, 0]  # a correlated pair the workload can find
    columns = [f"b{i}" for i in range(d)]
    spec = random_marginals_spec(columns, 3, 400, seeded_source(22))
    spec["queries"].append({"type": "marginals", "subsets": [["b0", "b1"]]})
    workload = expand_workload(spec, columns, (2,) * d, set())
    result = mwem(
        base,
        (2,) * d,
        workload,
        epsilon=5.0,
        rounds=10,
        init_fraction=0,
        memory_cells=2**12,
        rng=seeded_source(23),
    )
    sizes = [g.probs.size for g in result.distribution.groups()]
    assert max(sizes) <= 2**12 and len(sizes) >= d - 10 * 3
    assert result.distribution.sample(10, seeded_source(1)).shape == (10, d)


@pytest.mark.slow
def test_the_papers_scaling_case_runs_on_1000_binary_attributes():
    """Domain 2^1000, 3,000 random 3-way marginals (benchmarks/mwem_scaling.py has figures)."""
    d, n = 1000, 10_000
    rng = seeded_source(31)
    hidden = rng.integers(2, (n, d // 5))
    codes = (hidden[:, np.arange(d) // 5] ^ (rng.uniform((n, d)) < 0.2)).astype(np.int64)
    columns = [f"b{i}" for i in range(d)]
    workload = expand_workload(
        random_marginals_spec(columns, 3, 3000, seeded_source(32)), columns, (2,) * d, set()
    )
    result = mwem(codes, (2,) * d, workload, epsilon=1.0, rng=seeded_source(33))
    chosen = [t["query"] for t in result.trace]
    # selection finds the queries that carry signal, two attributes of one block (a pair inside
    # a workload's 3-way marginal is selectable too): most rounds pick one, where 1% of
    # the workload's marginals and 0.3% of their pairs do
    signal = [len({a // 5 for a in q.attrs}) < len(q.attrs) for q in chosen]
    assert sum(signal) >= 0.8 * len(chosen), chosen
    assert result.distribution.sample(n, seeded_source(1)).shape == (n, d)


# --- the release --------------------------------------------------------------------------------

SCHEMA = Schema.from_dict(
    {
        "columns": [
            {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
            {"name": "sex", "type": "categorical", "categories": ["F", "M"], "unknown": "reject"},
            {"name": "job", "type": "categorical", "categories": ["a", "b", "c"]},
        ]
    }
)


def small_frame(rows=300):
    rng = seeded_source(30)
    return pd.DataFrame(
        {
            "age": rng.uniform(rows) * 100,
            "sex": np.where(rng.uniform(rows) < 0.4, "F", "M"),
            "job": np.array(["a", "b", "c", "zz"])[rng.integers(4, rows)],
        }
    )


def test_the_release_has_synthetic_rows_measurements_trace_and_progress():
    seen = []
    output = run_release(
        "mwem",
        small_frame(),
        SCHEMA,
        epsilon=1.0,
        params={"marginals": 2, "init_fraction": 0.3},
        rng=seeded_source(4),
        progress=lambda t, total: seen.append((t, total)),
    )
    synthetic = pd.read_csv(io.BytesIO(output.files["synthetic.csv"]))
    assert len(synthetic) == 300 and list(synthetic.columns) == ["age", "sex", "job"]
    assert set(synthetic["job"].dropna()) <= {"a", "b", "c", "(other)"}  # empty: "(missing)"
    measured = json.loads(output.files["measurements.json"])
    rounds = output.manifest["parameters"]["rounds"]
    assert len(measured["measurements"]) == 3 + rounds
    assert seen == [(t, rounds) for t in range(1, rounds + 1)]
    assert len(output.trace["trace"]) == rounds
    assert output.manifest["guarantee"] == {
        "unit": "one row of the input table",
        "neighbouring": "replace-one",
        "definition": "pure epsilon-DP",
        "epsilon": 1.0,
        "delta": 0.0,
        "rho": None,
        "sensitivity": 2,
    }
    json.dumps(output.trace, allow_nan=False)


def test_the_release_accepts_a_range_workload_and_refuses_unknown_parameters():
    spec = {"queries": [{"type": "ranges", "column": "age"}, {"type": "marginals", "k": 2}]}
    output = run_release(
        "mwem",
        small_frame(),
        SCHEMA,
        epsilon=2.0,
        params={"workload": spec, "rounds": 4},
        rng=seeded_source(5),
    )
    kinds = {
        m["query"]["type"] for m in json.loads(output.files["measurements.json"])["measurements"]
    }
    assert "marginal" in kinds
    with pytest.raises(MechanismError, match=r"parameter \('mix'\) is not used by mwem"):
        run_release("mwem", small_frame(), SCHEMA, epsilon=1.0, params={"mix": 0.1})
    with pytest.raises(MechanismError, match=r"delta \(0.1\) must be 0"):
        run_release("mwem", small_frame(), SCHEMA, epsilon=1.0, delta=0.1)


def test_the_same_seed_gives_the_same_release():
    outputs = [
        run_release("mwem", small_frame(), SCHEMA, epsilon=1.0, rng=seeded_source(8))
        for _ in range(2)
    ]
    assert outputs[0].files == outputs[1].files


def test_the_command_line_writes_the_release_and_explains_bad_input(tmp_path, capsys):
    from mechanisms.__main__ import main

    data, schema, workload = tmp_path / "d.csv", tmp_path / "s.json", tmp_path / "w.json"
    small_frame().to_csv(data, index=False)
    schema.write_text(json.dumps(SCHEMA.to_dict()))
    workload.write_text(json.dumps({"queries": [{"type": "ranges", "column": "age"}]}))
    common = [
        "mwem",
        "--input",
        str(data),
        "--schema",
        str(schema),
        "--epsilon",
        "1",
        "--seed",
        "3",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(common + ["--workload", str(workload), "--rounds", "3"]) == 0
    written = {p.name for p in (tmp_path / "out").iterdir()}
    released = {"synthetic.csv", "measurements.json", "manifest.json"}
    assert written == released | {"README.txt", "report.html", "report.pdf", "release.xlsx"}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["parameters"]["rounds"] == 3 and manifest["mechanism"] == "mwem"
    capsys.readouterr()
    assert main(common + ["--marginals", "7"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == "error: marginals k (7) must be an integer from 1 to 3"


def test_the_shipped_contingency_tables_are_what_their_generator_writes():
    """tests/data/loglinear*.csv are a pure function of make_tables.py's documented models."""
    check = subprocess.run(
        [sys.executable, str(TEST_DATA / "make_tables.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr


# --- the model's blocks on large domains (issue 44) ---------------------------------------------
# 4 columns of 64 bins plus the "(missing)" cell: 65^4 ≈ 1.8·10^7 cells, above the default
# whole-table limit of 2^22. A speed cap once let only pairs that kept the model's blocks within
# 2^22 cells compete, and from round 3 on it left queries out in every round; now every pair
# competes and blocks above the limit are kept as junction trees.
WIDE = Schema.from_dict(
    {
        "columns": [
            {"name": name, "type": "numeric", "lower": 0, "upper": 64, "bins": 64}
            for name in "abcd"
        ]
    }
)


def wide_frame(columns="abcd", rows=2000):
    rng = seeded_source(44)
    return pd.DataFrame({name: rng.uniform(rows) * 64 for name in columns})


def test_every_pair_competes_above_2_22_cells_and_the_memory_budget_is_counted():
    """Default: no round leaves a query out, pairs across blocks are measured (a junction tree,
    no table of 64^4 cells), the same rounds as whole tables; a memory budget of 8,192 cells
    leaves queries out in 3 of 5 rounds (the rounds it did are counted, as the release says)."""
    shape, codes = (64,) * 4, seeded_source(1).integers(64, 2000 * 4).reshape(2000, 4)
    workload = workload_of(list("abcd"), shape, 2)
    tree = mwem(codes, shape, workload, epsilon=10, rounds=5, rng=seeded_source(2))
    assert tree.left_out_rounds == 0
    assert max(c.size for c in tree.distribution.groups()) == 64**3  # not 64^4
    assert len(tree.distribution.trees()) == 1  # every column linked
    whole = mwem(codes, shape, workload, epsilon=10, rounds=5, rng=seeded_source(2),
                 quick_cells=None)  # fmt: skip
    assert [c.size for c in whole.distribution.groups()] == [64**4]
    assert [t["query"] for t in whole.trace] == [t["query"] for t in tree.trace]
    small = mwem(codes, shape, workload, epsilon=10, rounds=5, rng=seeded_source(2),
                 memory_cells=2 * 64**2)  # fmt: skip
    assert small.left_out_rounds == 3
    assert max(c.size for c in small.distribution.groups()) <= 2 * 64**2
    with pytest.raises(MechanismError, match=r"quick_cells \(0\) must be a whole number >= 1"):
        mwem(codes, shape, workload, epsilon=10, rounds=5, quick_cells=0)


def test_the_release_records_how_the_model_was_held(tmp_path, capsys):
    """The command line's --quick-cells reaches MWEM; the manifest records the whole-table
    limit, the memory budget and the rounds it left queries out (none here: no note, and the
    report says nothing of it); "none" keeps whole tables; a bad value is refused in words."""
    from mechanisms.__main__ import main

    def release(name, frame, schema, *options):
        data, schema_file = tmp_path / f"{name}.csv", tmp_path / f"{name}.json"
        frame.to_csv(data, index=False)
        schema_file.write_text(json.dumps(schema.to_dict()))
        out = tmp_path / name
        args = ["mwem", "--input", str(data), "--schema", str(schema_file), "--epsilon", "10",
                "--seed", "3", "--out", str(out), "--rounds", "5", *options]  # fmt: skip
        assert main(args) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        return manifest["parameters"]["model_blocks"], (out / "report.html").read_text()

    record = {"whole_cells": 1 << 22, "memory_cells": 25_000_000, "left_out_rounds": 0,
              "rounds": 5, "note": ""}  # fmt: skip
    blocks, report = release("wide", wide_frame(), WIDE)
    assert blocks == record
    assert "memory budget" not in report
    blocks, _ = release("whole", wide_frame(), WIDE, "--quick-cells", "none")
    assert blocks == dict(record, whole_cells=None)
    capsys.readouterr()
    data, schema_file = str(tmp_path / "whole.csv"), str(tmp_path / "whole.json")
    bad = ["mwem", "--input", data, "--schema", schema_file, "--epsilon", "1",
           "--out", str(tmp_path / "bad"), "--quick-cells", "lots"]  # fmt: skip
    assert main(bad) == 2
    assert capsys.readouterr().err.strip() == (
        "error: quick_cells ('lots') must be a whole number of cells >= 1 (default 4194304), "
        "or 'none' to keep every block of the model one whole table"
    )


def test_the_note_when_the_memory_budget_left_patterns_out():
    note = model_record(1 << 22, 8192, 3, 5)["note"]
    assert note.startswith("In 3 of 5 rounds the memory budget left out patterns")
    assert "more than 8,192 cells" in note and "memory_cells" in note
    assert model_record(1 << 22, 8192, 0, 5)["note"] == ""
