"""After a release is published: the custodian-only utility report, then the public zip and
chart data (made now so pages open fast); and removing the reports with the raw data."""

import logging

import mechanisms

from .. import charts, files, packaging, utility
from ..models import Release

logger = logging.getLogger(__name__)


def release_store_utility_report(release_pk):
    """Compare a finished release with the raw data and store it custodian-only, apart from the
    public package; then prepare the package's zip and chart data so pages open fast. A failure
    here only leaves them to be made later (the report stays missing, the public files are made
    on first view): the release stands."""
    release = Release.objects.select_related("dataset").get(pk=release_pk)
    steps = (
        ("utility report", utility.compute_and_store),
        ("package zip", packaging.package_zip_path),
        (
            "charts",
            lambda r: charts.release_charts(r, mechanisms.Schema.from_dict(r.dataset.schema)),
        ),
    )
    for what, step in steps:
        try:
            step(release)
        except Exception as exc:  # the message may quote data: log its type only
            logger.error("Release %s: %s failed (%s)", release.pk, what, type(exc).__name__)


def release_remove_utility_reports(dataset):
    """Delete the custodian-only comparisons with the raw data of every release of a dataset
    (they are derived from the raw data, which is being deleted)."""
    for release in dataset.releases.all():
        files.utility_report_path(release).unlink(missing_ok=True)
