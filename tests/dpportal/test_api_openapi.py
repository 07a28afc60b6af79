"""The OpenAPI description served at /api/v1/openapi.json describes every API route with
exactly the methods its view accepts (and nothing else), and is valid OpenAPI 3.1."""

import re

import pytest
from django.test import Client
from django.urls import URLPattern, get_resolver, reverse
from openapi_spec_validator import validate

from dpportal.api import openapi
from dpportal.api.auth import endpoint_methods

pytestmark = pytest.mark.django_db


def api_routes(resolver=None) -> dict[str, set[str]]:
    """OpenAPI path → methods the view accepts, for every route under api/v1/ but the
    description itself."""
    found = {}
    for entry in (resolver or get_resolver()).url_patterns:
        if str(entry.pattern) != "api/v1/":
            continue
        for pattern in entry.url_patterns:
            assert isinstance(pattern, URLPattern)
            if pattern.name == "api_openapi":
                continue
            path = "/api/v1/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(pattern.pattern))
            found[path] = {m.lower() for m in endpoint_methods(pattern.callback)}
    return found


def described(document) -> dict[str, set[str]]:
    return {path: set(operations) for path, operations in document["paths"].items()}


def test_every_route_and_method_is_described_and_nothing_else():
    document = Client().get(reverse("api_openapi")).json()  # served, without a token
    routes = api_routes()
    assert len(routes) >= 11
    assert described(document) == routes


def test_the_description_is_valid_openapi():
    validate(openapi.document())


def test_every_path_parameter_is_declared():
    for path, operations in openapi.PATHS.items():
        names = set(re.findall(r"{(\w+)}", path))
        for method, operation in operations.items():
            declared = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
            assert declared == names, (path, method)


def test_the_check_catches_an_undescribed_route_and_a_wrong_method(monkeypatch):
    """Broken twins: a route dropped from the description, and a method it does not have."""
    document = openapi.document() | {"paths": dict(openapi.PATHS)}
    del document["paths"]["/api/v1/audit/"]
    assert described(document) != api_routes()
    document["paths"] = dict(openapi.PATHS) | {"/api/v1/releases/{pk}/": {"get": {}, "delete": {}}}
    assert described(document) != api_routes()
