"""Analysts of a dataset: invited by e-mail with an allotment of its budget, revoked by its
owner; and the dataset's second approver (the two-person rule).

Privacy accounting: the allotment (ε, δ) is taken from the dataset's shared budget when the
invitation is made, as a reservation (a RESERVE ledger entry, `budget.allotment_write`): it
counts as spent from then on, so the owner's own releases, other analysts' allotments and
budget changes can never use it, and nothing an analyst does can spend beyond it (an approved
request spends from the reservation, `services.requests`). Revoking the analyst (or the
invitation, or deleting the dataset) returns what the allotment still holds (a RETURN entry)
and withdraws the analyst's waiting requests. Every step is an audit event.
"""

from decimal import Decimal, InvalidOperation

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from dpportal.access.credentials import Invitation
from dpportal.access.rules import is_custodian
from dpportal.core.formatting import plain_number
from dpportal.models import Analyst, AuditEvent, BudgetLedgerEntry
from dpportal.services import audit
from dpportal.services.budget import (
    allotment_write,
    check_budget,
    locked_analyst,
    locked_budget,
    locked_dataset,
)
from dpportal.services.errors import ServiceError
from dpportal.services.invitations import (
    INVITATION_DAYS,
    invitation_create,
    invitation_mail,
    invitation_withdraw,
)
from dpportal.services.requests import withdraw_waiting

DIGITS = Decimal("0.000001"), Decimal("0.000000000000001")  # the ledger's ε and δ places


def allotment_values(epsilon, delta) -> tuple[Decimal, Decimal]:
    """The allotment asked for, as exact Decimals in the ledger's digits, or a ServiceError."""
    try:
        epsilon, delta = Decimal(str(epsilon)), Decimal(str(delta or 0))
    except InvalidOperation:
        raise ServiceError("The allotment's ε and δ must be numbers, such as 0.5 and 0.") from None
    if not epsilon.is_finite() or not delta.is_finite() or not 0 < epsilon <= 100:
        raise ServiceError(f"The allotment's ε ({epsilon}) must be greater than 0 and at most 100.")
    if not 0 <= delta < 1:
        raise ServiceError(f"The allotment's δ ({delta}) must be at least 0 and below 1.")
    if epsilon != epsilon.quantize(DIGITS[0]) or delta != delta.quantize(DIGITS[1]):
        raise ServiceError(
            "Give the allotment's ε with at most 6 decimal places and δ with at most 15: the "
            "ledger keeps exactly those, and an allotment is never rounded."
        )
    return epsilon, delta


def analyst_invite(*, dataset, user, email, epsilon, delta, link_for, remote_addr=None) -> Analyst:
    """Reserve an allotment (ε, δ) of the owner's dataset for the person at `email` and e-mail
    them an invitation (`link_for(secret)` makes its URL). Refused, with nothing reserved, if
    the allotment does not fit in what is left of the budget."""
    epsilon, delta = allotment_values(epsilon, delta)
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.owner_id != user.pk:
            raise ServiceError("Only the dataset's owner can invite analysts.")
        invitation, secret = invitation_create(
            dataset=locked, user=user, email=email, remote_addr=remote_addr, analyst=True
        )
        check_budget(locked_budget(locked.budget_id), epsilon, delta, what="this allotment")
        analyst = Analyst.objects.create(
            dataset=locked,
            invitation=invitation,
            invited_by=user,
            email=email,
            epsilon_allotted=epsilon,
            delta_allotted=delta,
            epsilon_held=Decimal("0"),
            delta_held=Decimal("0"),
        )
        allotment_write(locked, analyst, BudgetLedgerEntry.Kind.RESERVE, epsilon, delta)
        audit.audit_record(
            action=AuditEvent.Action.ANALYST_INVITED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={
                "analyst": analyst.name,
                "email": email,
                "epsilon": str(epsilon),
                "delta": str(delta),
            },
        )
    invitation_mail(
        invitation,
        subject=f"You are invited to request releases of “{locked.name}” on DP Portal",
        message=_message(locked, user, analyst, link_for(secret)),
        undo=lambda: analyst_revoke(dataset=locked, user=user, analyst_pk=analyst.pk),
    )
    return analyst


def _message(dataset, user, analyst, link) -> str:
    delta = f", δ = {plain_number(analyst.delta_allotted)}" if analyst.delta_allotted else ""
    return (
        f"{user.get_username()} invites you to request differentially private releases of the "
        f"dataset “{dataset.name}” on DP Portal, within a privacy budget of "
        f"ε = {plain_number(analyst.epsilon_allotted)}{delta}.\n"
        "You will see its public description and prepare releases with their expected accuracy; "
        "each request is released once its owner approves it. You never see the raw data.\n\n"
        f"Open this link within {INVITATION_DAYS} days to accept (it works once):\n{link}\n\n"
        "If you did not expect this, ignore this message.\n"
    )


def analyst_revoke(*, dataset, user, analyst_pk, remote_addr=None) -> Analyst:
    """The owner ends an analyst's access (or pending invitation): what the allotment still
    holds goes back to the budget, waiting requests are withdrawn, the link stops working.
    Releases already approved stay (and a later refund of one goes to the budget)."""
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.owner_id != user.pk or not locked.analysts.filter(pk=analyst_pk).exists():
            raise ServiceError("There is no such analyst for this dataset; reload the page.")
        analyst = locked_analyst(analyst_pk)
        if analyst.revoked_at is not None:
            raise ServiceError(f"{analyst.name}'s access was already revoked.")
        _revoke(locked, analyst, user, remote_addr)
    return analyst


def analysts_revoke_all(locked, *, user, remote_addr=None) -> int:
    """Revoke every analyst of a dataset (locked by the caller), as deleting it does."""
    pks = list(locked.analysts.filter(revoked_at__isnull=True).values_list("pk", flat=True))
    for pk in pks:
        _revoke(locked, locked_analyst(pk), user, remote_addr)
    return len(pks)


def _revoke(locked, analyst, user, remote_addr) -> None:
    withdrawn = withdraw_waiting(locked, analyst, user=user, remote_addr=remote_addr)
    returned = analyst.epsilon_held, analyst.delta_held
    if any(returned):
        allotment_write(locked, analyst, BudgetLedgerEntry.Kind.RETURN, *returned)
    analyst.revoked_at = timezone.now()
    analyst.save(update_fields=["revoked_at"])
    invitation = Invitation.objects.select_for_update().get(pk=analyst.invitation_id)
    invitation.dataset = locked
    invitation_withdraw(invitation, user=user, remote_addr=remote_addr)
    audit.audit_record(
        action=AuditEvent.Action.ANALYST_REVOKED,
        actor=user,
        dataset=locked,
        remote_addr=remote_addr,
        details={
            "analyst": analyst.name,
            "returned_epsilon": str(returned[0]),
            "returned_delta": str(returned[1]),
            "requests_withdrawn": withdrawn,
        },
    )


def second_approver_set(*, dataset, user, username, remote_addr=None):
    """Name the dataset's second approver (the two-person rule: they must approve every
    analyst's request too), or none with an empty `username`. Requests already waiting keep the
    rule they were made under."""
    with transaction.atomic():
        locked = locked_dataset(dataset.pk)
        if locked.owner_id != user.pk:
            raise ServiceError("Only the dataset's owner can set its approval rule.")
        if locked.is_deleted:
            raise ServiceError(
                "This dataset has been deleted; its approval rule can no longer change."
            )
        approver = _approver(locked, (username or "").strip())
        before = locked.second_approver.get_username() if locked.second_approver else ""
        after = approver.get_username() if approver else ""
        if before == after:
            return locked
        locked.second_approver = approver
        locked.save(update_fields=["second_approver"])
        audit.audit_record(
            action=AuditEvent.Action.APPROVER_CHANGED,
            actor=user,
            dataset=locked,
            remote_addr=remote_addr,
            details={"before": before, "after": after},
        )
    return locked


def _approver(dataset, username):
    if not username:
        return None
    approver = get_user_model().objects.filter(username=username, is_active=True).first()
    if approver is None:
        raise ServiceError(f"There is no user {username!r}; check the spelling.")
    if approver.pk == dataset.owner_id:
        raise ServiceError("The second approver must be someone other than you, the owner.")
    if Analyst.objects.filter(dataset=dataset, user=approver, revoked_at__isnull=True).exists():
        raise ServiceError(f"{username} is an analyst of this dataset and cannot approve requests.")
    if not (dataset.auditors.filter(pk=approver.pk).exists() or is_custodian(approver)):
        raise ServiceError(
            f"{username} is neither an auditor of this dataset nor a custodian: name one of "
            "this dataset's auditors or another custodian."
        )
    return approver
