"""100 queued small releases on 1 and then 2 Celery worker processes: all complete, none runs
twice, and the throughput ratio (goal: >= 1.6 on 2 cores).

    .venv/bin/python benchmarks/worker_throughput.py [--jobs 100] [--database-url URL]

Uses a throwaway data folder, a fresh SQLite database (or --database-url, migrated in place),
the local Redis with a unique queue, and the demo dataset. Each release also stores its
custodian-only utility report, which reads the raw data again. Run it on an otherwise idle
machine: other processes on the 2 cores distort the ratio.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def configure(database_url):
    data_dir = tempfile.mkdtemp(prefix="bench-workers-")
    os.environ.update(
        DJANGO_DEBUG="1",
        DPPORTAL_DATA_DIR=data_dir,
        DATABASE_URL=database_url or f"sqlite:///{data_dir}/bench.sqlite3",
        DPPORTAL_CELERY_QUEUE=f"bench-{uuid.uuid4().hex[:10]}",
        CELERY_BROKER_URL=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/14"),
        DJANGO_SETTINGS_MODULE="dpportal.settings",
        DJANGO_LOG_LEVEL="WARNING",
    )
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("load_demo", password="bench-only-password")


def submit(count):
    from django.contrib.auth import get_user_model

    from dpportal import services

    owner = get_user_model().objects.get(username="demo")
    dataset = owner.datasets.get()
    return [
        services.release_create(
            dataset=dataset,
            user=owner,
            mechanism="perturbed_histogram",
            columns=["age", "sex"],
            params={},
            epsilon="0.001",
        ).pk
        for _ in range(count)
    ]


def run_workers(processes, pks):
    from django.conf import settings

    from dpportal.models import Release

    log = Path(settings.DATA_DIR) / f"worker-{processes}.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "dpportal",
                "worker",
                "--loglevel=INFO",
                f"--concurrency={processes}",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-Q",
                settings.CELERY_TASK_DEFAULT_QUEUE,
            ],
            cwd=REPO_ROOT,
            env=os.environ,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        while b"ready." not in log.read_bytes():
            time.sleep(0.05)
        started = time.perf_counter()
        while Release.objects.filter(pk__in=pks, status__in=Release.TERMINAL).count() < len(pks):
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        worker.terminate()
        worker.wait()
    releases = Release.objects.filter(pk__in=pks)
    return {
        "seconds": elapsed,
        "done": releases.filter(status=Release.Status.DONE).count(),
        "twice": releases.filter(attempts__gt=1).count(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    configure(args.database_url)
    rows = []
    for processes in (1, 2):
        pks = submit(args.jobs)
        rows.append((processes, run_workers(processes, pks)))
    base = args.jobs / rows[0][1]["seconds"]
    print(
        f"{args.jobs} queued perturbed-histogram releases (age × sex, Adult 48,842 rows); "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end"
    )
    print(f"{'workers':>8} {'done':>6} {'ran twice':>10} {'seconds':>8} {'jobs/s':>7} {'ratio':>6}")
    for processes, r in rows:
        rate = args.jobs / r["seconds"]
        print(
            f"{processes:>8} {r['done']:>6} {r['twice']:>10} {r['seconds']:>8.1f} "
            f"{rate:>7.2f} {rate / base:>6.2f}"
        )


if __name__ == "__main__":
    main()
