"""The schema page's "estimate for me": one POST per column spends a stated share of the budget
on a DP estimate of its bounds or categories (`services.estimate_column`).

The page's script asks for JSON and fills the column's inputs in place (values typed in other
columns stay); without the script the form posts here and the schema page shows the estimate.
Either way the post carries the page's person question (person column and k, confirmed or not):
the estimate protects the people it names (`posted_person`).
"""

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from dpportal import services
from dpportal.access.rules import dataset_for_owner
from dpportal.core.formatting import plain_number
from dpportal.datasets.dp_estimate_offer import clamp_words, found_words
from dpportal.datasets.person_forms import PersonForm
from dpportal.signals import client_address
from mechanisms.persons import PersonLevel


@require_POST
def dataset_dp_estimate(request, pk):
    dataset = dataset_for_owner(request.user, pk)
    wants_json = "application/json" in request.headers.get("Accept", "")
    try:
        column, kind = _column_and_kind(dataset, request.POST.get("estimate", ""))
        release = services.estimate_column(
            dataset=dataset,
            user=request.user,
            column=column,
            kind=kind,
            person=posted_person(request.POST, dataset),
            percent=request.POST.get(f"spend_{kind}"),
            remote_addr=client_address(request),
        )
    except services.ServiceError as exc:
        if wants_json:
            return JsonResponse({"ok": False, "error": str(exc)}, status=400)
        messages.error(request, f"Nothing was spent: {exc}")
        return redirect("dataset_schema", pk=dataset.pk)
    result = services.dp_estimates.estimate_result(release)
    text = estimate_text(kind, result, release.epsilon)
    if wants_json:
        return JsonResponse({"ok": True, "kind": kind, "text": text, **_public(result)})
    messages.success(request, f"{column}: {text}")
    return redirect("dataset_schema", pk=dataset.pk)


def _column_and_kind(dataset, value: str) -> tuple[str, str]:
    """The form's "index:kind" (for example "3:numeric") as a column name and kind."""
    index, _, kind = value.partition(":")
    if not index.isdigit() or int(index) >= len(dataset.columns or []):
        raise services.ServiceError("Choose the column to estimate with its own button.")
    return dataset.columns[int(index)], kind


def posted_person(data, dataset):
    """The person level the page's person question shows: a PersonLevel, None ("each row is a
    different person"), or `services.dp_estimates.CONFIRMED` when the post does not carry the
    question (the confirmed schema's is used then)."""
    if "person_column" not in data:
        return services.dp_estimates.CONFIRMED
    form = PersonForm(data, columns=dataset.columns)
    if not form.is_valid():
        problems = [
            f"{form[name].label} {' '.join(map(str, errors))}"
            for name, errors in form.errors.items()
        ]
        raise services.ServiceError(" ".join(problems))
    column = form.cleaned_data["person_column"]
    return PersonLevel(column, form.cleaned_data["max_rows_per_person"]) if column else None


def _public(result: dict) -> dict:
    keys = ("lower", "upper", "categories")
    return {key: result[key] for key in keys if key in result}


def estimate_text(kind: str, result: dict, epsilon) -> str:
    """The estimate in one sentence, labelled as a DP estimate with what it spent."""
    spent = f"(DP estimate, spent ε = {plain_number(epsilon)})"
    if kind == "numeric":
        if result.get("lower") is None or result.get("upper") is None:
            return (
                f"no bounds could be estimated {spent}: too few rows for this share of the "
                "budget, or values beyond ±10^12. Type bounds from public knowledge."
            )
        return f"bounds {result['lower']:g} to {result['upper']:g} {spent}{_clamp(result)}."
    found = result.get("categories") or []
    if not found:
        return (
            f"no category is held by enough rows to be found {spent}{_found(result)}. Choose a "
            "public list or paste one."
        )
    return (
        f"{len(found)} categories found {spent}{_found(result)}; add any others that are possible."
    )


def _clamp(result: dict) -> str:
    """What the bounds cut off, as the estimate stated it (older estimates did not)."""
    if "expected_clamp_rows" not in result:
        return ""
    return f": {clamp_words(result['expected_clamp_rows'])}"


def _found(result: dict) -> str:
    """What a search at this spend finds, as the estimate stated it (older estimates did not)."""
    if "found_rows" not in result:
        return ""
    return f": at this spend a search {found_words(result['found_rows'])}"
