"""Filter forms for the audit pages (releases list and audit log). GET only, all fields optional."""

from django import forms
from django.contrib.auth import get_user_model

from dpportal.core.form_fields import choice_field
from dpportal.models import AuditEvent, Release
from dpportal.releases.catalogue import mechanism_title

ANY = [("", "Any")]


def method_title(mechanism: str) -> str:
    """The plain-language name of a mechanism, as on the new-release cards."""
    return mechanism_title(mechanism)


class DateRangeForm(forms.Form):
    date_from = forms.DateField(
        required=False,
        label="From (date)",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="On or after this day.",
    )
    date_to = forms.DateField(
        required=False,
        label="To (date)",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="On or before this day.",
    )

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        start, end = cleaned.get("date_from"), cleaned.get("date_to")
        if start and end and start > end:
            raise forms.ValidationError(
                f"The start date ({start}) is after the end date ({end}); swap them."
            )
        return cleaned


def _user_choices(user_ids):
    users = get_user_model().objects.filter(pk__in=user_ids).order_by("username")
    return ANY + [(str(u.pk), u.username) for u in users]


class ReleaseFilterForm(DateRangeForm):
    """Filters over the releases the user may see; choices come only from those releases."""

    field_order = ["dataset", "mechanism", "status", "user", "date_from", "date_to"]

    SORTS = {
        "id": "pk",
        "dataset": "dataset__name",
        "mechanism": "mechanism",
        "epsilon": "epsilon",
        "status": "shown_status",  # annotated by the view: what this user sees (T10)
        "user": "requested_by__username",
        "created": "created_at",
    }

    dataset = forms.ChoiceField(required=False, label="Dataset")
    mechanism = forms.ChoiceField(required=False, label="Method")
    status = forms.ChoiceField(required=False, label="Status", choices=ANY + Release.Status.choices)
    user = forms.ChoiceField(required=False, label="Requested by")
    sort = forms.ChoiceField(
        required=False,
        widget=forms.HiddenInput,
        choices=[(key, key) for name in SORTS for key in (name, f"-{name}")],
    )

    def __init__(self, data, *, releases, datasets):
        super().__init__(data)
        choice_field(self, "dataset").choices = ANY + [(str(d.pk), d.name) for d in datasets]
        mechanisms = sorted(set(releases.values_list("mechanism", flat=True)))
        choice_field(self, "mechanism").choices = ANY + [(m, method_title(m)) for m in mechanisms]
        choice_field(self, "user").choices = _user_choices(releases.values("requested_by"))

    def apply(self, releases):
        """The filtered and sorted queryset (unfiltered if the form is invalid)."""
        if not self.is_valid():
            return releases.order_by("-created_at")
        data = self.cleaned_data
        if data["dataset"]:
            releases = releases.filter(dataset_id=data["dataset"])
        if data["mechanism"]:
            releases = releases.filter(mechanism=data["mechanism"])
        if data["status"]:
            releases = releases.filter(shown_status=data["status"])
        if data["user"]:
            releases = releases.filter(requested_by_id=data["user"])
        if data["date_from"]:
            releases = releases.filter(created_at__date__gte=data["date_from"])
        if data["date_to"]:
            releases = releases.filter(created_at__date__lte=data["date_to"])
        return releases.order_by(*self.ordering())

    def ordering(self):
        sort = (self.cleaned_data.get("sort") if self.is_valid() else "") or "-created"
        descending, name = sort.startswith("-"), sort.lstrip("-")
        field = self.SORTS[name]
        return [f"-{field}" if descending else field, "-pk"]


class AuditFilterForm(DateRangeForm):
    """Filters over the audit events the user may see."""

    field_order = ["action", "dataset", "user", "release", "date_from", "date_to"]

    action = forms.ChoiceField(
        required=False, label="What happened", choices=ANY + AuditEvent.Action.choices
    )
    dataset = forms.ChoiceField(required=False, label="Dataset")
    user = forms.CharField(
        required=False,
        max_length=150,
        label="Who (user name)",
        help_text="Exact user name, e.g. alice. Leave empty for everyone.",
    )
    release = forms.IntegerField(required=False, min_value=1, label="Release number")

    def __init__(self, data, *, datasets):
        super().__init__(data)
        choice_field(self, "dataset").choices = ANY + [(str(d.pk), d.name) for d in datasets]

    def apply(self, events):
        if not self.is_valid():
            return events
        data = self.cleaned_data
        if data["action"]:
            events = events.filter(action=data["action"])
        if data["dataset"]:
            events = events.filter(dataset_id=data["dataset"])
        if data["user"]:
            events = events.filter(actor_name=data["user"].strip())
        if data["release"]:
            events = events.filter(release_id=data["release"])
        if data["date_from"]:
            events = events.filter(created_at__date__gte=data["date_from"])
        if data["date_to"]:
            events = events.filter(created_at__date__lte=data["date_to"])
        return events
