"""A release's public page: its report, readable by anyone once the owner has switched it on,
with the package's files; and the owner's switch. A withdrawn page answers 410 with a notice;
so does the page of a deleted dataset's release (deletion withdraws them; `_withdrawal_date`
also covers pages whose dataset was deleted before deletion did).

The page is the package's own report (mechanisms.package.report_html) with its stylesheet
linked instead of inlined, so it is served under the portal's strict Content-Security-Policy;
the budget it lists is the dataset's as it stands now.
"""

import hashlib
from html import escape

from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from dpportal import services
from dpportal.core import files
from dpportal.core.downloads import attachment, content_type_for
from dpportal.core.views import owner_switch
from dpportal.models import Release
from dpportal.releases import packaging
from dpportal.releases.presentation import release_for_owner
from dpportal.signals import client_address
from mechanisms import package

PUBLIC_PAGE_LAYOUT = 3  # bump when the public page changes: re-renders kept pages


def _published(pk) -> Release:
    """The release if its public page was ever switched on (404 otherwise, so unpublished
    releases cannot be told from missing ones)."""
    release = Release.objects.select_related("dataset").filter(pk=pk).first()
    if release is None or release.public_since is None or release.status != Release.Status.DONE:
        raise Http404("No such public release.")
    return release


def _withdrawal_date(release):
    """When the page stopped being public, or None while it is public."""
    if release.is_public and release.dataset.is_deleted:
        return release.dataset.deleted_at
    return release.public_withdrawn_at


def _withdrawn(release) -> HttpResponse:
    when = f"{_withdrawal_date(release):%d %B %Y}"
    html = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<link rel="icon" href="data:,">'
        f"<title>Release {release.pk} withdrawn</title>"
        f'<link rel="stylesheet" href="{escape(reverse("public_report_css"))}"></head>'
        f'<body><main class="report"><h1>Release {release.pk} was withdrawn</h1>'
        f'<p class="notice">Its publisher withdrew this release on {escape(when)}; its '
        "files are no longer published here.</p></main></body></html>\n"
    )
    return HttpResponse(html, status=410)


@login_not_required
@require_GET
def public_release(request, pk):
    release = _published(pk)
    if _withdrawal_date(release):
        return _withdrawn(release)
    return _revalidated(HttpResponse(_report_page(release)))


def _revalidated(response):
    """Caches must ask again before reusing a public page or file: a withdrawal takes effect."""
    response["Cache-Control"] = "no-cache"
    return response


def _report_page(release) -> str:
    """The report page, rendered once per state of the dataset's budget and publishing
    details (everything in its context) and kept."""
    context = packaging.context(release)
    key = hashlib.sha256(repr((PUBLIC_PAGE_LAYOUT, context)).encode()).hexdigest()[:16]
    path = packaging.cache_dir(release) / f"public-page-{key}.html"
    if not path.exists():
        names = packaging.package_names(release)
        manifest = packaging.public_manifest(release)
        html = package.report_html(
            manifest,
            package.release_tables(packaging.stored_files(release), manifest),
            names,
            context,
            stylesheet_url=reverse("public_report_css"),
            downloads={n: reverse("public_release_file", args=[release.pk, n]) for n in names},
        )
        files.write_private(path, html.encode())
    return path.read_text()


@login_not_required
@require_GET
def public_report_css(request):
    response = HttpResponse(package.stylesheet(), content_type="text/css; charset=utf-8")
    response["Cache-Control"] = "public, max-age=3600"
    return response


@login_not_required
@require_GET
def public_release_file(request, pk, filename):
    release = _published(pk)
    if _withdrawal_date(release):
        return _withdrawn(release)
    content = packaging.package_file(release, filename)
    if content is None:
        raise Http404("No such file in this release.")
    # Only the PDF opens in the browser: report.html inlines its CSS, which the portal's
    # Content-Security-Policy would block here (the public page is that report).
    name = f"release-{release.pk}-{filename}"
    response = attachment(content, name, content_type_for(filename), inline=name.endswith(".pdf"))
    return _revalidated(response)


@require_POST
def release_public_switch(request, pk):
    release = release_for_owner(request.user, pk)
    owner_switch(
        request,
        lambda public: services.release_set_public(
            release=release, user=request.user, public=public, remote_addr=client_address(request)
        ),
        on="The public page is on: anyone with its address can read it.",
        off="The public page is withdrawn: its address now says so.",
    )
    return redirect("release_detail", pk=release.pk)
