"""The dataset page's publishing details: the title, publisher, contact and note that the
public pages and packages of its releases show (`services.dataset_set_publishing`)."""

from django import forms
from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from dpportal import services
from dpportal.access.rules import dataset_for_owner
from dpportal.core.form_fields import DisplayTextField


class PublishingForm(forms.Form):
    """What every public page and package of the dataset's releases says about who publishes
    it. All optional; each is public. Shown to everyone, so normalised and refused with
    invisible, direction-changing or control characters (`DisplayTextField`): a page, a PDF
    or a workbook cannot show them as typed."""

    publish_title = DisplayTextField(
        label="Title",
        max_length=200,
        required=False,
        help_text="The heading of each release's public page and report, such as “Income by "
        "region, 2024 census sample”. Empty: “Differentially private release” and its number.",
    )
    publisher = DisplayTextField(
        label="Publisher",
        max_length=200,
        required=False,
        help_text="Who publishes the releases, such as your office's name.",
    )
    publish_contact = DisplayTextField(
        label="Contact",
        max_length=254,
        required=False,
        help_text="Where readers can ask about them: an e-mail address or a web page.",
    )
    publish_note = DisplayTextField(
        multiline=True,
        label="Note",
        max_length=2000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Anything readers should know first: the source, its year, how to cite it.",
    )


def publishing_form(dataset) -> PublishingForm:
    """The form, filled with the dataset's current details."""
    return PublishingForm(
        initial={name: getattr(dataset, name) for name in PublishingForm.base_fields}
    )


@require_POST
def dataset_publishing(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    form = PublishingForm(request.POST)
    if not form.is_valid():
        for name, errors in form.errors.items():
            said = " ".join(str(error) for error in errors)
            messages.error(request, f"{form[name].label}: {said} Nothing was saved.")
        return redirect("dataset_detail", pk=dataset.pk)
    try:
        services.dataset_set_publishing(dataset=dataset, user=request.user, **form.cleaned_data)
    except services.ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, "Saved: the public pages and packages of its releases now show these details."
        )
    return redirect("dataset_detail", pk=dataset.pk)
