"""The owner's switch for a dataset's public record, the record itself (zip, record.json,
record.sig) for anyone while it is switched on, and the page showing the portal's public key.

A record that is off, or whose dataset was deleted, answers 404, as a dataset that never
existed does. Every answer is made afresh from the database (dpportal.records.document).
"""

import io
import logging
import zipfile

from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from dpportal.access.rules import dataset_for_owner
from dpportal.core.views import owner_switch
from dpportal.models import Dataset
from dpportal.records.document import record_folder, record_json
from dpportal.records.signing import SigningKeyError, public_key_text
from dpportal.records.switch import record_set_public
from dpportal.signals import client_address
from mechanisms.public_record import RECORD, SIGNATURE

UNAVAILABLE = "The portal cannot sign records just now; its administrator has been told why."
logger = logging.getLogger(__name__)


@require_POST
def dataset_public_record(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    owner_switch(
        request,
        lambda public: record_set_public(
            dataset=dataset, user=request.user, public=public, remote_addr=client_address(request)
        ),
        on="The public record is on: anyone with its address can download and check it.",
        off="The public record is off: its address now answers “not found”.",
    )
    return redirect("dataset_detail", pk=dataset.pk)


def _published(dataset_pk) -> Dataset:
    dataset = Dataset.objects.filter(pk=dataset_pk, public_record=True).first()
    if dataset is None or dataset.is_deleted:
        raise Http404("No such public record.")
    return dataset


def _download(content: bytes, content_type: str, filename: str) -> HttpResponse:
    response = HttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-cache"  # switching it off reaches cached copies too
    return response


def _signed(make):
    """make()'s result, or None (the problem logged) when the key cannot be used."""
    try:
        return make()
    except SigningKeyError as exc:
        logger.error("public record not signed: %s", exc)
        return None


@login_not_required
@require_GET
def public_record_zip(request, dataset_pk):
    dataset = _published(dataset_pk)
    files = _signed(lambda: record_folder(dataset))
    if files is None:
        return HttpResponse(UNAVAILABLE, status=503, content_type="text/plain")
    folder = f"dataset-{dataset.pk}-record"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(f"{folder}/{name}", content)
    return _download(buffer.getvalue(), "application/zip", f"{folder}.zip")


@login_not_required
@require_GET
def public_record_file(request, dataset_pk, name):
    dataset = _published(dataset_pk)
    signed = _signed(lambda: record_json(dataset))
    if signed is None:
        return HttpResponse(UNAVAILABLE, status=503, content_type="text/plain")
    document, signature = signed
    if name == RECORD:
        return _download(document, "application/json", f"dataset-{dataset.pk}-{RECORD}")
    return _download(signature, "text/plain; charset=us-ascii", f"dataset-{dataset.pk}-{SIGNATURE}")


@login_not_required
@require_GET
def public_record_key(request):
    key = _signed(public_key_text)
    if key is None:
        return HttpResponse(UNAVAILABLE, status=503, content_type="text/plain")
    context = {"key_hex": key[0], "key_pem": key[1]}
    return render(request, "dpportal/records/key.html", context)
