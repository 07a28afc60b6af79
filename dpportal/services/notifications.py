"""E-mails about analysts' requests, through Django's mail backend (DPPORTAL_EMAIL_*): the
deciders of a waiting request (the owner and the second approver) are told it waits, the
analyst is told the decision. Sent after the step has committed; an e-mail that cannot be sent
is logged and changes nothing (the home page lists waiting requests and decisions anyway).
Only the request's own facts go in: no figure computed from the data."""

import logging

from django.core.mail import send_mail

from dpportal.core.formatting import plain_number
from dpportal.models import ReleaseRequest
from dpportal.releases.catalogue import mechanism_title

logger = logging.getLogger(__name__)


def request_waiting(request_pk, link_for=None) -> int:
    """Tell the owner and the second approver (if any) that a request waits for them; returns
    how many e-mails went out."""
    request = _request(request_pk)
    deciders = [request.dataset.owner, request.second_approver]
    subject = f"A release request waits for your decision: “{request.dataset.name}”"
    body = (
        f"{request.requested_by.get_username()} asks for a release of “{request.dataset.name}”: "
        f"{_what(request)}.\n"
        + (f"Purpose, in their words: {request.purpose}\n" if request.purpose else "")
        + "Nothing is spent until it is approved. Its page shows the expected accuracy, the "
        "budget it would spend and the risk in words:\n"
        f"{_where(request, link_for)}\n"
    )
    return sum(_send(user, subject, body) for user in deciders if user is not None)


def request_decided(request_pk, link_for=None) -> int:
    """Tell the analyst that their request was approved (its release is on its way) or
    declined, with the deciders' notes."""
    request = _request(request_pk)
    verdict = "approved" if request.status == ReleaseRequest.Status.APPROVED else "declined"
    notes = "".join(
        f"{d.user.get_username()} ({'approved' if d.approved else 'declined'}): {d.note}\n"
        for d in request.decisions.select_related("user")
        if d.note
    )
    after = (
        "Its release is being made; its public package will be on the request's page."
        if verdict == "approved"
        else "Nothing was spent from your allotment."
    )
    body = (
        f"Your request for a release of “{request.dataset.name}” ({_what(request)}) was "
        f"{verdict}. {after}\n" + (f"\nNotes:\n{notes}" if notes else "") + "\n"
        f"{_where(request, link_for)}\n"
    )
    subject = f"Your release request was {verdict}: “{request.dataset.name}”"
    return _send(request.requested_by, subject, body)


def _request(pk) -> ReleaseRequest:
    return ReleaseRequest.objects.select_related(
        "dataset__owner", "requested_by", "second_approver"
    ).get(pk=pk)


def _what(request) -> str:
    delta = f", δ = {plain_number(request.delta)}" if request.delta else ""
    columns, epsilon = ", ".join(request.columns), plain_number(request.epsilon)
    return f"{mechanism_title(request.mechanism)} of {columns}, ε = {epsilon}{delta}"


def _where(request, link_for) -> str:
    if link_for is None:
        return f"Sign in to DP Portal: it is request {request.pk}, listed on your home page."
    return link_for(request.pk)


def _send(user, subject, body) -> int:
    if not user.email:
        return 0
    try:
        return send_mail(
            subject=subject, message=body, from_email=None, recipient_list=[user.email]
        )
    except OSError as exc:
        logger.warning("request e-mail to user %s not sent: %s", user.pk, exc.__class__.__name__)
        return 0
