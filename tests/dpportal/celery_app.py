"""The portal's Celery app plus the test-only "test_sleep" mechanism: what test workers run.

`celery -A tests.dpportal.celery_app worker` (`tests.dpportal.worker_app.start_worker`)
imports this module in the worker process only; tests import `tests.dpportal.worker_app`,
which leaves the test process's catalogue alone.
"""

import mechanisms
from dpportal.celery import app  # noqa: F401  (celery -A finds it here)
from tests.dpportal.worker_app import TEST_SLEEP

mechanisms.CATALOGUE[TEST_SLEEP.name] = TEST_SLEEP
