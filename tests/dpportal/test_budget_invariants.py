"""T12: budget invariants under random interleavings of submit, cancel, worker crash (before or
after the data was read), run, failure, redelivery (retry) and reaper sweeps (refunds follow).

Each example runs in a rolled-back transaction with its own data folder. The mechanism is a
stand-in returning a fresh random output (or a data-dependent failure), so that publishing two
different outputs for one release would be visible.
"""

import secrets
import tempfile
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from dpportal import services
from dpportal.models import AuditEvent, BudgetLedgerEntry, Dataset, Release
from dpportal.releases import engine as release_engine
from mechanisms import ReleaseOutput
from tests.helpers import make_dataset, make_user

pytestmark = pytest.mark.database

TOTAL = Decimal("1.0")
FAILING = {"fail": True}
DATA_READ = set()  # releases whose data a (stand-in) mechanism actually read, this example


def fake_compute(release, progress):
    """A fresh random output each call; a 'data-dependent' failure when the params ask for it."""
    DATA_READ.add(release.pk)
    if release.params.get("fail"):
        raise release_engine.ReleaseInputError("the data did not fit the schema")
    return ReleaseOutput(files={"noise.txt": secrets.token_bytes(8)}, manifest={}, trace={})


class BudgetMachine(RuleBasedStateMachine):
    dataset_pk = None  # created once per test run; each example's changes are rolled back

    def __init__(self):
        super().__init__()
        self.atomic = transaction.atomic()
        self.atomic.__enter__()
        self.data_dir = tempfile.TemporaryDirectory(prefix="t12-")
        self.override = override_settings(
            DATA_DIR=Path(self.data_dir.name), DPPORTAL_HEARTBEAT_SECONDS=0
        )
        self.override.enable()
        self.dataset = Dataset.objects.get(pk=self.dataset_pk)  # budget 1.0, nothing spent
        self.owner = self.dataset.owner
        self.releases = []
        DATA_READ.clear()
        self.seen_outputs = {}  # release pk -> set of output contents ever visible
        self.audit_seen = [tuple(e) for e in AuditEvent.objects.values_list("pk", "hash")]

    def teardown(self):
        self.override.disable()
        transaction.set_rollback(True)
        self.atomic.__exit__(None, None, None)
        self.data_dir.cleanup()

    def pick(self, index):
        return self.releases[index % len(self.releases)]

    @rule(epsilon=st.sampled_from(["0.1", "0.2", "0.25", "0.3"]), fails=st.booleans())
    def submit(self, epsilon, fails):
        try:
            release = services.release_create(
                dataset=self.dataset,
                user=self.owner,
                mechanism="stand_in",
                columns=["age"],
                params=FAILING if fails else {},
                epsilon=epsilon,
            )
        except services.ServiceError as exc:
            assert "Not enough privacy budget" in str(exc)
            dataset = Dataset.objects.get(pk=self.dataset.pk)
            assert Decimal(epsilon) > dataset.epsilon_remaining
            return
        self.releases.append(release.pk)

    @precondition(lambda self: self.releases)
    @rule(index=st.integers(0, 50))
    def cancel(self, index):
        release = Release.objects.get(pk=self.pick(index))
        try:
            services.release_cancel(release=release, user=self.owner)
        except services.ServiceError:
            assert Release.objects.get(pk=release.pk).status != Release.Status.QUEUED

    @precondition(lambda self: self.releases)
    @rule(index=st.integers(0, 50), after_read=st.booleans())
    def worker_crashes(self, index, after_read):
        claim = services.execution._release_claim(self.pick(index))
        if claim and after_read:
            services.execution._mark_data_read(*claim)
            DATA_READ.add(claim[0].pk)
        # the execution dies here: no store, no fail; its lease is left to lapse

    @precondition(lambda self: self.releases)
    @rule(index=st.integers(0, 50))
    def worker_runs_or_redelivers(self, index):
        services.release_run(release_id=self.pick(index))

    @precondition(lambda self: self.releases)
    @rule(index=st.integers(0, 50))
    def worker_fails_before_reading(self, index):
        claim = services.execution._release_claim(self.pick(index))
        if claim:
            services.execution._release_fail(
                claim[0], claim[1], "The dataset's file is no longer stored."
            )

    @precondition(lambda self: self.releases)
    @rule(minutes=st.integers(0, 200))
    def reaper_sweeps(self, minutes):
        services.release_reap(now=timezone.now() + timedelta(minutes=minutes))

    @invariant()
    def invariants_hold(self):
        dataset = Dataset.objects.get(pk=self.dataset.pk)
        assert Decimal("0") <= dataset.epsilon_spent <= dataset.epsilon_total
        ledger = list(
            BudgetLedgerEntry.objects.filter(dataset=dataset).values_list(
                "release_id", "kind", "epsilon"
            )
        )
        signed = {"debit": 1, "refund": -1}
        assert dataset.epsilon_spent == sum(signed[kind] * eps for _, kind, eps in ledger)
        assert len(ledger) == len({(pk, kind) for pk, kind, _ in ledger}), "two debits/refunds"
        refunded = {pk for pk, kind, _ in ledger if kind == "refund"}
        releases = {r.pk: r for r in Release.objects.filter(pk__in=self.releases)}
        for pk in refunded:  # refunds only for releases whose data was never read
            assert pk not in DATA_READ and not releases[pk].output_dir
            assert releases[pk].status in (Release.Status.CANCELLED, Release.Status.FAILED)
        for release in releases.values():  # at most one output per release, ever
            if release.output_dir:
                assert release.status == Release.Status.DONE
                content = Path(self.data_dir.name) / release.output_dir / "noise.txt"
                self.seen_outputs.setdefault(release.pk, set()).add(content.read_bytes())
                assert len(self.seen_outputs[release.pk]) == 1
        events = list(AuditEvent.objects.values_list("pk", "hash", "action", "details"))
        assert [e[:2] for e in events[: len(self.audit_seen)]] == self.audit_seen  # append-only
        self.audit_seen = [e[:2] for e in events]
        audit_spent = sum(
            Decimal(d["epsilon"]) * (1 if action == "release_requested" else -1)
            for _, _, action, d in events
            if action in ("release_requested", "release_refunded")
        )
        assert audit_spent == dataset.epsilon_spent


def prepare(monkeypatch):
    monkeypatch.setattr(release_engine, "compute", fake_compute)
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    monkeypatch.setattr(services.reaper, "_broker_lost_its_messages", lambda: False)
    if hasattr(
        services.publishing, "release_store_utility_report"
    ):  # custodian-only extra, not budget
        monkeypatch.setattr(services.publishing, "release_store_utility_report", lambda pk: None)
    BudgetMachine.dataset_pk = make_dataset(make_user(), epsilon_total=TOTAL).pk


@pytest.mark.django_db
def test_budget_invariants_hold_under_random_interleavings(monkeypatch):
    prepare(monkeypatch)
    started = time.perf_counter()
    run_state_machine_as_test(
        BudgetMachine,
        settings=settings(
            max_examples=200,
            stateful_step_count=10,
            deadline=None,
            derandomize=False,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    assert services.audit_verify_chain() == []
    print(
        f"\nT12: 200 examples × up to 10 steps, invariants held "
        f"({time.perf_counter() - started:.1f} s)"
    )


@pytest.mark.django_db
def test_broken_twin_refunding_after_the_data_was_read_is_caught(monkeypatch):
    """The twin forgets to record the read, so a failure after reading gets a refund."""
    prepare(monkeypatch)
    monkeypatch.setattr(services.execution, "_mark_data_read", lambda release, token: None)
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            BudgetMachine,
            settings=settings(
                max_examples=200,
                stateful_step_count=10,
                deadline=None,
                phases=[Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
