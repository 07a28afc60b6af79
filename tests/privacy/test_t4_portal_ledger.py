"""T4 at the portal: the epsilon the worker's mechanism actually spends (recorded noise calls)
equals what services.release_create debited from the dataset's budget ledger.

The worker path has no hook for a random source: release_engine.compute always passes
rng=None (the secure, unseeded source; T7 checks that nothing can pass a seed). This test
wraps mechanisms.run_release for the duration of the test: it checks that the portal passed
rng=None and substitutes RecordingSource(secure_source()), so the noise stays secure and only
the calls are recorded. services.release_create and release_run run in-process on the test
database (the broker send is stubbed, as in the T8 tests).
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

import mechanisms
from dpportal import services
from dpportal.models import BudgetLedgerEntry, Release
from mechanisms.noise import RecordingSource, secure_source
from tests.helpers import make_user
from tests.privacy.replay import recorded_epsilon

SCHEMA = {
    "columns": [
        {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
        {"name": "y", "type": "numeric", "lower": 0, "upper": 10, "bins": 3},
        {"name": "g", "type": "categorical", "categories": ["a", "b", "c"], "unknown": "other"},
    ]
}
MWEM_WORKLOAD = {"queries": [{"type": "marginals", "k": 1}, {"type": "ranges", "column": "x"}]}
RELEASES = [  # (mechanism, columns, params, epsilon, delta)
    ("perturbed_histogram", ["x", "g"], {}, "0.15", "0"),
    ("smoothed_histogram", ["x", "g"], {"rows": 20}, "0.2", "0"),
    ("mwem", ["x", "g"], {"rounds": 3, "workload": MWEM_WORKLOAD}, "0.25", "0"),
    ("range_count", ["x", "y"], {"mechanism": "tree", "prefixes": True}, "0.1", "0"),
    ("range_count", ["x", "y"], {"mechanism": "identity", "prefixes": True}, "0.3", "0.000001"),
]


@pytest.fixture
def dataset(settings, monkeypatch, tmp_path):
    settings.DPPORTAL_HEARTBEAT_SECONDS = 0
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "x": rng.uniform(0, 100, 300).round(2),
            "y": rng.uniform(0, 10, 300).round(2),
            "g": rng.choice(["a", "b", "c"], 300),
        }
    )
    path = tmp_path / "table.csv"
    frame.to_csv(path, index=False)
    owner = make_user()
    created = services.dataset_create_from_path(
        owner=owner, name="T4", source_path=path, epsilon_total=1, delta_total="0.00001"
    )
    return services.dataset_confirm_schema(dataset=created, user=owner, schema=SCHEMA), owner


@pytest.fixture
def recorder(monkeypatch):
    """Every run_release the worker makes, with its recorded noise calls and output."""
    runs, honest = [], mechanisms.run_release

    def recording(name, data, schema, **kwargs):
        assert kwargs.get("rng") is None, "the portal must pass rng=None (secure, unseeded)"
        source = RecordingSource(secure_source())
        output = honest(name, data, schema, **{**kwargs, "rng": source})
        runs.append(
            {
                "name": name,
                "calls": source.noise_calls(),
                "output": output,
                "neighbouring": kwargs["neighbouring"],
                "delta": kwargs["delta"],
            }
        )
        return output

    monkeypatch.setattr(mechanisms, "run_release", recording)
    return runs


def release_and_record(dataset, owner, recorder, spec):
    """Create (debit) and run one release; return (recorded epsilon, ledger debit)."""
    mechanism, columns, params, epsilon, delta = spec
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism=mechanism,
        columns=columns,
        params=params,
        epsilon=epsilon,
        delta=delta,
    )
    services.release_run(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == Release.Status.DONE, release.error_message
    run = recorder[-1]
    spent = recorded_epsilon(
        run["name"],
        run["calls"],
        run["output"],
        neighbouring=run["neighbouring"],
        delta=run["delta"],
    )
    (debit,) = BudgetLedgerEntry.objects.filter(release=release)
    assert debit.kind == BudgetLedgerEntry.Kind.DEBIT
    assert debit.epsilon == Decimal(epsilon) and debit.delta == Decimal(delta)
    return spent, debit


def matches_the_ledger(spent: float, debit) -> bool:
    return spent <= float(debit.epsilon) * (1 + 1e-12) and math.isclose(
        spent, float(debit.epsilon), rel_tol=1e-9
    )


@pytest.mark.django_db
def test_the_recorded_epsilon_of_every_release_equals_the_ledger_debit(dataset, recorder):
    dataset, owner = dataset
    lines = []
    for spec in RELEASES:
        spent, debit = release_and_record(dataset, owner, recorder, spec)
        assert matches_the_ledger(spent, debit), (spec, spent)
        lines.append(
            f"{spec[0]} {spec[2].get('mechanism', '')}".strip()
            + f": debited {debit.epsilon}, recorded {spent:.12g}"
        )
    dataset.refresh_from_db()
    ledger_total = sum(e.epsilon for e in BudgetLedgerEntry.objects.filter(dataset=dataset))
    assert dataset.epsilon_spent == ledger_total == sum(Decimal(r[3]) for r in RELEASES)
    assert len(recorder) == len(RELEASES)
    print(
        "\nFIGURE T4 portal ledger vs recorded epsilon (worker path, secure source):\n  "
        + "\n  ".join(lines)
        + f"\n  dataset spent {dataset.epsilon_spent} == ledger sum"
    )


@pytest.mark.django_db
def test_a_worker_that_spends_more_than_the_debit_is_caught(dataset, recorder, monkeypatch):
    """Twin: the worker runs the mechanism at twice the epsilon the ledger debited."""
    dataset, owner = dataset
    recording = mechanisms.run_release
    monkeypatch.setattr(
        mechanisms,
        "run_release",
        lambda name, data, schema, **kw: recording(
            name, data, schema, **{**kw, "epsilon": 2 * kw["epsilon"]}
        ),
    )
    spent, debit = release_and_record(dataset, owner, recorder, RELEASES[0])
    assert not matches_the_ledger(spent, debit)
