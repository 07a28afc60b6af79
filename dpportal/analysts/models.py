"""An analyst's membership of a dataset (with its allotment) and the releases it requests.

The allotment is a reservation on the dataset's shared budget, kept exact by ledger entries of
two kinds (`BudgetLedgerEntry.Kind.RESERVE` and `RETURN`, written only by `services.budget`):
what the allotment still holds is counted as spent on the budget until an approved release
spends it or the owner revokes the analyst (which returns it). Requests spend nothing; an
approved one becomes a `Release` through `services.release_create`.
"""

from decimal import Decimal
from typing import TypedDict

from django.conf import settings
from django.db import models


# The budget's own digits (dpportal.models.EPSILON_FIELD and DELTA_FIELD), so that an allotment
# and the ledger entries that move it hold the same exact decimals. Not imported from there:
# dpportal.models imports this module.
class _Digits(TypedDict):
    max_digits: int
    decimal_places: int


EPSILON_DIGITS: _Digits = {"max_digits": 12, "decimal_places": 6}
DELTA_DIGITS: _Digits = {"max_digits": 20, "decimal_places": 15}
NOTE_LENGTH = 2000


class Analyst(models.Model):
    """Someone the owner invited to request releases of one dataset, within an allotment.

    Invited (no `user` yet: the e-mailed invitation is pending), active (`user` set) or revoked.
    `epsilon_held`/`delta_held`: what the reservation still holds for future releases; it falls
    when a release is approved, rises when one is refunded, and is returned (to 0) on revoking.
    """

    dataset = models.ForeignKey(
        "dpportal.Dataset", on_delete=models.PROTECT, related_name="analysts"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="analyst_memberships",
    )
    invitation = models.OneToOneField(
        "dpportal.Invitation", on_delete=models.PROTECT, related_name="analyst"
    )
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="analysts_invited"
    )
    email = models.EmailField()
    epsilon_allotted = models.DecimalField(**EPSILON_DIGITS)
    delta_allotted = models.DecimalField(**DELTA_DIGITS, default=Decimal("0"))
    epsilon_held = models.DecimalField(**EPSILON_DIGITS)
    delta_held = models.DecimalField(**DELTA_DIGITS, default=Decimal("0"))
    created_at = models.DateTimeField(auto_now_add=True)
    joined_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset", "user"],
                condition=models.Q(revoked_at__isnull=True, user__isnull=False),
                name="one_active_membership_per_analyst",
            )
        ]

    def __str__(self):
        return f"Analyst {self.name} of dataset {self.dataset_id}"

    @property
    def is_active(self) -> bool:
        return self.user_id is not None and self.revoked_at is None

    @property
    def name(self) -> str:
        """The account's name once joined; before, only that an invitation is pending (the
        address stays with the owner)."""
        if self.user is None:
            return f"invitation {self.invitation_id}"
        return self.user.get_username()

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "active" if self.user_id else "invited"


class ReleaseRequest(models.Model):
    """A release an analyst asks for: the new-release form's fields, spending nothing until
    approved. The second approver is the dataset's setting when the request was made."""

    class Status(models.TextChoices):
        WAITING = "waiting", "Waiting for a decision"
        APPROVED = "approved", "Approved"
        DECLINED = "declined", "Declined"
        WITHDRAWN = "withdrawn", "Withdrawn"

    analyst = models.ForeignKey(Analyst, on_delete=models.PROTECT, related_name="requests")
    dataset = models.ForeignKey(
        "dpportal.Dataset", on_delete=models.PROTECT, related_name="release_requests"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="release_requests"
    )
    mechanism = models.CharField(max_length=40)
    columns = models.JSONField(default=list)
    params = models.JSONField(default=dict, blank=True)
    epsilon = models.DecimalField(**EPSILON_DIGITS)
    delta = models.DecimalField(**DELTA_DIGITS, default=Decimal("0"))
    engine = models.CharField(max_length=20, blank=True)
    purpose = models.TextField(blank=True, max_length=NOTE_LENGTH)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.WAITING)
    second_approver = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="requests_to_approve",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    release = models.OneToOneField(
        "dpportal.Release",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="analyst_request",
    )
    # The request form's one-time token (or an API Idempotency-Key's digest): a second
    # submission with it finds this request instead of making another.
    submission_token = models.CharField(max_length=43, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["analyst", "submission_token"],
                condition=~models.Q(submission_token=""),
                name="one_request_per_submission_token",
            )
        ]

    def __str__(self):
        return f"Request {self.pk} ({self.mechanism}) of dataset {self.dataset_id}"

    @property
    def is_waiting(self) -> bool:
        return self.status == self.Status.WAITING


class RequestDecision(models.Model):
    """One decider's approval or refusal of a request, with their note."""

    request = models.ForeignKey(ReleaseRequest, on_delete=models.PROTECT, related_name="decisions")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="request_decisions"
    )
    approved = models.BooleanField()
    note = models.TextField(blank=True, max_length=NOTE_LENGTH)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["request", "user"], name="one_decision_per_decider")
        ]

    def __str__(self):
        verdict = "approved" if self.approved else "declined"
        return f"{self.user} {verdict} request {self.request_id}"


def held_on_budget(budget_id) -> tuple[Decimal, Decimal]:
    """What active allotments on one shared budget still hold (ε, δ): counted as spent on the
    budget, though no release has spent it yet."""
    sums = Analyst.objects.filter(dataset__budget_id=budget_id, revoked_at__isnull=True).aggregate(
        epsilon=models.Sum("epsilon_held"), delta=models.Sum("delta_held")
    )
    return sums["epsilon"] or Decimal("0"), sums["delta"] or Decimal("0")
