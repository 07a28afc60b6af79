"""Issue 8: a queue per job size. MWEM and large supports go to the long queue; with a worker on
each queue, small releases finish while a long one runs. The twin (one shared queue and one
worker) makes the small ones wait behind the long one."""

from contextlib import ExitStack

import pytest
from django.db import connection

from dpportal import services
from dpportal.models import Release
from tests.conftest import wait_until
from tests.dpportal.worker_app import start_worker
from tests.helpers import make_dataset, make_user

pytestmark = [pytest.mark.database, pytest.mark.usefixtures("sleep_mechanism")]


@pytest.mark.django_db
def test_it_routes_releases_by_expected_size(settings, monkeypatch):
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    owner = make_user()
    dataset = make_dataset(owner, epsilon_total=5)

    def queue_of(mechanism, columns, params):
        return services.release_queue(
            services.release_create(
                dataset=dataset,
                user=owner,
                mechanism=mechanism,
                columns=columns,
                params=params,
                epsilon="0.1",
            )
        )

    small, long = settings.CELERY_TASK_DEFAULT_QUEUE, settings.DPPORTAL_CELERY_LONG_QUEUE
    assert queue_of("perturbed_histogram", ["age", "sex"], {}) == small
    assert queue_of("range_count", ["age"], {"grid": [64]}) == small
    assert queue_of("mwem", ["age", "sex"], {}) == long
    assert queue_of("range_count", ["age", "hours-per-week"], {"grid": [1000, 1000]}) == long
    settings.DPPORTAL_LONG_JOB_CELLS = 10  # age (8 bins) × sex (2) = 16 cells
    assert queue_of("perturbed_histogram", ["age", "sex"], {}) == long


def small_jobs_finish_first(tmp_path, settings, separate_queues):
    """Submit a 12 s long release, then 3 small ones; did all small ones end before the long?"""
    settings.DPPORTAL_LONG_JOB_CELLS = 100
    owner = make_user(f"owner-{separate_queues}")
    dataset = make_dataset(owner, epsilon_total=5)
    log = tmp_path / f"executions-{separate_queues}.log"

    def submit(tag, seconds, grid):
        return services.release_create(
            dataset=dataset,
            user=owner,
            mechanism="test_sleep",
            columns=["age"],
            epsilon="0.1",
            params={"seconds": seconds, "tag": tag, "log": str(log), "grid": grid},
        )

    small, long = settings.CELERY_TASK_DEFAULT_QUEUE, settings.DPPORTAL_CELERY_LONG_QUEUE
    long_release = submit("long", 12, [1000])
    smalls = [submit(f"small{i}", 0.2, [10]) for i in range(3)]
    pks = [long_release.pk] + [r.pk for r in smalls]
    with ExitStack() as stack:
        if separate_queues:
            stack.enter_context(start_worker(connection, queues=[long], name="long"))
            stack.enter_context(start_worker(connection, queues=[small], name="small"))
        else:
            stack.enter_context(start_worker(connection, queues=[small, long], name="shared"))
        wait_until(
            lambda: Release.objects.filter(pk__in=pks, status="done").count() == 4, timeout=120
        )
    finished = {r.pk: r.finished_at for r in Release.objects.filter(pk__in=pks)}
    last_small = max(finished[r.pk] for r in smalls)
    return last_small < finished[long_release.pk], (finished[long_release.pk] - last_small)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_small_releases_do_not_wait_behind_a_long_one(tmp_path, settings):
    separate, ahead = small_jobs_finish_first(tmp_path, settings, separate_queues=True)
    shared, behind = small_jobs_finish_first(tmp_path, settings, separate_queues=False)
    print(
        f"\nQueues: 3 small releases submitted after a 12 s one: a worker per queue → small "
        f"ones done first: {separate} ({ahead.total_seconds():.1f} s before the long one); "
        f"one worker on both queues (twin) → {shared} "
        f"({-behind.total_seconds():.1f} s after it)"
    )
    assert separate and not shared
