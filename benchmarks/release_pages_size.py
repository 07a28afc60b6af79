"""How the release pages scale with the size of the release (rows of synthetic data).

    .venv/bin/python benchmarks/release_pages_size.py [--rows 48842 250000 1000000] [--repeat 3]

In one process, on a throwaway SQLite database and data folder (removed afterwards), with the
demo Adult table: for each size it publishes a noisy-histogram release of four columns with that
many synthetic rows (computed here through services.release_run, no worker or broker), then
times, through Django's test client as the owner:
  results page (first view with no cached chart data, then a warm view), the preview's last
  page, the whole-package zip (first build, then cached), synthetic.csv on its own, and the
  worker's after-publish step (custodian-only comparison, zip and chart data).
Prints the median of --repeat runs per measure and its ratio to the first (reference) size.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COLUMNS = ["age", "sex", "income", "race"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        type=int,
        nargs="+",
        default=[48_842, 250_000, 1_000_000],
        help="synthetic rows per release; the first size is the reference",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per measure")
    return parser.parse_args(argv)


def set_up_django(folder: Path):
    os.environ["DPPORTAL_DATA_DIR"] = str(folder / "data")
    os.environ["DATABASE_URL"] = f"sqlite:///{folder / 'bench.sqlite3'}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def median_seconds(action, repeat: int, prepare=None) -> float:
    times = []
    for _ in range(repeat):
        if prepare:
            prepare()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def publish(owner, dataset, rows: int):
    """A finished release with `rows` synthetic rows (no budget bookkeeping: not measured)."""
    from dpportal import services
    from dpportal.models import Release

    release = Release.objects.create(
        dataset=dataset,
        requested_by=owner,
        mechanism="perturbed_histogram",
        columns=COLUMNS,
        params={"rows": rows},
        epsilon="0.5",
        neighbouring=dataset.neighbouring,
    )
    services.release_run(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == Release.Status.DONE, release.error_message
    return release


def measure(client, release, repeat: int) -> dict:
    from django.urls import reverse

    from dpportal.releases import packaging
    from dpportal.services import publishing

    page = reverse("release_detail", args=[release.pk])
    cache = packaging.cache_dir(release)

    def drop_cache():
        shutil.rmtree(cache)

    def get(url, **params):
        response = client.get(url, params)
        assert response.status_code == 200, (url, response.status_code)

    last_page = 10**9  # the view clamps it to the last page
    return {
        "results page, cold": median_seconds(lambda: get(page), repeat, drop_cache),
        "results page, warm": median_seconds(lambda: get(page), repeat),
        "preview, last page": median_seconds(lambda: get(page, page=last_page), repeat),
        "zip, first build": median_seconds(
            lambda: get(reverse("release_download_zip", args=[release.pk])), repeat, drop_cache
        ),
        "zip, cached": median_seconds(
            lambda: get(reverse("release_download_zip", args=[release.pk])), repeat
        ),
        "synthetic.csv": median_seconds(
            lambda: get(reverse("release_download_file", args=[release.pk, "synthetic.csv"])),
            repeat,
        ),
        "worker after-publish step": median_seconds(
            lambda: publishing.release_store_utility_report(release.pk), repeat, drop_cache
        ),
    }


def main(argv=None):
    args = parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="dpportal-bench-"))
    try:
        set_up_django(folder)
        from django.contrib.auth import get_user_model
        from django.test import Client

        from dpportal import services
        from tests.dpportal.test_foundation import DEMO_SCHEMA

        owner = get_user_model().objects.create_user("bench", password="bench-password-1")
        dataset = services.dataset_create_from_path(
            owner=owner,
            name="Adult",
            source_path=REPO_ROOT / "demo" / "adult.csv.gz",
            epsilon_total=100,
        )
        dataset = services.dataset_confirm_schema(dataset=dataset, user=owner, schema=DEMO_SCHEMA)
        client = Client(HTTP_HOST="localhost")  # an allowed host of the default settings
        client.force_login(owner)
        results = {
            rows: measure(client, publish(owner, dataset, rows), args.repeat) for rows in args.rows
        }
        print_table(results, args.rows, args.repeat)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def print_table(results: dict, sizes: list[int], repeat: int):
    reference = sizes[0]
    print(
        f"Release pages by synthetic rows: median of {repeat} runs, seconds "
        f"(× = ratio to {reference:,} rows)"
    )
    header = f"{'measure':<28}" + "".join(f"{f'{rows:,} rows':>24}" for rows in sizes)
    print(header)
    print("-" * len(header))
    for name in results[reference]:
        cells = []
        for rows in sizes:
            seconds, base = results[rows][name], results[reference][name]
            cells.append(f"{seconds:>10.3f} s ({seconds / base:>6.1f}×)")
        print(f"{name:<28}" + "".join(f"{cell:>24}" for cell in cells))


if __name__ == "__main__":
    main()
