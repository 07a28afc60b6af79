"""T8: a release whose worker dies before or after its noisy output is persisted, then retried,
shows at most one noisy output ever, and its budget is debited exactly once.

The real perturbed-histogram mechanism runs in this process; a worker death is simulated by an
exception that no handler catches (like SIGKILL, nothing gets to clean up or mark the release).
"""

import hashlib
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from dpportal import services
from dpportal.models import AuditEvent, BudgetLedgerEntry, Release
from tests.helpers import make_dataset, make_user

pytestmark = pytest.mark.database


class WorkerDied(BaseException):
    """Stands in for SIGKILL: not an Exception, so release_run's handlers never see it."""


def visible_output(release_pk):
    """What users can see: the package the database points at (None before it is done)."""
    release = Release.objects.get(pk=release_pk)
    if not release.output_dir:
        return None
    folder = Path(settings.DATA_DIR) / release.output_dir
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.iterdir()))).hexdigest()


def package_dirs(release_pk):
    return sorted((Path(settings.DATA_DIR) / "releases").glob(f"{release_pk}-*"))


@pytest.fixture
def release(settings, monkeypatch):
    settings.DPPORTAL_HEARTBEAT_SECONDS = 0
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    owner = make_user()
    dataset = make_dataset(owner)
    return services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["age", "sex"],
        params={},
        epsilon="0.5",
    )


def die_once_inside(monkeypatch, target, name):
    """Make `target.name` kill the 'worker' the first time it is called."""
    original, calls = getattr(target, name), []

    def dying(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise WorkerDied(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, dying)


def die_when_done_is_audited(monkeypatch):
    """Kill the 'worker' after the package is renamed into place, before the commit."""
    original, calls = services.audit.audit_record, []

    def dying(**kwargs):
        if kwargs["action"] == AuditEvent.Action.RELEASE_DONE and not calls:
            calls.append(1)
            raise WorkerDied("after the package was written, before the commit")
        return original(**kwargs)

    monkeypatch.setattr(services.audit, "audit_record", dying)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "death",
    [
        "after noise, before persisting",
        "after persisting files, before the status commit",
        "after the commit",
    ],
)
def test_a_retried_release_shows_at_most_one_output_and_one_debit(release, monkeypatch, death):
    if death == "after noise, before persisting":
        die_once_inside(monkeypatch, services.execution, "_release_store")
    elif death == "after persisting files, before the status commit":
        die_when_done_is_audited(monkeypatch)
    seen = set()
    runs = 0
    for _delivery in range(3):  # the first delivery and two redeliveries
        runs += 1
        try:
            services.release_run(release_id=release.pk)
        except WorkerDied:
            pass
        seen.add(visible_output(release.pk))
        services.release_reap(now=timezone.now() + timedelta(hours=1))  # sweeps orphans too
        seen.add(visible_output(release.pk))
    final = Release.objects.get(pk=release.pk)
    outputs = {s for s in seen if s is not None}
    debits = BudgetLedgerEntry.objects.filter(release=final, kind="debit").count()
    print(
        f"\nT8 [{death}]: {runs} deliveries, attempts={final.attempts}, status={final.status}, "
        f"distinct visible outputs={len(outputs)}, debits={debits}, "
        f"package folders on disk={len(package_dirs(release.pk))}"
    )
    assert final.status == Release.Status.DONE
    assert len(outputs) == 1 and debits == 1
    assert package_dirs(release.pk) == [Path(settings.DATA_DIR) / final.output_dir]
    assert not BudgetLedgerEntry.objects.filter(release=final, kind="refund").exists()


def naive_store(release, token, output, work_dir):
    """The broken twin: publishes whatever it computed, without checking the lease."""
    final_dir = Path(settings.DATA_DIR) / "releases" / f"{release.pk}-{token[:12]}"
    final_dir.mkdir(parents=True)
    for name, content in output.files.items():
        (final_dir / name).write_bytes(content)
    Release.objects.filter(pk=release.pk).update(
        output_dir=str(final_dir.relative_to(settings.DATA_DIR)), status=Release.Status.DONE
    )


@pytest.mark.django_db
@pytest.mark.parametrize("store", ["lease-checked", "naive twin"])
def test_a_stalled_execution_that_resumes_after_a_retry_cannot_publish(
    release, store, monkeypatch, tmp_path
):
    from dpportal.releases import engine as release_engine

    stalled, token = services.execution._release_claim(
        release.pk
    )  # execution A computes, then stalls
    services.execution._mark_data_read(stalled, token)
    output = release_engine.compute(stalled, progress=lambda *a: None)
    services.release_reap(now=timezone.now() + timedelta(hours=1))  # its lease lapses: retried
    services.release_run(release_id=release.pk)  # execution B publishes
    seen = {visible_output(release.pk)}
    if store == "naive twin":
        monkeypatch.setattr(services.execution, "_release_store", naive_store)
    try:
        services.execution._release_store(
            stalled, token, output, tmp_path
        )  # A wakes up and publishes
    except services.LeaseLost:
        pass
    seen.add(visible_output(release.pk))
    print(f"\nT8 [stalled execution resumes, {store} store]: distinct visible outputs={len(seen)}")
    assert len(seen) == (1 if store == "lease-checked" else 2)
