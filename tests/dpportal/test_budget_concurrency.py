"""T11: 40 concurrent release requests of ε = 0.1 against a total of 1.0, from 8 processes.

Each process has its own database connection; a test-only pause of 10 ms between the budget
check and the debit widens the race window. Runs on whichever database the suite uses
(./test.sh runs it on PostgreSQL and again on SQLite with IMMEDIATE transactions).
The broken twin checks the budget before taking the lock and must overspend.
"""

import multiprocessing
import time
from decimal import Decimal

import pytest
from django.db import connections, transaction
from django.db.models import F, Sum

from dpportal import services
from dpportal.models import BudgetLedgerEntry, Dataset, Release
from tests.dpportal.test_foundation import make_demo_dataset, make_user

PROCESSES, REQUESTS, EPSILON, TOTAL = 8, 40, Decimal("0.1"), Decimal("1.0")


def request_release(args):
    """One request in a child process: 'admitted', 'refused' or the unexpected error."""
    dataset_pk, user_pk, create = args
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(pk=user_pk)
    dataset = Dataset.objects.get(pk=dataset_pk)
    try:
        create(dataset=dataset, user=user, mechanism="perturbed_histogram", columns=["age"],
               params={}, epsilon=EPSILON)
        return "admitted"
    except services.ServiceError:
        return "refused"
    except Exception as exc:  # reported and counted; the test requires none
        return f"error: {type(exc).__name__}: {exc}"


def naive_release_create(*, dataset, user, mechanism, columns, params, epsilon):
    """The broken twin: the same check and debit, but the check reads the row without a lock."""
    epsilon = Decimal(str(epsilon))
    snapshot = Dataset.objects.get(pk=dataset.pk)
    services._check_budget(snapshot, epsilon, Decimal("0"))
    time.sleep(0.01)
    with transaction.atomic():
        Dataset.objects.filter(pk=dataset.pk).update(epsilon_spent=F("epsilon_spent") + epsilon)
        spent = Dataset.objects.get(pk=dataset.pk).epsilon_spent
        release = Release.objects.create(dataset=snapshot, requested_by=user, mechanism=mechanism,
                                         columns=columns, params=params, epsilon=epsilon,
                                         neighbouring=snapshot.neighbouring)
        BudgetLedgerEntry.objects.create(dataset=snapshot, release=release, epsilon=epsilon,
                                         epsilon_spent_after=spent, delta_spent_after=0)


def _child_init():
    connections.close_all()  # never share the parent's connection: each process opens its own


def run_race(create):
    owner = make_user()
    dataset = make_demo_dataset(owner, epsilon_total=TOTAL)
    connections.close_all()
    context = multiprocessing.get_context("fork")
    started = time.perf_counter()
    with context.Pool(PROCESSES, initializer=_child_init) as pool:
        outcomes = pool.map(request_release, [(dataset.pk, owner.pk, create)] * REQUESTS,
                            chunksize=1)
    elapsed = time.perf_counter() - started
    dataset.refresh_from_db()
    ledger = BudgetLedgerEntry.objects.filter(dataset=dataset, kind="debit")
    return {
        "admitted": outcomes.count("admitted"),
        "refused": outcomes.count("refused"),
        "errors": [o for o in outcomes if o.startswith("error")],
        "spent": dataset.epsilon_spent,
        "ledger_sum": ledger.aggregate(total=Sum("epsilon"))["total"],
        "releases": Release.objects.filter(dataset=dataset).count(),
        "seconds": elapsed,
    }


@pytest.fixture
def race_settings(settings, monkeypatch):
    settings.DPPORTAL_TEST_PAUSE_BEFORE_DEBIT = 0.01
    monkeypatch.setattr(services, "release_send", lambda pk: True)  # no broker traffic here


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_never_overspend(race_settings):
    vendor = connections["default"].vendor
    result = run_race(services.release_create)
    print(f"\nT11 [{vendor}] {REQUESTS} requests of ε={EPSILON} against {TOTAL} from "
          f"{PROCESSES} processes: admitted={result['admitted']} refused={result['refused']} "
          f"errors={len(result['errors'])} spent={result['spent']} "
          f"ledger_sum={result['ledger_sum']} ({result['seconds']:.1f} s)")
    assert result["errors"] == []
    assert result["admitted"] == 10 and result["refused"] == 30
    assert result["spent"] == TOTAL == result["ledger_sum"]
    assert result["releases"] == 10


@pytest.mark.django_db(transaction=True)
def test_broken_twin_without_the_lock_overspends(race_settings):
    vendor = connections["default"].vendor
    result = run_race(naive_release_create)
    print(f"\nT11 twin [{vendor}] check without lock: admitted={result['admitted']} "
          f"spent={result['spent']} (total {TOTAL}) errors={len(result['errors'])}")
    assert result["admitted"] > 10 and result["spent"] > TOTAL
