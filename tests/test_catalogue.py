"""Adding a mechanism is adding one catalogue row and, for the portal, one kind: a toy noisy
row count, defined here and put into mechanisms.CATALOGUE and the portal's kind folders
(`dpportal.releases.kinds.FOLDERS`, both monkeypatched) and nowhere else, is listed and run by
the command line, gets the one manifest shape from run_release, is offered by the release form
with its words and parameter fields, previewed, run through release_engine.compute, shown on
its results page with its values and a chart, packaged with its report, driven by the API and
described by the OpenAPI document.
"""

import io
import json
import re
import zipfile

import numpy as np
import pandas as pd
import pytest
from django.test import Client
from django.urls import reverse

from dpportal.api import openapi
from dpportal.models import Release
from dpportal.releases import engine as release_engine
from dpportal.releases import kinds
from dpportal.releases.kinds.base import Kind
from mechanisms import catalogue
from mechanisms.__main__ import main
from mechanisms.accounting import noise_scale
from mechanisms.accuracy import discrete_laplace_std
from mechanisms.catalogue import CATALOGUE, MechanismSpec, Parameter, pure_guarantee
from mechanisms.noise import check_count_noise, seeded_source
from mechanisms.plans import NoisePlan
from mechanisms.release import ReleaseOutput, csv_bytes
from mechanisms.release_request import MechanismInputs, PlanInputs
from mechanisms.schema import Schema
from tests.helpers import client_for, make_dataset, make_user, post_new_release, run_now


def noisy_count(inputs: MechanismInputs[pd.DataFrame]) -> ReleaseOutput:
    """The number of rows plus discrete Laplace noise of scale 1/epsilon.

    Privacy: pure epsilon-DP; one row changes the count by at most 1 (add-remove; 0 under
    replace-one).
    """
    rows = len(inputs.data)
    scale = check_count_noise(noise_scale(1, inputs.epsilon), inputs.epsilon)
    noisy = int(inputs.rng.add_discrete_laplace(np.array([rows], dtype=np.int64), scale)[0])
    label = inputs.params.get("label", "rows")
    return ReleaseOutput(
        files={"count.csv": csv_bytes(pd.DataFrame({label: [noisy]}))},
        manifest={"parameters": {"label": label}},
        spent={"epsilon": noise_scale(1, scale), "delta": 0.0},  # 1 / scale, rounded up
    )


def noisy_count_plan(inputs: PlanInputs) -> NoisePlan:
    scale = check_count_noise(noise_scale(1, inputs.epsilon), inputs.epsilon)
    return NoisePlan("discrete Laplace", scale, discrete_laplace_std(scale), 1, 1)


TOY = MechanismSpec(
    name="noisy_count",
    title="Noisy row count",
    summary="the number of rows, plus discrete Laplace noise",
    run=noisy_count,
    parameters=(
        Parameter("label", str, "column header of the released count", "rows"),
        Parameter("spare", int, "an unused whole number, to show typed fields", None, (1, 9)),
    ),
    plan=noisy_count_plan,
    guarantee=pure_guarantee,
    files={"count.csv": "the noisy number of rows"},
)


class NoisyCount(Kind):
    """The toy's kind folder: its own words on the card; everything else generic."""

    def good_for(self) -> str:
        return "Knowing roughly how many rows the table has."


@pytest.fixture(autouse=True)
def toy(monkeypatch):
    monkeypatch.setitem(CATALOGUE, "noisy_count", TOY)
    monkeypatch.setitem(kinds.FOLDERS, "noisy_count", NoisyCount("noisy_count"))


def test_the_command_line_lists_and_runs_it(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "noisy-count" in capsys.readouterr().out
    data, schema = tmp_path / "data.csv", tmp_path / "schema.json"
    pd.DataFrame({"age": [20, 30, 40]}).to_csv(data, index=False)
    schema.write_text(
        json.dumps(
            {"columns": [{"name": "age", "type": "numeric", "lower": 0, "upper": 99, "bins": 3}]}
        )
    )
    argv = ["noisy-count", "--input", str(data), "--schema", str(schema), "--epsilon", "50"]
    assert main(argv + ["--label", "people", "--seed", "1", "--out", str(tmp_path / "o")]) == 0
    count = pd.read_csv(tmp_path / "o" / "count.csv")
    assert list(count.columns) == ["people"]
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["mechanism"] == "noisy_count" and manifest["parameters"] == {"label": "people"}


def test_run_release_writes_the_one_manifest_shape_for_it():
    schema = Schema.from_dict(
        {"columns": [{"name": "x", "type": "categorical", "categories": ["a"]}]}
    )
    out = catalogue.run_release(
        "noisy_count", pd.DataFrame({"x": ["a"] * 7}), schema, epsilon=1, rng=seeded_source(3)
    )
    assert tuple(out.manifest) == catalogue.MANIFEST_KEYS
    assert out.manifest["guarantee"] == {
        "unit": "one row of the input table",
        "neighbouring": "replace-one",
        "definition": "pure epsilon-DP",
        "epsilon": 1.0,
        "delta": 0.0,
        "rho": None,
        "sensitivity": 2,
    }
    assert out.manifest["files"] == {"count.csv": "the noisy number of rows"}


def test_the_portal_offers_it_and_runs_it_through_release_engine(db, monkeypatch):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    client = client_for(owner)
    page = client.get(reverse("release_new", args=[dataset.pk])).content.decode()
    assert 'id="id_mechanism_noisy_count"' in page and "Noisy row count" in page
    assert 'name="noisy_count__label"' in page and 'name="noisy_count__spare"' in page
    assert 'data-for="noisy_count"' in page
    post = {"mechanism": "noisy_count", "columns": ["age"], "epsilon": "0.5"}
    estimate = client.get(reverse("release_preview", args=[dataset.pk]), post).json()
    assert estimate["ok"], estimate
    assert "discrete Laplace noise of typically ±" in estimate["accuracy"][0]
    post_new_release(client, dataset.pk, {**post, "noisy_count__label": "n"})
    release = Release.objects.get()
    assert release.mechanism == "noisy_count" and release.params == {"label": "n"}
    computed = []
    honest = release_engine.compute
    monkeypatch.setattr(
        release_engine, "compute", lambda *a, **k: computed.append(1) or honest(*a, **k)
    )
    release = run_now(release)
    assert computed == [1]
    assert set(release.manifest) == set(catalogue.MANIFEST_KEYS)  # jsonb reorders keys
    assert release.manifest["parameters"] == {"label": "n"}
    detail = client.get(reverse("release_detail", args=[release.pk])).content.decode()
    assert "Noisy row count" in detail
    assert "Preview of count.csv" in detail and '<th scope="col">n</th>' in detail
    noisy = Release.objects.get().manifest  # the value shown is the file's, not a recount
    shown = pd.read_csv(io.BytesIO(download(client, release, "count.csv")))["n"][0]
    assert f"<td>{shown}</td>" in detail
    charts = json.loads(re.search(r'id="chart-data-0"[^>]*>(.*?)</script>', detail, re.S)[1])
    assert charts["data"][0]["type"] == "bar" and charts["data"][0]["y"] == [shown]
    assert noisy["files"] == {"count.csv": "the noisy number of rows"}
    package = zipfile.ZipFile(io.BytesIO(download_zip(client, release)))
    names = {name.rsplit("/", 1)[-1] for name in package.namelist()}
    assert {"count.csv", "manifest.json", "README.txt", "report.html"} <= names
    report = next(n for n in package.namelist() if n.endswith("report.html"))
    assert "Noisy row count" in package.read(report).decode()


def test_the_card_shows_the_words_of_its_kind_folder(db):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    page = client_for(owner).get(reverse("release_new", args=[dataset.pk])).content.decode()
    assert "Knowing roughly how many rows the table has." in page


def test_the_api_runs_it_and_the_openapi_document_lists_it(db, monkeypatch):
    owner = make_user("owner")
    dataset = make_dataset(owner)
    document = client_for(owner).get(reverse("api_openapi")).json()
    assert "noisy_count" in document["components"]["schemas"]["Mechanism"]["enum"]
    bodies = {b["title"]: b for b in document["components"]["schemas"]["Release"]["oneOf"]}
    toy = bodies["Noisy row count"]["properties"]
    assert toy["mechanism"] == {"const": "noisy_count", "description": "Noisy row count"}
    assert toy["noisy_count__spare"]["type"] == "integer"
    assert document == openapi.document()
    client = api_client(owner)
    body = {"mechanism": "noisy_count", "columns": ["age"], "epsilon": "0.5"}
    url = reverse("api_dataset_releases", args=[dataset.pk])
    created = client.post(
        url, json.dumps(body), content_type="application/json", HTTP_IDEMPOTENCY_KEY="toy-1"
    )
    assert created.status_code == 201, created.content
    release = run_now(Release.objects.get())
    done = client.get(reverse("api_release_detail", args=[release.pk])).json()
    assert done["status"] == "done" and done["mechanism"] == "noisy_count"
    assert "count.csv" in {f["name"] for f in done["files"]}


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def download(client, release, name) -> bytes:
    response = client.get(reverse("release_download_file", args=[release.pk, name]))
    assert response.status_code == 200, name
    return _body(response)


def download_zip(client, release) -> bytes:
    response = client.get(reverse("release_download_zip", args=[release.pk]))
    assert response.status_code == 200
    return _body(response)


def api_client(user):
    """A client that sends a fresh API token of `user` (no session)."""
    page = client_for(user).post(reverse("token_list"), {"action": "create", "name": "toy"})
    secret = re.search(r'<code id="new-token">([^<]+)</code>', page.content.decode())[1]
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
