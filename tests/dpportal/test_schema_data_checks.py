"""Issue 20, item 5 (portal half) and issue 13: once a release has started, data content can
never make it fail, and no value from the data reaches a log line or an error page.

Every value a release would refuse is found when the schema is confirmed, in the stored copy of
the table: text and infinite values (inf, -inf, 1e309) in a numeric column, missing values and
NaN in a column whose "missing" is "reject", and values outside the categories of a column whose
unlisted values stop the release. With "missing": "cell" (the default) and "unknown": "other",
missing values, NaN and undeclared categories are handled instead: the schema is confirmed and
the release runs (issue 14). Files are
uploaded through the Django test client (which raises on any HTTP 500).
A release on a confirmed schema of awkward but valid data (values at the bounds, values outside
them that clamp, values grouped as "(other)", missing categorical values) finishes "done" in a
real worker.
"""

import html
import io
import re

import pandas as pd
import pytest
from django.urls import reverse
from django.utils import timezone

from dpportal import services
from dpportal.models import Dataset, Release
from dpportal.releases import engine as release_engine
from tests.conftest import wait_until
from tests.helpers import client_for, make_user, schema_post, upload

GOOD = 1100  # more than the 1000 lines the type guess samples: late values reach the parser
NUMERIC_X = {"type": "numeric", "lower": "0", "upper": "100", "bins": "10", "missing": "reject"}
REJECTING_C = {
    "type": "categorical",
    "categories": "A\nB",
    "unknown": "reject",
    "missing": "reject",
}
LENIENT_X = NUMERIC_X | {"missing": "cell"}
LENIENT_C = REJECTING_C | {"missing": "cell", "unknown": "other"}
RAW_TOKENS = re.compile(r"\b(inf|infinity|nan|1e309|zebra|Q)\b", re.IGNORECASE)

# cause: (value of x, value of c, data row, what the message says)
CAUSES = {
    "missing number": ("", "A", 1050, "1 empty (missing)"),
    "text in a numeric column": ("zebra", "A", 1050, "1 values that are not numbers"),
    "NaN": ("NaN", "A", 1050, "NaN"),
    "inf": ("inf", "A", 1050, "1 infinite values"),
    "-inf": ("-inf", "A", 1050, "1 infinite values"),
    "1e309, among the sampled lines": ("1e309", "A", 3, "1 infinite values"),
    "inf, among the sampled lines (a text column)": ("inf", "A", 2, "1 infinite values"),
    "an undeclared category under reject": ("5", "Q", 1050, "1 value is not among"),
    "a missing category under reject": ("5", "", 1050, "1 empty (missing) values"),
}


def table_with(x, c, row) -> bytes:
    lines = [f"{i % 90},{'AB'[i % 2]}" for i in range(GOOD)]
    lines[row - 1] = f"{x},{c}"
    return ("x,c\n" + "\n".join(lines) + "\n").encode()


def confirm(client, dataset, rows=(NUMERIC_X, REJECTING_C), accept_clamping=False):
    """Post the schema form; return the response and its page, or on a refusal its errors.
    `accept_clamping`: tick "Confirm anyway" (bounds that move many values, issue 43)."""
    data = schema_post(list(rows)) | ({"accept_clamping": "on"} if accept_clamping else {})
    response = client.post(reverse("dataset_schema", args=[dataset.pk]), data)
    page = html.unescape(response.content.decode())
    errors = re.findall(r'class="(?:message error|errorlist)[^>]*>(.*?)</', page, re.DOTALL)
    return response, " ".join(errors) if errors else page


@pytest.mark.django_db
@pytest.mark.parametrize("cause", list(CAUSES))
def test_every_cause_of_a_failed_release_is_refused_at_confirmation(cause, caplog, monkeypatch):
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    caplog.set_level("DEBUG")
    x, c, row, says = CAUSES[cause]
    owner = make_user("alice")
    client = client_for(owner)
    response = upload(client, table_with(x, c, row), filename="awkward.csv")
    assert response.status_code == 302, html.unescape(response.content.decode())[-3000:]
    dataset = Dataset.objects.get()

    response, page = confirm(client, dataset)
    column = "'c'" if "category" in cause else "'x'"
    assert response.status_code == 400
    assert f"Column {column}" in page and says in page and f"data row {row:,}" in page, page
    dataset.refresh_from_db()
    assert not dataset.schema_confirmed
    with pytest.raises(services.ServiceError, match="Confirm the dataset's schema"):
        services.release_create(
            dataset=dataset,
            user=owner,
            mechanism="perturbed_histogram",
            columns=["x", "c"],
            params={},
            epsilon="0.5",
        )
    assert not RAW_TOKENS.search(caplog.text), caplog.text

    ignored = {"type": "ignored"}  # the fix the message offers works
    fixed_rows = (ignored, REJECTING_C) if column == "'x'" else (NUMERIC_X, ignored)
    response, page = confirm(client, dataset, fixed_rows)
    assert response.status_code == 302, page


HANDLED = {
    "missing number",
    "NaN",
    "an undeclared category under reject",
    "a missing category under reject",
}


@pytest.mark.django_db
@pytest.mark.parametrize("cause", list(CAUSES))
def test_with_a_missing_cell_every_cause_is_handled_or_refused_never_failing_a_release(
    cause, monkeypatch
):
    """Issue 14: with "missing": "cell" and "unknown": "other" every data-content cause either
    confirms and then releases (missing, NaN, undeclared or missing category: their own
    cells), or is refused at confirmation with the column, count and row (text, infinite).
    Each release that starts is computed on the stored data and must not fail."""
    monkeypatch.setattr(services.delivery, "release_send", lambda pk: True)
    x, c, row, says = CAUSES[cause]
    owner = make_user("alice")
    client = client_for(owner)
    upload(client, table_with(x, c, row), filename="awkward.csv")
    dataset = Dataset.objects.get()
    response, page = confirm(client, dataset, (LENIENT_X, LENIENT_C))
    if cause not in HANDLED:
        assert response.status_code == 400 and says in page and f"data row {row:,}" in page, page
        return
    assert response.status_code == 302, page
    dataset.refresh_from_db()
    for mechanism, params, rows in (
        ("perturbed_histogram", {"rows": 50}, 50),
        ("smoothed_histogram", {"rows": 5}, 5),
        ("mwem", {"marginals": 1}, GOOD),
    ):
        release = services.release_create(
            dataset=dataset,
            user=owner,
            mechanism=mechanism,
            columns=["x", "c"],
            params=params,
            epsilon="0.3",
        )
        output = release_engine.compute(release, progress=lambda *args: None)
        synthetic = pd.read_csv(io.BytesIO(output.files["synthetic.csv"]))
        assert list(synthetic.columns) == ["x", "c"] and len(synthetic) == rows
        labels = (
            pd.read_csv(io.BytesIO(output.files["noisy_counts.csv"]))["c"]
            if ("noisy_counts.csv" in output.files)
            else pd.Series(["(missing)"])
        )
        assert "(missing)" in set(labels)  # the declared cell, whatever the data
    # the confirmed schema publishes the declared treatment of missing values
    assert [col["missing"] for col in dataset.schema["columns"]] == ["cell", "cell"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "cause",
    [
        "missing number",
        "text in a numeric column",
        "NaN",
        "an undeclared category under reject",
        "a missing category under reject",
    ],
)
def test_broken_twin_without_the_check_the_release_fails_after_reading(cause):
    """The same schemas stored without the check: the mechanism refuses the data mid-release."""
    x, c, row, _ = CAUSES[cause]
    owner = make_user("alice")
    client = client_for(owner)
    upload(client, table_with(x, c, row), filename="awkward.csv")
    dataset = Dataset.objects.get()
    schema = {
        "columns": [
            {"name": "x", "type": "numeric", "lower": 0, "upper": 100, "bins": 10},
            {"name": "c", "type": "categorical", "categories": ["A", "B"], "unknown": "reject"},
        ]
    }
    for column in schema["columns"]:
        column["missing"] = "reject"
    Dataset.objects.filter(pk=dataset.pk).update(schema=schema, schema_confirmed_at=timezone.now())
    release = Release.objects.create(
        dataset=Dataset.objects.get(),
        requested_by=owner,
        mechanism="perturbed_histogram",
        columns=["x", "c"],
        params={},
        epsilon="0.5",
        neighbouring="replace-one",
    )
    with pytest.raises(release_engine.ReleaseInputError):
        release_engine.compute(release, progress=lambda *args: None)


@pytest.mark.django_db
def test_the_upload_of_1e309_is_stored_and_its_profile_holds_only_finite_numbers():
    owner = make_user("alice")
    response = upload(client_for(owner), b"x,y\n1,1e309\n2,-1e309\n3,5\n", filename="big.csv")
    assert response.status_code == 302
    proposals = {p["name"]: p for p in Dataset.objects.get().profile["proposals"]}
    assert proposals["y"]["type"] == "numeric"
    assert "lower" not in proposals["y"] and "upper" not in proposals["y"]  # never from the data


AWKWARD = b"x,c,d\n" + b"0,A,A\n100,B,B\n-5,Z,A\n250,,B\n50.5,A,A\n100,other text,B\n" * 20
AWKWARD_SCHEMA = [
    NUMERIC_X,
    {"type": "categorical", "categories": "A\nB", "unknown": "other"},
    REJECTING_C,
]


def test_a_confirmed_schema_of_awkward_but_valid_data_releases_done_in_a_real_worker(
    celery_worker_process,
):
    owner = make_user("alice")
    client = client_for(owner)
    assert upload(client, AWKWARD, filename="awkward.csv").status_code == 302
    dataset = Dataset.objects.get()
    response, page = confirm(client, dataset, AWKWARD_SCHEMA, accept_clamping=True)
    assert response.status_code == 302, page
    dataset.refresh_from_db()
    release = services.release_create(
        dataset=dataset,
        user=owner,
        mechanism="perturbed_histogram",
        columns=["x", "c", "d"],
        params={"rows": 100},
        epsilon="0.5",
    )
    done = wait_until(
        lambda: Release.objects.filter(pk=release.pk, status__in=Release.TERMINAL).first(),
        timeout=90,
    )
    assert done.status == Release.Status.DONE, done.error_message
    assert done.data_was_read and done.output_dir
