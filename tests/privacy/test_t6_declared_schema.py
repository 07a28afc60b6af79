"""T6: releases use the declared schema only. D' is D through the portal's CSV ingest with one
row replaced by (replace-one) or one row added as (add-remove) an extreme outlier or a
category the schema does not declare. Require, for every mechanism: identical bin edges,
categories and clamp bounds in the public manifest/structure, identical noise scales (recorded),
identical output shape (tables' headers, labelled cells, row counts where n is public), and
the undeclared category and the outlier value nowhere in the release.
Twins: a release whose bounds come from the data, and one that adds observed categories to
the domain, are both caught by the same comparison.
"""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

import mechanisms
from mechanisms.errors import MechanismError
from mechanisms.noise import RecordingSource, seeded_source
from tests.privacy.test_t3_t4_record_replay import SCHEMA, through_ingest

MWEM_WORKLOAD = {"queries": [{"type": "marginals", "k": 2}, {"type": "ranges", "column": "x"}]}
RELEASES = [  # (name, columns, params, delta, relations)
    ("perturbed_histogram", ["x", "g"], {}, 0.0, ("replace-one", "add-remove")),
    ("smoothed_histogram", ["x", "g"], {"rows": 40}, 0.0, ("replace-one",)),
    (
        "mwem",
        ["x", "g"],
        {"rounds": 3, "workload": MWEM_WORKLOAD},
        0.0,
        ("replace-one", "add-remove"),
    ),
    (
        "range_count",
        ["x", "y"],
        {"mechanism": "tree", "prefixes": True},
        0.0,
        ("replace-one", "add-remove"),
    ),
    (
        "range_count",
        ["x", "y"],
        {"mechanism": "mn12", "random_halfspaces": 12},
        1e-6,
        ("replace-one", "add-remove"),
    ),
]
OUTLIER, UNSEEN = 987654321987.0, "zz_never_declared"
BASE = [(5.0 + 9 * i, (i * 7) % 10 + 0.5, "abc"[i % 3]) for i in range(11)]
ALTERED = {
    "outlier": (OUTLIER, -OUTLIER, "a"),
    "undeclared category": (50.0, 5.0, UNSEEN),
}


def neighbour(kind: str, relation: str):
    row = ALTERED[kind]
    return BASE[:-1] + [row] if relation == "replace-one" else BASE + [row]


def footprint(name: str, output, calls, relation: str) -> dict:
    """Everything T6 requires to be the same on D and D'."""
    tables = {}
    for filename, content in output.files.items():
        if filename.endswith(".csv"):
            frame = pd.read_csv(io.BytesIO(content), keep_default_na=False)
            labels = [c for c in frame.columns if c in ("x", "y", "g")]
            public_rows = relation == "replace-one" or filename != "synthetic.csv"
            tables[filename] = (
                list(frame.columns),
                len(frame) if public_rows else None,
                frame[labels].to_csv(index=False) if filename != "synthetic.csv" else None,
            )
    structure = json.loads(output.files.get("structure.json", b"{}"))
    scales = [
        (c.primitive, c.scale) if name == "mwem" else (c.primitive, c.scale, c.size) for c in calls
    ]
    return {
        "schema": output.manifest.get("schema"),
        "support": structure.get("support"),
        "plan": structure.get("plan") if name == "range_count" else None,
        "noise": scales,
        "tables": tables,
    }


def release(name, rows, columns, params, delta, relation, tmp_path, tag, schema=SCHEMA):
    frame = through_ingest(rows, tmp_path, tag)
    source = RecordingSource(seeded_source(8))
    output = mechanisms.run_release(
        name,
        frame,
        schema,
        columns=columns,
        params=params,
        epsilon=1.0,
        delta=delta,
        neighbouring=relation,
        rng=source,
    )
    return output, source.noise_calls()


def public_bytes(output) -> bytes:
    return (
        b"".join(output.files.values())
        + json.dumps(
            [mechanisms.public_manifest(output.manifest), output.trace], default=str
        ).encode()
    )


CASES = [(r, kind, relation) for r in RELEASES for kind in ALTERED for relation in r[4]]


@pytest.mark.parametrize(
    "spec, kind, relation",
    CASES,
    ids=[f"{r[0]}-{r[2].get('mechanism', '')}-{k}-{rel}" for r, k, rel in CASES],
)
def test_an_outlier_or_undeclared_category_changes_nothing_but_noise(
    spec, kind, relation, tmp_path
):
    name, columns, params, delta, _ = spec
    out_d, calls_d = release(name, BASE, columns, params, delta, relation, tmp_path, "d")
    out_d2, calls_d2 = release(
        name, neighbour(kind, relation), columns, params, delta, relation, tmp_path, "d2"
    )
    assert footprint(name, out_d, calls_d, relation) == footprint(name, out_d2, calls_d2, relation)
    leaked = public_bytes(out_d2)
    assert UNSEEN.encode() not in leaked
    assert b"987654321987" not in leaked and b"9.87654321987e" not in leaked
    print(
        f"\nFIGURE T6 {name} {params.get('mechanism', '')} {kind} ({relation}): same "
        f"bounds, categories, noise scales of {len(calls_d)} noise calls, output shape; "
        "unseen value absent"
    )


def test_a_rejecting_schema_refuses_the_unseen_category_without_quoting_it(tmp_path):
    strict = SCHEMA.to_dict()
    strict["columns"][2]["unknown"] = "reject"
    with pytest.raises(MechanismError, match="outside its declared categories") as error:
        release(
            "perturbed_histogram",
            neighbour("undeclared category", "add-remove"),
            ["x", "g"],
            {},
            0.0,
            "add-remove",
            tmp_path,
            "d2",
            schema=mechanisms.Schema.from_dict(strict),
        )
    assert UNSEEN not in str(error.value)


# ---------------------------------------------------------------- twins


def data_derived_schema(frame: pd.DataFrame) -> mechanisms.Schema:
    """What a careless mechanism would do: bounds from the data, categories as observed."""
    spec = SCHEMA.to_dict()
    spec["columns"][0]["upper"] = max(float(frame["x"].max()), 1.0)
    spec["columns"][2]["categories"] = sorted(frame["g"].astype(str).unique())
    return mechanisms.Schema.from_dict(spec)


@pytest.mark.parametrize("kind", ALTERED)
def test_the_comparison_catches_a_data_derived_schema(kind, tmp_path):
    name, columns, params, delta, _ = RELEASES[0]
    rows = {"d": BASE, "d2": neighbour(kind, "add-remove")}
    prints = []
    for tag, data in rows.items():
        schema = data_derived_schema(through_ingest(data, tmp_path, tag))
        output, calls = release(
            name, data, columns, params, delta, "add-remove", tmp_path, tag, schema=schema
        )
        prints.append(footprint(name, output, calls, "add-remove"))
    assert prints[0] != prints[1]
    if kind == "undeclared category":
        assert UNSEEN.encode() in public_bytes(output)
