"""Issue 46, item 1: an analyst cannot exceed its allotment under 40 concurrent requests.

40 requests of ε = 0.1 against an allotment of 1.0 (on a budget of 5), from 8 processes, each
with its own database connection; a pause of 10 ms after the allotment check (the test wraps
`requests.check_allotment` before the pool forks) widens the window between the check and the
write. Exactly 10 may wait (together they ask for the whole allotment), 30 are refused with
words, and nothing is spent. Then 40 concurrent approvals of 5 waiting requests (each approved
8 times at once) make exactly 5 releases, each spending from the allotment once (the ledger's
signed sum equals the budget's spent total).
Runs on whichever database the suite uses (./test.sh: PostgreSQL, and SQLite again).
Broken twins: a submission that checks the allotment before taking its lock exceeds it; an
approval that reads the request without its lock makes a request's release more than once.
"""

import multiprocessing
import os
import time
from decimal import Decimal

import pytest
from django.db import connections, transaction
from django.db.models import Sum

from dpportal import services
from dpportal.models import Analyst, BudgetLedgerEntry, Release, ReleaseRequest
from tests.helpers import make_analyst, make_dataset, make_request, make_user

pytestmark = pytest.mark.database

PROCESSES, REQUESTS, EPSILON, ALLOTMENT = 8, 40, Decimal("0.1"), Decimal("1.0")
PAUSE_AFTER_CHECK = 0.01  # seconds


def submit(args):
    """One request in a child process: 'admitted', 'refused' or the unexpected error."""
    analyst_pk, submit_request = args
    analyst = Analyst.objects.select_related("user").get(pk=analyst_pk)
    try:
        submit_request(
            analyst=analyst,
            user=analyst.user,
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


def decide(args):
    """One approval in a child process: 'approved', 'refused' or the unexpected error."""
    request_pk, decide_request = args
    request = ReleaseRequest.objects.get(pk=request_pk)
    try:
        decide_request(release_request=request, user=request.dataset.owner, approve=True)
        return "approved"
    except services.ServiceError:
        return "refused"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"


def naive_request_submit(*, analyst, user, mechanism, columns, params, epsilon):
    """The broken twin: the same check, made on a copy read without the allotment's lock."""
    snapshot = Analyst.objects.get(pk=analyst.pk)
    promised = services.requests.promised(snapshot)
    services.budget.check_allotment(snapshot, Decimal(epsilon), Decimal(0), promised=promised)
    time.sleep(5 * PAUSE_AFTER_CHECK)  # longer than the real one's: overlaps for certain
    ReleaseRequest.objects.create(
        analyst=snapshot,
        dataset_id=snapshot.dataset_id,
        requested_by=user,
        mechanism=mechanism,
        columns=columns,
        params=params,
        epsilon=epsilon,
    )


def unlocked_request_decide(*, release_request, user, approve):
    """The broken twin: reads the request's status without its row lock, then approves."""
    request = ReleaseRequest.objects.get(pk=release_request.pk)
    if not request.is_waiting:
        raise services.ServiceError("already decided")
    time.sleep(PAUSE_AFTER_CHECK)
    with transaction.atomic():
        release = services.release_create(
            dataset=request.dataset,
            user=request.requested_by,
            mechanism=request.mechanism,
            columns=request.columns,
            params=request.params,
            epsilon=request.epsilon,
            allotment=request.analyst,
        )
        ReleaseRequest.objects.filter(pk=request.pk).update(status="approved", release=release)


def _child_init():
    connections.close_all()  # never share the parent's connection: each process opens its own


def race(function, jobs):
    connections.close_all()
    started = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(PROCESSES, initializer=_child_init) as pool:
        outcomes = pool.map(function, jobs, chunksize=1)
    return outcomes, time.perf_counter() - started


def allotment_state(analyst):
    analyst.refresh_from_db()
    dataset = analyst.dataset
    dataset.refresh_from_db()
    entries = BudgetLedgerEntry.objects.filter(dataset=dataset)
    waiting = analyst.requests.filter(status="waiting").aggregate(total=Sum("epsilon"))["total"]
    return {
        "held": analyst.epsilon_held,
        "waiting": waiting or Decimal(0),
        "spent": dataset.epsilon_spent,
        "ledger_sum": sum((e.sign * e.epsilon for e in entries), Decimal(0)),
        "releases": Release.objects.filter(dataset=dataset).count(),
        "debited": entries.filter(kind="debit").aggregate(total=Sum("epsilon"))["total"],
    }


@pytest.fixture
def allotment(monkeypatch, tmp_path):
    """An analyst with an allotment of 1.0 on a budget of 5; the real allotment check is
    followed by a pause in every forked child, each pause logged (one byte in a file), so a
    test can show that the pause really ran. Nothing is sent to a broker."""
    check, log = services.requests.check_allotment, tmp_path / "pauses"

    def check_then_pause(*args, **kwargs):
        check(*args, **kwargs)
        time.sleep(PAUSE_AFTER_CHECK)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, b".")
        os.close(fd)

    monkeypatch.setattr(services.requests, "check_allotment", check_then_pause)
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    dataset = make_dataset(make_user("owner"), epsilon_total=5)
    _user, analyst = make_analyst(dataset, "ann", epsilon=ALLOTMENT)
    analyst.pauses = log
    return analyst


def pauses(log) -> int:
    return log.stat().st_size if log.exists() else 0


@pytest.mark.django_db(transaction=True)
def test_40_concurrent_requests_never_exceed_the_allotment(allotment):
    vendor = connections["default"].vendor
    outcomes, seconds = race(submit, [(allotment.pk, services.request_submit)] * REQUESTS)
    state = allotment_state(allotment)
    errors = [o for o in outcomes if o.startswith("error")]
    print(
        f"\nAnalyst race [{vendor}] {REQUESTS} requests of ε={EPSILON} against an allotment of "
        f"{ALLOTMENT} from {PROCESSES} processes: admitted={outcomes.count('admitted')} "
        f"refused={outcomes.count('refused')} errors={len(errors)} waiting={state['waiting']} "
        f"spent={state['spent']} ({seconds:.1f} s)"
    )
    assert errors == []
    assert outcomes.count("admitted") == 10 and outcomes.count("refused") == 30
    assert state["waiting"] == ALLOTMENT and state["held"] == ALLOTMENT
    assert state["spent"] == ALLOTMENT == state["ledger_sum"]  # the reservation only
    assert state["releases"] == 0
    assert pauses(allotment.pauses) == 10  # every admitted request paused after its check


@pytest.mark.django_db(transaction=True)
def test_broken_twin_checking_without_the_lock_exceeds_the_allotment(allotment):
    outcomes, _ = race(submit, [(allotment.pk, naive_request_submit)] * REQUESTS)
    state = allotment_state(allotment)
    print(
        f"\nAnalyst race twin: check without lock: admitted={outcomes.count('admitted')} "
        f"waiting={state['waiting']} (allotment {ALLOTMENT})"
    )
    assert outcomes.count("admitted") > 10 and state["waiting"] > ALLOTMENT


def five_waiting(analyst) -> list[int]:
    """Five waiting requests of ε = 0.1: half the allotment, so that a request approved twice
    still fits in it and only the request's own lock can stop its second release."""
    return [make_request(analyst.user, analyst, columns=["age"]).pk for _ in range(5)]


@pytest.mark.django_db(transaction=True)
def test_40_concurrent_approvals_make_each_release_once_and_spend_exactly(allotment):
    pks = five_waiting(allotment)
    outcomes, seconds = race(decide, [(pk, services.request_decide) for pk in pks * 8])
    state = allotment_state(allotment)
    errors = [o for o in outcomes if o.startswith("error")]
    print(
        f"\nApproval race [{connections['default'].vendor}] 40 approvals of 5 requests from "
        f"{PROCESSES} processes: approved={outcomes.count('approved')} "
        f"refused={outcomes.count('refused')} errors={len(errors)} releases={state['releases']} "
        f"held={state['held']} spent={state['spent']} ({seconds:.1f} s)"
    )
    assert errors == []
    assert outcomes.count("approved") == 5 and state["releases"] == 5
    assert state["held"] == ALLOTMENT - 5 * EPSILON and state["debited"] == 5 * EPSILON
    assert state["spent"] == ALLOTMENT == state["ledger_sum"]  # reservation and debits exact


@pytest.mark.django_db(transaction=True)
def test_broken_twin_approving_without_the_request_lock_makes_releases_twice(allotment):
    pks = five_waiting(allotment)
    outcomes, _ = race(decide, [(pk, unlocked_request_decide) for pk in pks * 8])
    state = allotment_state(allotment)
    print(
        f"\nApproval race twin: no request lock: approved={outcomes.count('approved')} "
        f"releases={state['releases']} (5 requests)"
    )
    assert state["releases"] > 5
