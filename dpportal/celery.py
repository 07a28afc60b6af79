"""The Celery application. Settings come from Django's settings (CELERY_* names).

Each worker also beats into dpportal.core.heartbeats (so /healthz shows a worker that stopped) and,
like every long-running process of the portal, survives broker outages: it reconnects without
a limit (CELERY_BROKER_CONNECTION_MAX_RETRIES), and a job that meets a database outage is
retried later (dpportal.tasks).
"""

import os

from celery import Celery, bootsteps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dpportal.settings")

app = Celery("dpportal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Beat every DPPORTAL_HEARTBEAT_SECONDS (at least 1 s) from the worker's timer."""

    requires = ("celery.worker.components:Timer",)

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.timer_entry = None

    def start(self, worker):
        from django.conf import settings

        from dpportal.core import heartbeats

        every = max(1, settings.DPPORTAL_HEARTBEAT_SECONDS)
        args = ("worker", every)
        facts = {"name": worker.hostname, "queues": list(worker.app.amqp.queues.consume_from)}
        heartbeats.beat(*args, **facts)
        self.timer_entry = worker.timer.call_repeatedly(every, heartbeats.beat, args, facts)

    def stop(self, worker):
        if self.timer_entry is not None:
            self.timer_entry.cancel()


app.steps["worker"].add(WorkerHeartbeat)
