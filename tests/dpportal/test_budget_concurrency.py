"""T11: 40 concurrent release requests of ε = 0.1 against a total of 1.0, from 8 processes.

Each process has its own database connection; a pause of 10 ms after the budget check (the
test wraps `releases.check_budget`, before the pool forks) widens the race window between the
check and the debit. Runs on whichever database the suite uses
(./test.sh runs it on PostgreSQL and again on SQLite with IMMEDIATE transactions).
The broken twin checks the budget before taking the lock and must overspend.
T11b: the same race split between two uploads of the same content, which share one budget row;
its broken twin gives each upload its own budget (as before fingerprints) and must overspend.
"""

import multiprocessing
import os
import time
from decimal import Decimal

import pytest
from django.db import connections, transaction
from django.db.models import F, Sum

from dpportal import services
from dpportal.models import BudgetLedgerEntry, Dataset, PrivacyBudget, Release
from tests.conftest import REPO_ROOT
from tests.helpers import DEMO_SCHEMA, make_demo_dataset, make_user

pytestmark = pytest.mark.database

PROCESSES, REQUESTS, EPSILON, TOTAL = 8, 40, Decimal("0.1"), Decimal("1.0")
PAUSE_AFTER_CHECK = 0.01  # seconds


def request_release(args):
    """One request in a child process: 'admitted', 'refused' or the unexpected error."""
    dataset_pk, user_pk, create = args
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(pk=user_pk)
    dataset = Dataset.objects.get(pk=dataset_pk)
    try:
        create(
            dataset=dataset,
            user=user,
            mechanism="perturbed_histogram",
            columns=["age"],
            params={},
            epsilon=EPSILON,
        )
        return "admitted"
    except services.ServiceError:
        return "refused"
    except Exception as exc:  # reported and counted; the test requires none
        return f"error: {type(exc).__name__}: {exc}"


def naive_release_create(*, dataset, user, mechanism, columns, params, epsilon):
    """The broken twin: the same check and debit, but the check reads the row without a lock."""
    epsilon = Decimal(str(epsilon))
    snapshot = Dataset.objects.get(pk=dataset.pk)
    services.budget.check_budget(snapshot, epsilon, Decimal("0"))
    time.sleep(PAUSE_AFTER_CHECK)
    with transaction.atomic():
        budget = PrivacyBudget.objects.filter(pk=snapshot.budget_id)
        budget.update(epsilon_spent=F("epsilon_spent") + epsilon)
        spent = budget.get().epsilon_spent
        release = Release.objects.create(
            dataset=snapshot,
            requested_by=user,
            mechanism=mechanism,
            columns=columns,
            params=params,
            epsilon=epsilon,
            neighbouring=snapshot.neighbouring,
        )
        BudgetLedgerEntry.objects.create(
            dataset=snapshot,
            release=release,
            epsilon=epsilon,
            epsilon_spent_after=spent,
            delta_spent_after=0,
        )


def per_upload_release_create(*, dataset, user, mechanism, columns, params, epsilon):
    """The broken twin of T11b: each upload checks only its own debits against the total."""
    epsilon = Decimal(str(epsilon))
    with transaction.atomic():
        locked = services.budget.locked_dataset(dataset.pk)
        own = locked.ledger.aggregate(total=Sum("epsilon"))["total"] or Decimal("0")
        if epsilon > locked.epsilon_total - own:
            raise services.ServiceError("Not enough privacy budget")
        release = Release.objects.create(
            dataset=locked,
            requested_by=user,
            mechanism=mechanism,
            columns=columns,
            params=params,
            epsilon=epsilon,
            neighbouring=locked.neighbouring,
        )
        services.budget.ledger_write(locked, release, BudgetLedgerEntry.Kind.DEBIT)


def _child_init():
    connections.close_all()  # never share the parent's connection: each process opens its own


def second_upload(owner):
    """The demo file uploaded again by the same owner: a second dataset on the same budget."""
    again = services.dataset_create_from_path(
        owner=owner,
        name="Adult again",
        source_path=REPO_ROOT / "demo" / "adult.csv.gz",
        epsilon_total=5,
    )
    return services.dataset_confirm_schema(dataset=again, user=owner, schema=DEMO_SCHEMA)


def run_race(create, uploads=1):
    owner = make_user()
    datasets = [make_demo_dataset(owner, epsilon_total=TOTAL)]
    datasets += [second_upload(owner) for _ in range(uploads - 1)]
    connections.close_all()
    context = multiprocessing.get_context("fork")
    started = time.perf_counter()
    jobs = [(datasets[i % uploads].pk, owner.pk, create) for i in range(REQUESTS)]
    with context.Pool(PROCESSES, initializer=_child_init) as pool:
        outcomes = pool.map(request_release, jobs, chunksize=1)
    elapsed = time.perf_counter() - started
    budget = PrivacyBudget.objects.get(pk=datasets[0].budget_id)
    ledger = BudgetLedgerEntry.objects.filter(dataset__in=datasets, kind="debit")
    return {
        "admitted": outcomes.count("admitted"),
        "refused": outcomes.count("refused"),
        "errors": [o for o in outcomes if o.startswith("error")],
        "spent": budget.epsilon_spent,
        "ledger_sum": ledger.aggregate(total=Sum("epsilon"))["total"],
        "releases": Release.objects.filter(dataset__in=datasets).count(),
        "budgets": len({d.budget_id for d in datasets}),
        "seconds": elapsed,
    }


@pytest.fixture
def race_settings(monkeypatch, tmp_path):
    """Widen the check-then-debit window of the real release_create: its budget check (made
    under the lock) is followed by a pause, in every forked child. Each pause is logged (one
    byte in a file), so a test can show that the pause really ran. Yields the log's path."""
    check, log = services.releases.check_budget, tmp_path / "pauses"

    def check_then_pause(budget, epsilon, delta):
        check(budget, epsilon, delta)
        time.sleep(PAUSE_AFTER_CHECK)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, b".")
        os.close(fd)

    monkeypatch.setattr(services.releases, "check_budget", check_then_pause)
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)  # no broker traffic
    return log


def pauses(log) -> int:
    return log.stat().st_size if log.exists() else 0


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_never_overspend(race_settings):
    vendor = connections["default"].vendor
    result = run_race(services.release_create)
    print(
        f"\nT11 [{vendor}] {REQUESTS} requests of ε={EPSILON} against {TOTAL} from "
        f"{PROCESSES} processes: admitted={result['admitted']} refused={result['refused']} "
        f"errors={len(result['errors'])} spent={result['spent']} "
        f"ledger_sum={result['ledger_sum']} ({result['seconds']:.1f} s)"
    )
    assert result["errors"] == []
    assert result["admitted"] == 10 and result["refused"] == 30
    assert result["spent"] == TOTAL == result["ledger_sum"]
    assert result["releases"] == 10
    assert pauses(race_settings) == 10  # every admitted request paused between check and debit


@pytest.mark.django_db(transaction=True)
def test_broken_twin_without_the_lock_overspends(race_settings):
    vendor = connections["default"].vendor
    result = run_race(naive_release_create)
    print(
        f"\nT11 twin [{vendor}] check without lock: admitted={result['admitted']} "
        f"spent={result['spent']} (total {TOTAL}) errors={len(result['errors'])}"
    )
    assert result["admitted"] > 10 and result["spent"] > TOTAL


@pytest.mark.django_db(transaction=True)
def test_two_uploads_of_the_same_content_never_overspend_their_shared_budget(race_settings):
    vendor = connections["default"].vendor
    result = run_race(services.release_create, uploads=2)
    print(
        f"\nT11b [{vendor}] {REQUESTS} requests of ε={EPSILON} split between 2 uploads of one "
        f"content (total {TOTAL}): admitted={result['admitted']} refused={result['refused']} "
        f"errors={len(result['errors'])} spent={result['spent']} "
        f"ledger_sum={result['ledger_sum']} ({result['seconds']:.1f} s)"
    )
    assert result["budgets"] == 1
    assert result["errors"] == []
    assert result["admitted"] == 10 and result["refused"] == 30
    assert result["spent"] == TOTAL == result["ledger_sum"]
    assert pauses(race_settings) == 10


@pytest.mark.django_db(transaction=True)
def test_broken_twin_with_a_budget_per_upload_overspends(race_settings):
    result = run_race(per_upload_release_create, uploads=2)
    print(
        f"\nT11b twin: a budget per upload: admitted={result['admitted']} "
        f"spent={result['spent']} (total {TOTAL}) errors={len(result['errors'])}"
    )
    assert result["errors"] == []
    assert result["admitted"] == 20 and result["spent"] == 2 * TOTAL
