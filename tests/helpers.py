"""Plain helpers shared by test modules (the fixtures built on them are in tests/conftest.py).

Test modules import helpers from here, never from another test module, so that moving or
deleting a test never breaks a neighbour.
"""

import ast
import json
import os
import re
import secrets
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_ADULT = REPO_ROOT / "demo" / "adult.csv.gz"  # UCI Adult, 48,842 rows (demo/README.md)
TEST_DATA = REPO_ROOT / "tests" / "data"  # small tables made for the tests (tests/data/README.md)
# 2,000 rows of Adult (every 24th row of the demo table, tests/data/README.md): the fast stand-in
# for tests whose point is not the size of the table.
SMALL_ADULT = TEST_DATA / "adult_sample.csv"
DEMO_SCHEMA = json.loads((REPO_ROOT / "demo" / "adult_schema.json").read_text())
PASSWORD = "correct horse battery"
MISSING_PK = 10**9


def skip_unless_postgres():
    """Skip a test whose subject is a PostgreSQL server's behaviour (a session ended by the
    server, a connection cut in the network): SQLite, the embedded default, has neither."""
    import pytest
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs the PostgreSQL test database (DATABASE_URL=postgres://...)")


def make_user(username="alice", password=PASSWORD, *, custodian=True):
    """A user; a custodian (may upload, register sources, create tokens) unless told."""
    from dpportal.access.rules import grant_custodian

    user = get_user_model().objects.create_user(username=username, password=password)
    if custodian:
        grant_custodian(user)
    return user


def client_for(user) -> Client:
    """A test client logged in as `user` (anonymous for None)."""
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def make_dataset(
    owner, *, epsilon_total=1, delta_total=0, schema=DEMO_SCHEMA, path=SMALL_ADULT, name="Adult"
):
    """Ingest `path` (the 2,000-row Adult sample unless told) for `owner`, with the demo's public
    schema confirmed (or unconfirmed with schema=None)."""
    from dpportal import services

    dataset = services.dataset_create_from_path(
        owner=owner,
        name=name,
        source_path=path,
        epsilon_total=epsilon_total,
        delta_total=delta_total,
    )
    if schema is None:
        return dataset
    return services.dataset_confirm_schema(dataset=dataset, user=owner, schema=schema)


def make_visits_dataset(owner, tmp_path, *, prefix="vis-", k=2):
    """The 2,000-row Adult sample with a person column `visitor` in front (3 rows per person,
    IDs `<prefix><n>-x`), confirmed with the demo schema and max_rows_per_person = k."""
    import pandas as pd

    table = pd.read_csv(SMALL_ADULT)
    table.insert(0, "visitor", [f"{prefix}{i // 3}-x" for i in range(len(table))])
    path = tmp_path / "visits.csv"
    table.to_csv(path, index=False)
    schema = {
        "columns": [{"name": "visitor", "role": "person_id"}, *DEMO_SCHEMA["columns"]],
        "max_rows_per_person": k,
    }
    return make_dataset(owner, schema=schema, path=path, name="Visits")


def make_demo_dataset(owner, epsilon_total=1):
    """The full demo table (48,842 rows): only for tests whose point is the table's size."""
    return make_dataset(owner, epsilon_total=epsilon_total, path=DEMO_ADULT)


def make_release(owner, dataset, **kwargs):
    """A queued perturbed-histogram release of age × sex (override any argument)."""
    from dpportal import services

    arguments = {
        "mechanism": "perturbed_histogram",
        "columns": ["age", "sex"],
        "params": {"rows": 100},
        "epsilon": "0.5",
        **kwargs,
    }
    return services.release_create(dataset=dataset, user=owner, **arguments)


def make_analyst(dataset, username, epsilon="0.4", delta="0"):
    """An analyst of `dataset`: its owner invites <username>@example.org with an allotment
    (ε, δ), and an account made for that address (no custodian grant) accepts. Returns the
    user and its `Analyst` membership."""
    from dpportal import services

    secrets: list[str] = []
    email = f"{username}@example.org"
    analyst = services.analyst_invite(
        dataset=dataset,
        user=dataset.owner,
        email=email,
        epsilon=epsilon,
        delta=delta,
        link_for=lambda secret: secrets.append(secret) or f"https://portal.test/i/{secret}",
    )
    user = make_user(username, custodian=False)
    user.email = email
    user.save(update_fields=["email"])
    services.invitation_accept(secret=secrets[0], user=user)
    analyst.refresh_from_db()
    return user, analyst


def make_request(user, analyst, **kwargs):
    """A waiting request of a perturbed histogram of age × sex (override any argument)."""
    from dpportal import services

    arguments = {
        "mechanism": "perturbed_histogram",
        "columns": ["age", "sex"],
        "params": {"rows": 100},
        "epsilon": "0.1",
        **kwargs,
    }
    return services.request_submit(analyst=analyst, user=user, **arguments)


def run_now(release):
    """Run a queued release in this process; it must end done."""
    from dpportal import services
    from dpportal.models import Release

    services.release_run(release_id=release.pk)
    release.refresh_from_db()
    assert release.status == Release.Status.DONE, release.error_message
    return release


def chart_figures(page: str) -> list[dict]:
    """The plotly figures embedded in a results page."""
    found = re.findall(
        r'<script id="chart-data-\d+" type="application/json">(.*?)</script>', page, re.S
    )
    return [json.loads(text) for text in found]


def post_new_release(client, dataset_pk, data):
    """Submit the new-release form as a browser does: open the page, then POST `data` with the
    one-time token the page carries (none if the page did not open, e.g. a 404)."""
    url = reverse("release_new", args=[dataset_pk])
    page = client.get(url).content.decode()
    token = re.search(r'name="submission" value="([^"]*)"', page)
    return client.post(url, {**data, "submission": token.group(1) if token else ""})


def histogram_post(**overrides) -> dict:
    """The new-release form's fields for a perturbed histogram of age × sex."""
    return {
        "mechanism": "perturbed_histogram",
        "columns": ["age", "sex"],
        "epsilon": "0.5",
        "rows": "200",
        **overrides,
    }


# ---------------------------------------------------------------- dataset pages

SMALL_CSV = b"age,sex,city\n34,F,Leeds\n51,M,York\n29,F,Leeds\n"
SMALL_SCHEMA = {
    "columns": [
        {"name": "age", "type": "numeric", "lower": 0, "upper": 100, "bins": 5},
        {"name": "sex", "type": "categorical", "categories": ["F", "M"], "unknown": "other"},
        {"name": "city", "type": "ignored"},
    ]
}


def upload(client, content=SMALL_CSV, filename="people.csv", **fields):
    """POST the upload form with `content` as the file."""
    from django.core.files.uploadedfile import SimpleUploadedFile

    data = {
        "name": "People",
        "description": "",
        "header": "auto",
        "epsilon_total": "1",
        "delta_total": "0",
        "neighbouring": "replace-one",
    } | fields
    data["file"] = SimpleUploadedFile(filename, content)
    return client.post(reverse("dataset_upload"), data)


def schema_post(rows, public_knowledge=True):
    """The schema formset's POST data for `rows` (one dict of field values per column)."""
    data = {
        "form-TOTAL_FORMS": str(len(rows)),
        "form-INITIAL_FORMS": str(len(rows)),
        "form-MIN_NUM_FORMS": "1",
        "form-MAX_NUM_FORMS": "1000",
    }
    if public_knowledge:
        data["public_knowledge"] = "on"
    for i, row in enumerate(rows):
        data |= {f"form-{i}-{key}": value for key, value in row.items()}
    return data


# ---------------------------------------------------------------- deployment


def ed25519_pem() -> str:
    """A fresh Ed25519 private key as PEM text (a DPPORTAL_SIGNING_KEY value)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )


PRODUCTION_ENV = {
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": "portal.example.org",
    "DPPORTAL_CACHE_URL": "redis://redis:6379/1",  # as docker-compose.yml and the Dockerfile
    "DPPORTAL_SIGNING_KEY": ed25519_pem(),  # the public records' key (dpportal.W020 without)
}


def deploy_check(**extra_env):
    """Run `manage.py check --deploy --fail-level WARNING` with production settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DPPORTAL_"))}
    env.update(PRODUCTION_ENV, **extra_env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# ---------------------------------------------------------------- routes and pages


def enumerate_routes(resolver=None, prefix=""):
    """(name, route, URL argument names) for every named pattern, skipping the admin site
    (staff only). Unnamed patterns are refused by tests/dpportal/test_access_matrix.py."""
    resolver = resolver or get_resolver()
    routes = []
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin":
                continue
            routes += enumerate_routes(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern) and entry.name:
            routes.append(
                (entry.name, prefix + str(entry.pattern), sorted(entry.pattern.converters))
            )
    return routes


def object_kwargs(name, kwarg_names, world, missing=False):
    """URL kwargs pointing at the world's objects (or at objects that do not exist)."""
    values = {}
    name = name.removeprefix("api_")  # an API route names the same objects as its page
    for kwarg in kwarg_names:
        if kwarg == "secret":  # an invitation link's secret: the world's pending one, if any
            values[kwarg] = getattr(world, "pending_secret", "no-such-invitation")
        elif kwarg == "dataset_pk" or (kwarg == "pk" and name.startswith("dataset")):
            values[kwarg] = MISSING_PK if missing else world.dataset.pk
        elif kwarg == "pk" and name.startswith(("release", "public_release")):
            values[kwarg] = MISSING_PK if missing else world.release.pk
        elif kwarg == "pk" and name.startswith("request"):  # an analyst's request, if any
            request = getattr(world, "request", None)
            values[kwarg] = MISSING_PK if missing or request is None else request.pk
        elif kwarg == "filename":
            values[kwarg] = "manifest.json"
        else:
            raise AssertionError(
                f"route {name!r} has URL argument {kwarg!r}: teach object_kwargs() in "
                f"{__file__} which object it names, so the access matrix covers it"
            )
    return values


def html_pages(user, world, releases=()) -> list[str]:
    """Paths of every named route that answers `user` a GET with an HTML page (200), for the
    world's dataset and for its release and each of `releases`."""
    client = client_for(user)
    paths = []
    for release in (world.release, *releases):
        objects = SimpleNamespace(dataset=world.dataset, release=release)
        for name, _route, kwarg_names in enumerate_routes():
            if name == "logout" or (release is not world.release and "pk" not in kwarg_names):
                continue
            path = reverse(name, kwargs=object_kwargs(name, kwarg_names, objects))
            response = client.get(path)
            if (
                response.status_code == 200
                and response["Content-Type"].startswith("text/html")
                and "attachment" not in response.get("Content-Disposition", "")
            ):
                paths.append(path)
    return list(dict.fromkeys(paths))


# ---------------------------------------------------------------- accessibility


class Described(HTMLParser):
    """Collects every id and every (element, aria-describedby id) pair of a page."""

    def __init__(self):
        super().__init__()
        self.ids, self.references = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for target in (attrs.get("aria-describedby") or "").split():
            self.references.append((f"<{tag} name={attrs.get('name')}>", target))


def dangling_references(html: str) -> tuple[list[str], int]:
    """(references to ids missing from the page, number of references)."""
    page = Described()
    page.feed(html)
    missing = [
        f"{element} → #{target}" for element, target in page.references if target not in page.ids
    ]
    return missing, len(page.references)


# ---------------------------------------------------------------- mechanisms

FORBIDDEN_MODULES = ("random", "numpy.random", "secrets")


def randomness_uses(tree: ast.AST) -> list[str]:
    """What in `tree` touches random state (modules other than mechanisms/noise.py must not)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.module in FORBIDDEN_MODULES or any(a.name == "random" for a in node.names):
                found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr in ("random", "default_rng"):
            found.append(f"attribute .{node.attr}")
        elif isinstance(node, ast.Name) and node.id == "default_rng":
            found.append("default_rng")
    return found


LIVE_HTML = ("<script>alert", "<img src=x")  # raw: escaped text would read &lt;script&gt;


def assert_no_live_html(page: str, where: str) -> None:
    """No element or attribute a hostile text would have made had it not been escaped."""
    for raw in LIVE_HTML:
        assert raw not in page, (where, raw, page[max(page.find(raw) - 200, 0) :][:400])
    parsed = LiveMarkup()
    parsed.feed(page)
    assert parsed.found == [], (where, parsed.found)


class LiveMarkup(HTMLParser):
    """Elements and attributes a payload would have created had it not been escaped."""

    def __init__(self):
        super().__init__()
        self.found, self._in_script = [], False

    def handle_starttag(self, tag, attrs):
        kind = dict(attrs).get("type") or "text/javascript"
        self._in_script = tag == "script" and "json" not in kind  # JSON data never runs
        for name, value in attrs:
            if name.startswith("on") or (tag == "img" and value == "x"):
                self.found.append(f"<{tag} {name}={value!r}>")

    def handle_data(self, data):
        if self._in_script and "alert(" in data:
            self.found.append(f"script {data[:80]!r}")

    def handle_endtag(self, tag):
        self._in_script = False
