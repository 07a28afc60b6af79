"""API endpoints of releases (create, list, progress, cancel, files) and the audit log.

Creating a release goes through the new-release page's form (`ReleaseForm`: the same checks
and dry run) and `services.release_create` (the same budget lock and ledger debit). The
`Idempotency-Key` header plays the form's one-time token: a repeated request with the same
key returns the first release and spends nothing, even when two arrive at once.
"""

import base64
import hashlib

from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
from django.http import JsonResponse

from dpportal import services
from dpportal.access.rules import dataset_for_owner, dataset_for_reader, is_owner
from dpportal.api.auth import ApiError, api_endpoint, form_data, invalid, read_json
from dpportal.api.present import release_json, when
from dpportal.audit.events import filtered_events, shown_details
from dpportal.models import Release
from dpportal.releases.downloads import file_download, release_with_files, zip_download
from dpportal.releases.forms import ReleaseForm
from dpportal.releases.presentation import release_for_owner
from dpportal.signals import client_address

MAX_KEY_LENGTH = 200
NEEDS_KEY = (
    "Send an Idempotency-Key header: a new unique text (such as a UUID) for each release you "
    "mean to make. Sending the same request again with the same key returns the first release "
    "and spends nothing, so a retry after a lost connection is safe."
)
AUDIT_PAGE_SIZE = 100


def submission_nonce(user, key: str) -> str:
    """The release's one-time token for an API key: unique per user and key, 43 characters
    like the form's nonces, and never equal to one of them (those are random)."""
    digest = hashlib.sha256(f"api:{user.pk}:{key}".encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def valid_form_and_nonce(request, make_form):
    """The form `make_form(data)` bound to the request's JSON body and valid, and the one-time
    token of its Idempotency-Key; an ApiError saying what is missing or wrong otherwise
    (unknown field names are refused, never ignored)."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ApiError(400, NEEDS_KEY)
    data = read_json(request)
    form = make_form(form_data(data, data.keys()))
    form_data(data, form.fields)  # refuse names the form does not have
    if not form.is_valid():
        raise invalid(form)
    return form, submission_nonce(request.user, key)


@api_endpoint("GET", "POST")
def dataset_releases(request, pk):
    """GET: the dataset's releases (owner and auditors). POST: request a release (owner)."""
    if request.method == "GET":
        dataset = dataset_for_reader(request.user, pk)
        pks = Release.objects.filter(dataset=dataset).values_list("pk", flat=True)
        return JsonResponse({"releases": [release_json(request.user, p) for p in pks]})
    dataset = dataset_for_owner(request.user, pk)
    if dataset.is_deleted or not dataset.schema_confirmed:
        raise ApiError(409, "Releases need a dataset that is not deleted, with a confirmed schema.")
    form, nonce = valid_form_and_nonce(
        request, lambda data: ReleaseForm(data, dataset=dataset, spends=True)
    )
    try:
        release = services.release_create(
            dataset=dataset,
            user=request.user,
            **form.release_fields(),
            remote_addr=client_address(request),
            submission_token=nonce,
        )
    except services.DuplicateSubmission as exc:
        return JsonResponse(release_json(request.user, exc.release.pk) | {"replayed": True})
    body = release_json(request.user, release.pk) | {"replayed": False}
    response = JsonResponse(body, status=201)
    response["Location"] = body["url"]
    return response


@api_endpoint("GET")
def release_detail(request, pk):
    """The release and its progress: poll this until progress.terminal is true."""
    return JsonResponse(release_json(request.user, pk))


@api_endpoint("POST")
def release_cancel(request, pk):
    release = release_for_owner(request.user, pk)
    services.release_cancel(release=release, user=request.user, remote_addr=client_address(request))
    return JsonResponse(release_json(request.user, pk))


@api_endpoint("GET")
def release_file(request, pk, filename):
    """One file of the public package (recorded in the audit log as a download)."""
    response = file_download(request, release_with_files(request.user, pk), filename)
    if response is None:
        raise ApiError(404, f"No file {filename!r} in this release; see the release's files.")
    return response


@api_endpoint("GET")
def release_package(request, pk):
    """The whole public package as one zip (recorded in the audit log as a download)."""
    return zip_download(request, release_with_files(request.user, pk))


@api_endpoint("GET")
def audit_log(request):
    """The audit events the user may see (newest first, 100 a page), filtered like the page."""
    form, events = filtered_events(request)
    parameters = set(request.GET) - {"page"}
    unknown = sorted(parameters - set(form.fields))
    if unknown:
        raise ApiError(400, f"Unknown parameter(s): {', '.join(unknown)}.")
    if form.is_bound and not form.is_valid():
        raise invalid(form)
    try:
        page = Paginator(events, AUDIT_PAGE_SIZE).page(request.GET.get("page") or 1)
    except (EmptyPage, PageNotAnInteger):
        raise ApiError(400, "page: give a page number from 1 to the number of pages.") from None
    visible: dict = {}
    return JsonResponse(
        {
            "page": page.number,
            "pages": page.paginator.num_pages,
            "events": [
                {
                    "id": e.pk,
                    "created_at": when(e.created_at, exact=is_owner(request.user, e.dataset)),
                    "actor": e.actor_name or "system",
                    "action": e.action,
                    "dataset": e.dataset_id,
                    "release": e.release_id,
                    "from": e.remote_addr,
                    "details": shown_details(e, request.user, visible),
                    "previous_hash": e.previous_hash,
                    "hash": e.hash,
                }
                for e in page.object_list
            ],
        }
    )
