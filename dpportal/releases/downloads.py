"""A done release's public package, downloaded by its owner or an auditor: one file or the
whole zip, from the release pages and the API alike. Every download is recorded in the audit
log; the zip is streamed through the portal after its permission check, never by a link to
where it is stored."""

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse

from dpportal import services
from dpportal.core import object_store
from dpportal.core.downloads import attachment, content_type_for, streamed_attachment
from dpportal.core.users import AnyUser
from dpportal.models import AuditEvent, Release
from dpportal.releases import packaging
from dpportal.releases.kinds import describes_schema
from dpportal.releases.presentation import release_as_seen
from dpportal.signals import client_address


def release_with_files(user: AnyUser, pk: int, *, owner_only: bool = False) -> Release:
    """The release if the user may download its files and it has some; otherwise 404 (for
    auditors a release is done once it was done at the last whole minute)."""
    release, is_owner = release_as_seen(user, pk)
    if owner_only and not is_owner:
        raise Http404("No such release.")
    if release.status != Release.Status.DONE:
        raise Http404("This release has no files yet.")
    if describes_schema(release.mechanism):
        raise Http404("A schema estimate has no files; its result is on its page.")
    return release


def package_file_attachment(release: Release, filename: str, content: bytes) -> HttpResponse:
    """One file of the release's package, named after the release."""
    return attachment(content, f"release-{release.pk}-{filename}", content_type_for(filename))


def package_zip_attachment(release: Release) -> StreamingHttpResponse:
    """The whole package zip, streamed in pieces from where it is stored (the bucket too)."""
    path = packaging.package_zip_path(release)
    return streamed_attachment(
        object_store.chunks(path),
        object_store.size(path),
        f"release-{release.pk}.zip",
        "application/zip",
    )


def record_download(request: HttpRequest, release: Release, what: str) -> None:
    """Add the download of `what` (a file name, or "package.zip") to the audit log."""
    services.audit_record(
        action=AuditEvent.Action.DOWNLOAD,
        actor=request.user,
        dataset=release.dataset,
        release=release,
        details={"file": what},
        remote_addr=client_address(request),
    )


def file_download(request: HttpRequest, release: Release, filename: str) -> HttpResponse | None:
    """One file of the release's public package as an attachment, recorded in the audit log as
    a download; None if the package has no such file."""
    content = packaging.package_file(release, filename)
    if content is None:
        return None
    record_download(request, release, filename)
    return package_file_attachment(release, filename, content)


def zip_download(request: HttpRequest, release: Release) -> StreamingHttpResponse:
    """The release's public package as one zip, recorded in the audit log as a download."""
    response = package_zip_attachment(release)
    record_download(request, release, "package.zip")
    return response
