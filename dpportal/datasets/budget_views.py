"""The dataset page's budget sharing: what the owner is told about a shared budget, and the
form that declares two of their datasets hold the same people (`services.budgets_join`)."""

from django import forms
from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from dpportal import services
from dpportal.access.rules import dataset_for_owner
from dpportal.core.form_fields import choice_field
from dpportal.core.formatting import plain_number
from dpportal.models import Dataset
from dpportal.signals import client_address


def shared_budget_text(dataset) -> str:
    """What the owner must know when another dataset (deleted or not) draws on this budget:
    the same content uploaded before in the budget's scope, or a dataset declared to hold the
    same people; else ""."""
    earlier = services.dataset_shared_with(dataset)
    if earlier is None:
        return ""
    state = "since deleted" if earlier.is_deleted else "not deleted"
    how = (
        "has the same content as, or was declared to hold the same people as,"
        if dataset.budget.joined_from.exists()
        else "has the same content as"
    )
    return (
        f"This file {how} “{earlier.name}” (uploaded {earlier.created_at:%Y-%m-%d}, {state}): "
        f"it shares that dataset's privacy budget: ε spent so far "
        f"{plain_number(dataset.epsilon_spent)} of {plain_number(dataset.epsilon_total)}."
    )


class SamePeopleForm(forms.Form):
    """Another dataset of the owner's that holds the same people, and the owner's confirmation."""

    other = forms.TypedChoiceField(label="Dataset with the same people", coerce=int)
    same_people = forms.BooleanField(
        label="Both datasets hold the same people: their releases should share one budget",
        help_text=services.shared_budgets.HOW,
    )

    def __init__(self, *args, dataset, **kwargs):
        super().__init__(*args, **kwargs)
        choice_field(self, "other").choices = [(d.pk, d.name) for d in other_datasets(dataset)]


def other_datasets(dataset):
    """The owner's other datasets (not deleted) that do not share this dataset's budget yet."""
    mine = Dataset.objects.filter(owner_id=dataset.owner_id, deleted_at__isnull=True)
    return mine.exclude(budget_id=dataset.budget_id).order_by("name", "pk")


def same_people_form(dataset):
    """The form for the dataset page, or None when there is no other dataset to choose."""
    if dataset.is_deleted or not other_datasets(dataset).exists():
        return None
    return SamePeopleForm(dataset=dataset)


@require_POST
def dataset_budget_join(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    form = SamePeopleForm(request.POST, dataset=dataset)
    if not form.is_valid():
        problems = [" ".join(map(str, errors)) for errors in form.errors.values()]
        messages.error(request, "Nothing was changed: " + " ".join(problems))
        return redirect("dataset_detail", pk=dataset.pk)
    other = dataset_for_owner(request.user, form.cleaned_data["other"])
    try:
        joined = services.budgets_join(
            dataset=dataset, other=other, user=request.user, remote_addr=client_address(request)
        )
    except services.ServiceError as exc:
        messages.error(request, str(exc))
        return redirect("dataset_detail", pk=dataset.pk)
    messages.success(
        request,
        f"{dataset.name} and {other.name} now share one privacy budget: ε spent "
        f"{plain_number(joined.epsilon_spent)} of {plain_number(joined.epsilon_total)}, "
        f"δ spent {plain_number(joined.delta_spent)} of {plain_number(joined.delta_total)}.",
    )
    return redirect("dataset_detail", pk=dataset.pk)
