"""Person-level privacy (mechanisms.persons): schema keys, contribution bounding, and the event
test of docs/testing-privacy.md on person-level neighbours.

Event tests: D and D' differ in all rows of one person with k = 3 rows, all in one cell (the
worst case: the L1 change is k on one count) under add-remove one person, or those k rows
moved to another cell (L1 change 2k) under replace one person; D also has a person with 5 rows
in one cell, whom bounding cuts to 3. Each case records the noise scale the real
person-level release draws (run_release through a RecordingSource), then draws n = 10^5 noisy
outputs per side at that scale; alpha = 1e-6 family-wise. The claim is the REQUESTED epsilon
(MWEM: its documented 1-way share, ADD_REMOVE_INIT_FRACTION of it). Each has a broken twin that
calibrates for one row instead of k (group size 1) and must FAIL the same test.
Bounding's uniformity: chi-square over the 10 two-of-five subsets, 10^4 persons, p > 1e-6 (the
false-alarm rate); its twin keeps the first k rows and must give p < 1e-6.
"""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import chisquare

from mechanisms import persons
from mechanisms.accounting import approx_dp_to_zcdp
from mechanisms.catalogue import run_release
from mechanisms.errors import MechanismError
from mechanisms.noise import RecordingSource, seeded_source
from mechanisms.schema import Schema
from tests.mechanisms.privacy_audit import audit_neighbours
from tests.privacy.support import ALPHA, N_PER_SIDE, laplace_loss_statistic

mwem_plan = importlib.import_module("mechanisms.mwem.plan")

K = 3
SCHEMA = {
    "columns": [
        {"name": "pid", "role": "person_id"},
        {"name": "x", "type": "numeric", "lower": 0, "upper": 1, "bins": 4},
    ],
    "max_rows_per_person": K,
}
D = pd.DataFrame(
    {
        "pid": ["a", "a", "b", "c", "c", "c"] + ["big"] * 5,
        "x": [0.1, 0.6, 0.3, 0.9, 0.9, 0.4] + [0.7] * 5,
    }
)
NEW_PERSON = pd.DataFrame({"pid": ["new"] * K, "x": [0.2] * K})
D2 = pd.concat([D, NEW_PERSON], ignore_index=True)


# ---------------------------------------------------------------- schema keys


def test_schema_reads_and_writes_the_person_column_and_k():
    schema = Schema.from_dict(SCHEMA)
    assert schema.person == persons.PersonLevel("pid", K)
    assert schema.resolve_columns() == ["x"]  # the ID column is never a mechanism column
    assert Schema.from_dict(schema.to_dict()).to_dict() == schema.to_dict()
    assert schema.to_dict()["max_rows_per_person"] == K


@pytest.mark.parametrize(
    "change, message",
    [
        ({"max_rows_per_person": None}, "not max_rows_per_person"),
        ({"max_rows_per_person": 0}, "whole number from 1"),
        ({"max_rows_per_person": 2.5}, "whole number from 1"),
        ({"columns": SCHEMA["columns"] + [{"name": "p2", "role": "person_id"}]}, "several"),
        ({"columns": SCHEMA["columns"][1:]}, "no column has"),
    ],
)
def test_bad_person_keys_get_a_clear_message(change, message):
    document = {k: v for k, v in {**SCHEMA, **change}.items() if v is not None}
    with pytest.raises(MechanismError, match=message):
        Schema.from_dict(document)


def test_a_release_can_override_k_and_a_row_level_schema_refuses_it():
    out = run_release(
        "perturbed_histogram",
        D,
        Schema.from_dict(SCHEMA),
        epsilon=1.0,
        neighbouring="add-remove",
        rng=seeded_source(1),
        max_rows_per_person=1,
    )
    assert out.manifest["guarantee"]["max_rows_per_person"] == 1
    assert out.custodian == {"rows_dropped_by_bounding": len(D) - 4}  # 4 persons, 1 row each
    with pytest.raises(MechanismError, match="no person column"):
        run_release(
            "perturbed_histogram",
            D[["x"]],
            Schema.from_dict({"columns": SCHEMA["columns"][1:]}),
            epsilon=1.0,
            max_rows_per_person=2,
        )


# ---------------------------------------------------------------- bounding


def test_bounding_keeps_at_most_k_rows_per_person_and_drops_the_id():
    kept, dropped = persons.bound_contributions(D, persons.PersonLevel("pid", K), seeded_source(3))
    assert list(kept.columns) == ["x"]
    assert len(kept) == 6 + K and dropped == 5 - K
    assert (kept["x"] == 0.7).sum() == K  # the 5-row person keeps exactly k rows


def test_bounding_refuses_missing_ids_and_a_missing_column():
    level = persons.PersonLevel("pid", K)
    with pytest.raises(MechanismError, match="empty cells"):
        persons.bound_contributions(D.assign(pid=[None] + list(D.pid[1:])), level, seeded_source(1))
    with pytest.raises(MechanismError, match="not in the data"):
        persons.bound_contributions(D[["x"]], level, seeded_source(1))


def _kept_subsets(bounder) -> np.ndarray:
    """Counts of the 10 two-of-five subsets that 10^4 persons (rows 0..4 each) keep at k = 2."""
    people = 10_000
    ids = np.repeat(np.arange(people), 5)
    data = pd.DataFrame({"pid": ids, "who": ids, "pos": np.tile(np.arange(5), people)})
    kept, _ = bounder(data, persons.PersonLevel("pid", 2))
    pairs = kept.groupby("who")["pos"].apply(lambda s: tuple(sorted(s))).value_counts()
    subsets = [(i, j) for i in range(5) for j in range(i + 1, 5)]
    return np.array([pairs.get(s, 0) for s in subsets])


def _first_k(data, level):
    """The broken twin: keeps each person's first k rows (not a random subset)."""
    kept = data.groupby(level.column).head(level.max_rows)
    return kept.drop(columns=[level.column]), len(data) - len(kept)


@pytest.mark.parametrize("broken", [False, True])
def test_bounding_chooses_a_uniform_subset_and_its_first_k_twin_fails(broken):
    def honest(data, level):
        return persons.bound_contributions(data, level, seeded_source(11))

    counts = _kept_subsets(_first_k if broken else honest)
    assert counts.sum() == 10_000
    p_value = chisquare(counts).pvalue
    assert (p_value > ALPHA) != broken, (p_value, counts)


# ---------------------------------------------------------------- event tests


def _first_scale(mechanism, data, epsilon, params, neighbouring):
    rng = RecordingSource(seeded_source(5))
    out = run_release(
        mechanism,
        data,
        Schema.from_dict(SCHEMA),
        epsilon=epsilon,
        neighbouring=neighbouring,
        columns=["x"],
        params=params,
        rng=rng,
    )
    return rng.noise_calls()[0].scale, out


def _bounded_counts(data):
    kept, _ = persons.bound_contributions(data, persons.PersonLevel("pid", K), seeded_source(0))
    return Schema.from_dict(SCHEMA).cell_counts(kept, ["x"])


MOVED_PERSON = pd.DataFrame({"pid": ["new"] * K, "x": [0.95] * K})
# replace one person: the k rows of "new" in bin 0 against k rows in bin 3 (L1 change 2k)
D_REPLACED = pd.concat([D, MOVED_PERSON], ignore_index=True)
RANGE = {"mechanism": "identity", "random_boxes": 2}
CASES = {
    # mechanism, params, requested epsilon, claim as a share of it (the documented split),
    # relation, D, D'
    "perturbed_histogram": ("perturbed_histogram", {}, 1.0, 1.0, "add-remove", D, D2),
    "perturbed_histogram, replace": (
        "perturbed_histogram",
        {},
        1.0,
        1.0,
        "replace-one",
        D2,
        D_REPLACED,
    ),
    "range_count identity": ("range_count", RANGE, 1.0, 1.0, "add-remove", D, D2),
    "range_count identity, replace": (
        "range_count",
        RANGE,
        1.0,
        1.0,
        "replace-one",
        D2,
        D_REPLACED,
    ),
    "mwem 1-way start": (
        "mwem",
        {"rounds": 1},
        2.5,
        mwem_plan.ADD_REMOVE_INIT_FRACTION,
        "add-remove",
        D,
        D2,
    ),
}


@pytest.mark.audit
@pytest.mark.parametrize("broken", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_person_level_release_passes_the_event_test_and_its_one_row_twin_fails(
    monkeypatch, case, broken
):
    mechanism, params, epsilon, share, relation, d, d2 = CASES[case]
    if broken:  # calibrate for one row instead of k
        monkeypatch.setattr(persons.PersonLevel, "group_size", lambda self, neighbouring: 1)
    scale, _ = _first_scale(mechanism, d, epsilon, params, relation)
    scale2, _ = _first_scale(mechanism, d2, epsilon, params, relation)
    assert scale == scale2  # the noise never depends on the data
    exact, exact2 = _bounded_counts(d), _bounded_counts(d2)
    changed = K if relation == "add-remove" else 2 * K  # all k rows of one person
    assert np.abs(exact - exact2).sum() == changed
    noise = seeded_source(21).discrete_laplace(scale, (2, N_PER_SIDE, exact.size))
    x, l1 = laplace_loss_statistic(exact.ravel() + noise[0], exact, exact2)
    x2, _ = laplace_loss_statistic(exact2.ravel() + noise[1], exact, exact2)
    result = audit_neighbours(x, x2, epsilon=epsilon * share, thresholds=np.arange(-l1, l1 + 1))
    assert result.passed != broken, result.summary()


# ---------------------------------------------------------------- accounting and refusals


@pytest.mark.parametrize("neighbouring, group", [("add-remove", K), ("replace-one", 2 * K)])
def test_person_level_spends_the_request_over_the_group_and_states_the_unit(neighbouring, group):
    out = run_release(
        "mwem",
        D,
        Schema.from_dict(SCHEMA),
        epsilon=1.5,
        neighbouring=neighbouring,
        params={"rounds": 2},
        rng=seeded_source(2),
    )
    manifest = json.loads(json.dumps(out.manifest))
    assert (
        manifest["guarantee"]["unit"]
        == "one person: all rows with the same pid, at most 3 rows each"
    )
    assert manifest["guarantee"]["neighbouring"] == neighbouring
    assert manifest["guarantee"]["sensitivity"] == group  # L1 of counts: k, or 2k under replace
    assert manifest["accounting"]["epsilon"] == 1.5
    assert group * manifest["accounting"]["per_row"]["epsilon"] <= 1.5
    assert manifest["row_count_public"] is False
    assert "rows_dropped_by_bounding" not in json.dumps(manifest)
    assert "pid" not in out.files["synthetic.csv"].decode().splitlines()[0]


def test_zcdp_range_counts_scale_rho_by_the_square_of_k():
    epsilon, delta = 1.0, 1e-6
    out = run_release(
        "range_count",
        D,
        Schema.from_dict(SCHEMA),
        epsilon=epsilon,
        delta=delta,
        neighbouring="add-remove",
        params={"mechanism": "identity", "random_boxes": 2},
        rng=seeded_source(2),
    )
    rho = approx_dp_to_zcdp(epsilon, delta)  # the requested (epsilon, delta) as zCDP
    assert K**2 * out.manifest["accounting"]["per_row"]["rho"] <= rho
    assert K**2 * out.manifest["accounting"]["per_row"]["rho"] == pytest.approx(rho, rel=1e-9)
    assert out.manifest["guarantee"]["rho"] == pytest.approx(rho)


@pytest.mark.parametrize(
    "mechanism, delta, params",
    [("smoothed_histogram", 0.0, {}), ("range_count", 1e-6, {"mechanism": "mn12_laplace"})],
)
def test_mechanisms_without_a_person_level_form_are_refused(mechanism, delta, params):
    with pytest.raises(MechanismError, match="cannot protect persons"):
        run_release(mechanism, D, Schema.from_dict(SCHEMA), epsilon=1.0, delta=delta, params=params)


def test_chunked_input_is_bounded_like_a_dataframe():
    from mechanisms.chunks import ChunkedTable

    chunks = ChunkedTable([D.iloc[:4], D.iloc[4:]])
    out = run_release(
        "perturbed_histogram",
        chunks,
        Schema.from_dict(SCHEMA),
        epsilon=math.inf,
        neighbouring="add-remove",
        rng=seeded_source(1),
    )
    assert out.custodian == {"rows_dropped_by_bounding": 5 - K}


def test_the_command_line_reads_the_same_keys_and_keeps_the_drop_count_private(tmp_path, capsys):
    from mechanisms.__main__ import main

    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    D.to_csv(tmp_path / "data.csv", index=False)
    out, record = tmp_path / "public", tmp_path / "owner.json"
    argv = ["perturbed-histogram", "--input", str(tmp_path / "data.csv"), "--schema"]
    argv += [str(tmp_path / "schema.json"), "--epsilon", "1", "--out", str(out)]
    assert main([*argv, "--custodian-record", str(record), "--max-rows-per-person", "2"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["guarantee"]["neighbouring"] == "add-remove"  # the person-level default
    assert manifest["guarantee"]["unit"].startswith("one person: all rows with the same pid")
    assert manifest["guarantee"]["max_rows_per_person"] == 2
    assert json.loads(record.read_text())["rows_dropped_by_bounding"] == 1 + 3  # c: 1, big: 3
    public = b"".join(p.read_bytes() for p in out.iterdir())
    assert b"rows_dropped" not in public and b"big" not in public  # nor the person IDs
    assert main([*argv, "--max-rows-per-person", "0"]) == 2
    assert "whole number from 1" in capsys.readouterr().err
