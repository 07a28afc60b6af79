"""Red team issue 13, item 9: deleting a dataset just after a release must not leave the
custodian-only comparison with the raw data behind.

Publishing (services.publishing, run right after a release is stored) and deletion are raced
30 times, deletion landing at a different point each time: before publishing starts, while the
report is being computed from the raw data, while publishing holds the dataset lock to put the
report in place, after publishing ends, and (every fifth time) freely from another thread
after a barrier. The hooks that place the deletion are monkeypatched here, in the test. After
both finish, no custodian-only file of that release may exist on disk (nor a temporary one) and
the report's URL must answer 404. The broken twin stores the report as before (no lock, no
check) and must leave a report behind.
"""

import random
import threading
import time

import pytest
from django.db import connection
from django.urls import reverse

from dpportal import services
from dpportal.core import files
from dpportal.releases import engine as release_engine
from dpportal.releases import utility
from dpportal.services import publishing
from tests.helpers import client_for, make_dataset, make_release, make_user

pytestmark = pytest.mark.database

ITERATIONS, TWIN_ITERATIONS = 30, 10
MODES = ("before", "during compute", "inside the lock", "after", "free race")


def done_release(owner, index):
    """A new dataset with a done release whose post-release step has not run yet."""
    dataset = make_dataset(owner, name=f"Race {index}", epsilon_total=50)  # one shared budget
    release = make_release(owner, dataset)
    real = publishing.release_store_utility_report
    publishing.release_store_utility_report = lambda pk: None
    try:
        services.release_run(release_id=release.pk)
    finally:
        publishing.release_store_utility_report = real
    release.refresh_from_db()
    assert release.status == "done", release.error_message
    return dataset, release


def custodian_files(release) -> list:
    """The release's report and any temporary file of it, on disk."""
    path = files.utility_report_path(release)
    if not path.parent.exists():
        return []
    return [p for p in path.parent.iterdir() if p.name.startswith((path.name, f".{path.name}"))]


def in_thread(function, errors):
    """Run `function` in another thread (its own database connection), appending any exception
    to `errors`; returns its joiner."""

    def run():
        try:
            function()
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return lambda: thread.join(timeout=60)


def race_once(monkeypatch, owner, index, mode):
    dataset, release = done_release(owner, index)

    def delete():
        services.dataset_delete(dataset=dataset, user=owner)

    publish = lambda: publishing.release_store_utility_report(release.pk)  # noqa: E731
    joiners, errors = [], []
    with monkeypatch.context() as patch:
        if mode == "during compute":  # the raw columns are read, the report not yet written
            load = release_engine.load_columns
            patch.setattr(release_engine, "load_columns", lambda *a: (load(*a), delete())[0])
        elif mode == "inside the lock":
            commit = files.PrivateWriter.commit

            def commit_while_deletion_waits(writer):
                joiners.append(in_thread(delete, errors))  # blocks on the dataset lock
                time.sleep(0.05)
                return commit(writer)

            patch.setattr(files.PrivateWriter, "commit", commit_while_deletion_waits)
        if mode == "before":
            delete()
        if mode == "free race":
            barrier = threading.Barrier(2)

            def jittered(step):
                barrier.wait()
                time.sleep(random.uniform(0, 0.05))
                step()

            joiners.append(in_thread(lambda: jittered(delete), errors))
            jittered(publish)
        else:
            publish()
        for join in joiners:
            join()
    assert errors == []
    delete()  # "after"; a no-op if the dataset is already deleted
    dataset.refresh_from_db()
    assert dataset.is_deleted
    response = client_for(owner).get(reverse("release_utility_report", args=[release.pk]))
    return custodian_files(release), response.status_code


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)


@pytest.mark.django_db(transaction=True)
def test_no_custodian_file_survives_deletion_racing_publication(monkeypatch):
    owner = make_user("racer")
    outcomes = [race_once(monkeypatch, owner, i, MODES[i % len(MODES)]) for i in range(ITERATIONS)]
    left = [(MODES[i % len(MODES)], found) for i, (found, _) in enumerate(outcomes) if found]
    print(f"\nDelete/publish race: {ITERATIONS} iterations, files left behind: {left}")
    assert left == []
    assert {status for _, status in outcomes} == {404}


@pytest.mark.django_db(transaction=True)
def test_broken_twin_without_the_lock_leaves_the_report_behind(monkeypatch):
    def store_unordered(release):  # the code before: write, whatever deletion did meanwhile
        files.write_private(files.utility_report_path(release), utility.compute(release))
        return True

    monkeypatch.setattr(publishing, "store_utility_report", store_unordered, raising=False)
    owner = make_user("racer")
    outcomes = [
        race_once(monkeypatch, owner, i, MODES[i % len(MODES)]) for i in range(TWIN_ITERATIONS)
    ]
    left = [MODES[i % len(MODES)] for i, (found, _) in enumerate(outcomes) if found]
    print(f"\nDelete/publish race, broken twin: files left behind in modes {left}")
    assert "during compute" in left
