"""An analyst's release request: submitted (spending nothing), then approved by the owner (and
the dataset's second approver, under the two-person rule), declined by either, or withdrawn by
the analyst.

Privacy accounting: a waiting request spends nothing, but the analyst's waiting requests
together never ask for more than the allotment still holds (checked at submission with the
allotment row locked, `budget.check_allotment`), so every one of them can be approved and
none can overspend. The last approval makes the release through `services.release_create`
with `allotment=`: the same locks, checks and job delivery as an owner's release, spending
from the reservation. A declined or withdrawn request spends nothing. Every step is an audit
event, and the people concerned are told (`notifications`) once it has committed.
"""

from decimal import Decimal
from functools import partial

from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from dpportal.core.formatting import plain_number
from dpportal.models import AuditEvent, ReleaseRequest, RequestDecision
from dpportal.services import audit, notifications
from dpportal.services.budget import check_allotment, locked_analyst, locked_dataset
from dpportal.services.errors import DuplicateRequest, ServiceError
from dpportal.services.releases import release_create
from dpportal.services.sources import release_engine_for

OWN_REQUEST = "Nobody may decide on their own request."


def request_submit(
    *,
    analyst,
    user,
    mechanism,
    columns,
    params,
    epsilon,
    delta=Decimal("0"),
    engine="",
    purpose="",
    submission_token="",
    link_for=None,
    remote_addr=None,
) -> ReleaseRequest:
    """Record an analyst's request for a release of their dataset; spends nothing. Refused if
    it asks for more than the allotment holds beside the analyst's other waiting requests.

    `submission_token` (the form's one-time nonce, or an API Idempotency-Key's digest) makes it
    idempotent: a second submission with it raises DuplicateRequest naming the first.
    `link_for(request_pk)`: the absolute URL of a request's page, for the e-mails."""
    epsilon, delta = Decimal(str(epsilon)), Decimal(str(delta))
    if epsilon <= 0 or delta < 0:
        raise ServiceError(f"A request needs ε > 0 and δ ≥ 0 (got ε = {epsilon}, δ = {delta}).")
    try:
        with transaction.atomic():
            locked = locked_dataset(analyst.dataset_id)
            member = locked_analyst(analyst.pk)
            _check_member(locked, member, user)
            _check_not_submitted(member, submission_token)
            engine = release_engine_for(
                locked, mechanism, engine, columns=columns, params=params, epsilon=epsilon
            )
            check_allotment(member, epsilon, delta, promised=promised(member))
            request = ReleaseRequest.objects.create(
                analyst=member,
                dataset=locked,
                requested_by=user,
                mechanism=mechanism,
                columns=list(columns),
                params=params,
                epsilon=epsilon,
                delta=delta,
                engine=engine,
                purpose=purpose,
                second_approver=locked.second_approver,
                submission_token=submission_token,
            )
            _record(AuditEvent.Action.REQUEST_SUBMITTED, request, user, remote_addr)
            transaction.on_commit(partial(notifications.request_waiting, request.pk, link_for))
    except IntegrityError:  # the unique token, if a concurrent twin got past the lock
        _check_not_submitted(analyst, submission_token)
        raise
    return request


def _check_member(dataset, member, user) -> None:
    if not member.is_active or member.user_id != user.pk:
        raise ServiceError("Your access to this dataset was revoked; nothing was requested.")
    if dataset.is_deleted:
        raise ServiceError("This dataset has been deleted; no new releases can be made from it.")
    if not dataset.schema_confirmed:
        raise ServiceError("The dataset's owner has not confirmed its schema yet; try later.")
    if dataset.second_approver_id == user.pk:
        raise ServiceError(
            f"You are this dataset's second approver. {OWN_REQUEST} Ask its owner to name "
            "another second approver first."
        )


def _check_not_submitted(analyst, submission_token) -> None:
    first = submission_token and (
        ReleaseRequest.objects.filter(analyst=analyst, submission_token=submission_token).first()
    )
    if first:
        raise DuplicateRequest(first)


def promised(analyst) -> tuple[Decimal, Decimal]:
    """What the analyst's waiting requests ask for, together (under the allotment lock, when
    the caller holds it)."""
    sums = analyst.requests.filter(status=ReleaseRequest.Status.WAITING).aggregate(
        epsilon=Sum("epsilon"), delta=Sum("delta")
    )
    return sums["epsilon"] or Decimal("0"), sums["delta"] or Decimal("0")


def request_decide(
    *, release_request, user, approve, note="", link_for=None, remote_addr=None
) -> ReleaseRequest:
    """The owner's or the second approver's decision, with a note. A refusal declines the
    request (nothing spent); the last approval needed makes its release, spending from the
    analyst's allotment (`release_create(allotment=...)`). Refused with words if the user may
    not decide, already did, or the request is no longer waiting."""
    with transaction.atomic():
        locked = locked_dataset(release_request.dataset_id)
        member = locked_analyst(release_request.analyst_id)
        request = ReleaseRequest.objects.select_for_update(no_key=True).get(pk=release_request.pk)
        _check_decider(locked, request, user)
        RequestDecision.objects.create(request=request, user=user, approved=approve, note=note)
        if not approve:
            _finish(request, ReleaseRequest.Status.DECLINED)
        elif _approved_by_all(locked, request):
            request.release = release_create(
                dataset=locked,
                user=request.requested_by,
                mechanism=request.mechanism,
                columns=request.columns,
                params=request.params,
                epsilon=request.epsilon,
                delta=request.delta,
                engine=request.engine,
                allotment=member,
                submission_token=f"analyst-request-{request.pk}",
                remote_addr=remote_addr,
            )
            _finish(request, ReleaseRequest.Status.APPROVED)
        action = (
            AuditEvent.Action.REQUEST_APPROVED if approve else AuditEvent.Action.REQUEST_DECLINED
        )
        _record(action, request, user, remote_addr, note=note, role=_role(locked, user))
        if not request.is_waiting:
            transaction.on_commit(partial(notifications.request_decided, request.pk, link_for))
    return request


def _check_decider(dataset, request, user) -> None:
    if user.pk not in (dataset.owner_id, request.second_approver_id):
        raise ServiceError("Only the dataset's owner and its second approver decide on requests.")
    if user.pk == request.requested_by_id:
        raise ServiceError(OWN_REQUEST)
    if not request.is_waiting:
        raise ServiceError(
            f"This request is already {request.get_status_display().lower()}; nothing changed."
        )
    if request.decisions.filter(user=user).exists():
        raise ServiceError(
            "You have already approved this request; it waits for the other approver."
        )


def _approved_by_all(dataset, request) -> bool:
    needed = {dataset.owner_id, request.second_approver_id} - {None}
    approvers = set(request.decisions.filter(approved=True).values_list("user", flat=True))
    return needed <= approvers


def _role(dataset, user) -> str:
    return "owner" if user.pk == dataset.owner_id else "second approver"


def _finish(request, status) -> None:
    request.status, request.decided_at = status, timezone.now()
    request.save(update_fields=["status", "decided_at", "release"])


def request_withdraw(*, release_request, user, remote_addr=None) -> ReleaseRequest:
    """The analyst takes back their own waiting request (nothing was spent)."""
    with transaction.atomic():
        locked = locked_dataset(release_request.dataset_id)
        locked_analyst(release_request.analyst_id)
        request = ReleaseRequest.objects.select_for_update(no_key=True).get(pk=release_request.pk)
        if request.requested_by_id != user.pk:
            raise ServiceError("Only the analyst who made a request can withdraw it.")
        if not request.is_waiting:
            raise ServiceError(
                f"This request is already {request.get_status_display().lower()}; only a "
                "waiting request can be withdrawn."
            )
        _finish(request, ReleaseRequest.Status.WITHDRAWN)
        _record(AuditEvent.Action.REQUEST_WITHDRAWN, request, user, remote_addr, dataset=locked)
    return request


def withdraw_waiting(locked, analyst, *, user, remote_addr=None) -> list[int]:
    """Withdraw an analyst's waiting requests (dataset and allotment locked by the caller), as
    revoking the analyst does; returns their ids."""
    waiting = ReleaseRequest.objects.select_for_update(no_key=True).filter(
        analyst=analyst, status=ReleaseRequest.Status.WAITING
    )
    pks = []
    for request in waiting.order_by("pk"):
        _finish(request, ReleaseRequest.Status.WITHDRAWN)
        _record(AuditEvent.Action.REQUEST_WITHDRAWN, request, user, remote_addr, dataset=locked)
        pks.append(request.pk)
    return pks


def _record(action, request, user, remote_addr, *, dataset=None, **extra) -> None:
    """The request's step in the audit log: who (the actor), when, what it asks for, and the
    decision with its note."""
    details = {
        "request": request.pk,
        "analyst": request.requested_by.get_username(),
        "mechanism": request.mechanism,
        "columns": list(request.columns),
        "epsilon": plain_number(request.epsilon),
        "delta": plain_number(request.delta),
        "status": request.status,
        **extra,
    }
    if request.second_approver_id:
        details["second_approver"] = request.second_approver.get_username()
    audit.audit_record(
        action=action,
        actor=user,
        dataset=dataset or request.dataset,
        release=request.release,
        remote_addr=remote_addr,
        details=details,
    )
