"""The API's OpenAPI 3.1 description, served at /api/v1/openapi.json.

Written by hand, one entry per route in `api.urls`; tests/dpportal/test_api_openapi.py checks
that every route and method is described (and nothing else), and that the document is valid
OpenAPI 3.1.
"""

from typing import Any

from django import forms
from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from dpportal.releases.kinds import all_kinds
from mechanisms.validation import CLAMPING_WARNING_SHARE

PK = {"name": "pk", "in": "path", "required": True, "schema": {"type": "integer"}}
FILENAME = {"name": "filename", "in": "path", "required": True, "schema": {"type": "string"}}
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": True,
    "description": "A new unique text (e.g. a UUID) per release; a repeat with the same key "
    "returns the first release and spends nothing.",
    "schema": {"type": "string", "maxLength": 200},
}
JSON_OBJECT = {"type": "object", "additionalProperties": True}
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {"type": "string"},
        "errors": {"type": "object", "additionalProperties": {"type": "array"}},
    },
}
RISK_PART = {
    "type": "object",
    "properties": {
        "epsilon": {"type": "string"},
        "delta": {"type": "string"},
        "unit": {"enum": ["row", "person"]},
        "neighbouring": {"enum": ["replace-one", "add-remove"]},
        "table": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "prior": {"type": "number"},
                    "posterior_at_most": {"type": "number"},
                    "shown": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "sentences": {"type": "array", "items": {"type": "string"}},
    },
}
RISK = {
    "type": "object",
    "description": "The risk in words (mechanisms.risk): someone p0 sure of a claim about one "
    "unit before is at most p1 = e^ε p0 / (1 - p0 + e^ε p0) sure after, except with "
    "probability δ; for the release and for the dataset's total ε, δ spent.",
    "properties": {"release": RISK_PART, "dataset_total": RISK_PART},
}
WITH_RISK = {
    "type": "object",
    "additionalProperties": True,
    "properties": {"risk": {"$ref": "#/components/schemas/Risk"}},
}


def _json(description: str, status: str = "200") -> dict:
    return {status: {"description": description, "content": _content(JSON_OBJECT)}}


def _content(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _errors(*statuses: str) -> dict:
    reasons = {
        "400": "Invalid input: the message and `errors` say what to fix",
        "404": "No such object, or not yours to see",
        "409": "Not possible in the object's state",
        "413": "Too large",
        "415": "Wrong content type",
    }
    return {
        s: {"description": reasons[s], "content": _content({"$ref": "#/components/schemas/Error"})}
        for s in statuses
    }


def _operation(summary, *, parameters=(), body=None, responses=None, errors=("404",)):
    operation = {
        "summary": summary,
        "parameters": list(parameters),
        "responses": (responses or _json("OK")) | _errors(*errors),
    }
    if body is not None:
        operation["requestBody"] = {"required": True, "content": body}
    return operation


def _file(description: str) -> dict:
    return {"200": {"description": description, "content": {"application/octet-stream": {}}}}


def _object_body(*names: str) -> dict:
    return _content({"type": "object", "properties": {n: {} for n in names}})


UPLOAD_FORM = {
    "multipart/form-data": {
        "schema": {
            "type": "object",
            "required": ["name", "file", "epsilon_total"],
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "file": {"type": "string", "contentMediaType": "application/octet-stream"},
                "header": {"enum": ["auto", "yes", "no"]},
                "epsilon_total": {"type": "string", "example": "1"},
                "delta_total": {"type": "string", "example": "0"},
                "neighbouring": {"enum": ["replace-one", "add-remove"]},
            },
        }
    }
}
SCHEMA_BODY = _content(
    {
        "type": "object",
        "required": ["columns", "public_knowledge"],
        "properties": {
            "columns": {"type": "array", "items": JSON_OBJECT},
            "public_knowledge": {"type": "boolean"},
            "accept_clamping": {
                "type": "boolean",
                "default": False,
                "description": (
                    "As the schema page's 'Confirm anyway'. Without it, a schema whose bounds "
                    f"or categories move more than {CLAMPING_WARNING_SHARE:.0%} of a column's "
                    "values (clamped to a bound or sent to '(other)') is not confirmed: the "
                    "answer is a 400 whose errors name each such column (columns[i]), its "
                    "share and the likely cause. Send true once they are checked and right."
                ),
            },
        },
    }
)
RELEASE_BODY = _content({"$ref": "#/components/schemas/Release"})
REQUEST_BODY = _content(
    {
        "allOf": [
            {"$ref": "#/components/schemas/Release"},
            {"type": "object", "properties": {"purpose": {"type": "string"}}},
        ]
    }
)
DATASET_PK = {"name": "dataset_pk", "in": "path", "required": True, "schema": {"type": "integer"}}
PREVIEW_PARAMETERS = [
    {"name": name, "in": "query", "required": name != "delta", "schema": schema}
    for name, schema in (
        ("mechanism", {"$ref": "#/components/schemas/Mechanism"}),
        ("columns", {"type": "array", "items": {"type": "string"}}),
        ("epsilon", {"type": "string"}),
        ("delta", {"type": "string"}),
    )
]

PLAN_PARAMETERS = [
    {"name": name, "in": "query", "required": required, "schema": schema}
    for name, required, schema in (
        ("columns", True, {"type": "array", "items": {"type": "string"}}),
        ("target_rows", False, {"type": "number"}),
        ("target_percent", False, {"type": "number"}),
        ("delta", False, {"type": "string"}),
    )
]

PATHS = {
    "/api/v1/datasets/": {
        "get": _operation("Datasets you own or audit", errors=()),
        "post": _operation(
            "Upload a table (CSV, TSV or XLSX) with its privacy budget",
            body=UPLOAD_FORM,
            responses=_json("The new dataset", "201"),
            errors=("400", "413", "415"),
        ),
    },
    "/api/v1/datasets/{pk}/": {"get": _operation("A dataset", parameters=[PK])},
    "/api/v1/datasets/{pk}/schema/": {
        "get": _operation("The confirmed schema, or the proposal (owner)", parameters=[PK]),
        "post": _operation(
            "Confirm the schema (public metadata)",
            parameters=[PK],
            body=SCHEMA_BODY,
            errors=("400", "404", "415"),
        ),
    },
    "/api/v1/datasets/{pk}/preview/": {
        "get": _operation(
            "Expected accuracy and risk of a release; spends nothing (owner)",
            parameters=[PK, *PREVIEW_PARAMETERS],
            responses={"200": {"description": "OK", "content": _content(WITH_RISK)}},
            errors=("400", "404", "409"),
        )
    },
    "/api/v1/datasets/{pk}/plan/": {
        "get": _operation(
            "The ε each kind of release needs for an accuracy, or why none; spends nothing (owner)",
            parameters=[PK, *PLAN_PARAMETERS],
            errors=("400", "404", "409"),
        )
    },
    "/api/v1/datasets/{pk}/ledger/": {"get": _operation("The budget ledger", parameters=[PK])},
    "/api/v1/datasets/{pk}/budget/": {
        "post": _operation(
            "Change the total ε, δ or the neighbouring relation (owner)",
            parameters=[PK],
            body=_object_body("epsilon_total", "delta_total", "neighbouring"),
            errors=("400", "404", "415"),
        )
    },
    "/api/v1/datasets/{pk}/auditors/": {
        "get": _operation("Auditors and pending invitations (owner)", parameters=[PK]),
        "post": _operation(
            "Add or remove an auditor by user name (owner)",
            parameters=[PK],
            body=_object_body("username", "action"),
            errors=("400", "404", "415"),
        ),
    },
    "/api/v1/datasets/{pk}/invitations/": {
        "post": _operation(
            "E-mail an invitation to audit ({email}), or withdraw one ({revoke: id}) (owner)",
            parameters=[PK],
            body=_object_body("email", "revoke"),
            responses=_json("Sent", "201") | _json("Withdrawn"),
            errors=("400", "404", "415"),
        )
    },
    "/api/v1/datasets/{pk}/delete/": {
        "post": _operation(
            "Delete the dataset's stored files (owner)",
            parameters=[PK],
            body=_object_body("confirm_name"),
            errors=("400", "404", "415"),
        )
    },
    "/api/v1/datasets/{pk}/releases/": {
        "get": _operation("The dataset's releases", parameters=[PK]),
        "post": _operation(
            "Request a release: spends its ε from the budget (owner)",
            parameters=[PK, IDEMPOTENCY_KEY],
            body=RELEASE_BODY,
            responses=_json("The new release", "201") | _json("A repeated key: the first one"),
            errors=("400", "404", "409", "415"),
        ),
    },
    "/api/v1/releases/{pk}/": {
        "get": _operation(
            "A release, its progress and its risk in words (poll it)",
            parameters=[PK],
            responses={"200": {"description": "OK", "content": _content(WITH_RISK)}},
        )
    },
    "/api/v1/releases/{pk}/cancel/": {
        "post": _operation(
            "Cancel a queued release (owner)", parameters=[PK], errors=("400", "404")
        )
    },
    "/api/v1/releases/{pk}/files/{filename}": {
        "get": _operation(
            "One file of the public package", parameters=[PK, FILENAME], responses=_file("File")
        )
    },
    "/api/v1/releases/{pk}/package.zip": {
        "get": _operation(
            "The public package as a zip", parameters=[PK], responses=_file("Zip archive")
        )
    },
    "/api/v1/datasets/{pk}/analysts/": {
        "get": _operation(
            "Analysts, their allotments and the second approver (owner)", parameters=[PK]
        ),
        "post": _operation(
            "Invite an analyst with an allotment reserved from the budget ({email, epsilon, "
            "delta}), revoke one and return its allotment ({revoke: id}), or name the second "
            "approver ({second_approver}) (owner)",
            parameters=[PK],
            body=_object_body("email", "epsilon", "delta", "revoke", "second_approver"),
            responses=_json("Invited", "201") | _json("Revoked, or the rule saved"),
            errors=("400", "404", "415"),
        ),
    },
    "/api/v1/datasets/{pk}/requests/": {
        "get": _operation("Analysts' requests you may see", parameters=[PK]),
        "post": _operation(
            "Request a release within your allotment; spends nothing until approved (analyst)",
            parameters=[PK, IDEMPOTENCY_KEY],
            body=REQUEST_BODY,
            responses=_json("The new request", "201") | _json("A repeated key: the first one"),
            errors=("400", "404", "409", "415"),
        ),
    },
    "/api/v1/datasets/{dataset_pk}/workspace/": {
        "get": _operation(
            "The dataset's public metadata and your allotment (analyst)", parameters=[DATASET_PK]
        )
    },
    "/api/v1/datasets/{dataset_pk}/requests/preview/": {
        "get": _operation(
            "Expected accuracy, allotment left and risk of a request; spends nothing (analyst)",
            parameters=[DATASET_PK, *PREVIEW_PARAMETERS],
            responses={"200": {"description": "OK", "content": _content(WITH_RISK)}},
            errors=("400", "404", "409"),
        )
    },
    "/api/v1/requests/{pk}/": {
        "get": _operation(
            "A request: its settings, decisions, expected accuracy, budget impact, risk, release",
            parameters=[PK],
        )
    },
    "/api/v1/requests/{pk}/decide/": {
        "post": _operation(
            "Approve or decline a waiting request, with a note (owner, second approver)",
            parameters=[PK],
            body=_object_body("decision", "note"),
            errors=("400", "404", "415"),
        )
    },
    "/api/v1/requests/{pk}/withdraw/": {
        "post": _operation(
            "Withdraw your waiting request (analyst)", parameters=[PK], errors=("400", "404")
        )
    },
    "/api/v1/requests/{pk}/package.zip": {
        "get": _operation(
            "The approved request's public package as a zip",
            parameters=[PK],
            responses=_file("Zip archive"),
        )
    },
    "/api/v1/requests/{pk}/files/{filename}": {
        "get": _operation(
            "One file of the approved request's public package",
            parameters=[PK, FILENAME],
            responses=_file("File"),
        )
    },
    "/api/v1/audit/": {
        "get": _operation(
            "Audit events you may see, newest first, 100 a page",
            parameters=[
                {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
                for name in ("page", "action", "dataset", "user", "release", "date_from", "date_to")
            ],
            errors=("400",),
        )
    },
}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "DP Portal API",
        "version": "1",
        "description": "Everything a custodian does in the portal, with a per-user API token "
        "(create one on the API tokens page). Every refusal is JSON: "
        '{"error": "...", "errors": {...}}. Without a valid token: 401; too many refused '
        "tokens from one address: 429.",
    },
    "security": [{"token": []}],
    "paths": PATHS,
    "components": {
        "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Error": ERROR, "Risk": RISK},
    },
}


@login_not_required
@require_GET
def openapi_json(request):
    """The description is public: it holds no data, only the shape of the API."""
    return JsonResponse(document())


def document() -> dict:
    """The OpenAPI document, with one release body per kind of release in the catalogue."""
    schemas = {**DOCUMENT["components"]["schemas"], **release_schemas()}
    return {**DOCUMENT, "components": {**DOCUMENT["components"], "schemas": schemas}}


def release_schemas() -> dict:
    """`Mechanism` (every catalogue name) and `Release`: the new-release form's fields, one
    body per kind with its own settings (`Kind.form_fields`)."""
    bodies = []
    for kind in all_kinds():
        properties = {
            "mechanism": {"const": kind.name, "description": kind.title},
            "columns": {"type": "array", "items": {"type": "string"}},
            "epsilon": {"type": "string", "description": "a decimal, such as 0.5"},
            "delta": {"type": "string", "description": "a decimal; 0 when left out"},
            "confirm": {
                "type": "boolean",
                "description": "true to spend although the accuracy preview warns (the "
                "estimate's accuracy.warnings); without it such a release is refused",
            },
        }
        properties |= {name: field_schema(field) for name, field in kind.form_fields().items()}
        bodies.append(
            {
                "title": kind.title,
                "type": "object",
                "required": ["mechanism", "columns", "epsilon"],
                "properties": properties,
            }
        )
    names = [kind.name for kind in all_kinds()]
    return {"Mechanism": {"type": "string", "enum": names}, "Release": {"oneOf": bodies}}


def field_schema(field: forms.Field) -> dict:
    """The JSON schema of one form field, with its label and help as description."""
    description = " ".join(str(t) for t in (field.label, field.help_text) if t)
    schema: dict = {"description": description}
    choices = [value for value, _ in getattr(field, "choices", ())]
    if isinstance(field, forms.MultipleChoiceField):
        schema |= {"type": "array", "items": {"enum": [str(c) for c in choices]}}
    elif isinstance(field, forms.TypedChoiceField):
        schema["enum"] = choices
    elif isinstance(field, forms.ChoiceField):
        schema["enum"] = [str(c) for c in choices]
    elif isinstance(field, forms.IntegerField):
        schema["type"] = "integer"
    elif isinstance(field, forms.FloatField):
        schema["type"] = "number"
    else:
        schema["type"] = "string"
    return schema
