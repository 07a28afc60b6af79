"""Token authentication and the error rules every API endpoint shares.

- A request is authenticated only by `Authorization: Bearer <token>` (`services.tokens`). The
  browser's session cookie never authenticates an API request, so a cross-site page cannot
  drive the API with a signed-in custodian's cookie.
- Token requests are exempt from CSRF (a browser never adds that header to a cross-site
  request). Requests without a token are CSRF-checked like every page (403 without the CSRF
  token), and then refused (401) anyway.
- A valid token always works: it is looked up before any limit and never counted, so other
  people's failures and a cache that is down never refuse it. Refused tokens count against the
  client address on the same counter and limit as failed sign-ins (`login_limit`): past
  DPPORTAL_LOGIN_MAX_FAILURES_PER_ADDRESS, 429 (and no more audit events from that address).
- Every refusal is JSON: {"error": "...", "errors": {field: [...]}} with a 4xx status, never
  an HTML page or a traceback.
"""

import functools
from collections.abc import Callable

from django import forms
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import BadRequest, RequestDataTooBig, SuspiciousOperation
from django.core.files.uploadhandler import FileUploadHandler
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.http.multipartparser import MultiPartParserError
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from dpportal import services
from dpportal.access.login_limit import CACHE_ERRORS, client_address, count_refused_token
from dpportal.signals import client_address as audit_address
from mechanisms.errors import parsed_json

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MISSING_CREDENTIAL = (
    "This endpoint needs an API token: send the header 'Authorization: Bearer <token>'. "
    "Create a token on the portal's API tokens page; the browser's sign-in is not used here."
)
REFUSED_CREDENTIAL = (
    "The API token is not valid or was revoked; create a new one on the API tokens page."
)


class ApiError(Exception):
    """A refusal with its HTTP status, message and (optionally) the errors per field."""

    def __init__(self, status: int, message: str, errors: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors or {}


def error(status: int, message: str, errors: dict | None = None, **headers) -> JsonResponse:
    body: dict = {"error": message}
    if errors:
        body["errors"] = errors
    response = JsonResponse(body, status=status)
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


_ENDPOINT_METHODS: dict[Callable[..., HttpResponseBase], tuple[str, ...]] = {}


def endpoint_methods(endpoint: Callable[..., HttpResponseBase]) -> tuple[str, ...]:
    """The HTTP methods an API endpoint answers (the OpenAPI test checks its document)."""
    return _ENDPOINT_METHODS[endpoint]


def api_endpoint(*methods: str):
    """Wrap a view: authenticate its token, check its method, turn refusals into JSON."""

    def decorate(view):
        @login_not_required
        @csrf_exempt
        @functools.wraps(view)
        def endpoint(request, *args, **kwargs):
            response = _authenticate(request)
            if response is None and request.method not in methods:
                response = error(405, f"Use {' or '.join(methods)} here.", Allow=", ".join(methods))
            if response is None:
                response = _call(view, request, *args, **kwargs)
            response["Cache-Control"] = "no-store, private"
            return response

        _ENDPOINT_METHODS[endpoint] = methods
        return endpoint

    return decorate


def _call(view, request, *args, **kwargs):
    try:
        return view(request, *args, **kwargs)
    except ApiError as exc:
        return error(exc.status, exc.message, exc.errors)
    except Http404 as exc:
        return error(404, str(exc) or "Not found.")
    except services.ServiceError as exc:
        return error(400, str(exc), {"__all__": list(exc.problems)})
    except RequestDataTooBig:
        return error(413, "The request body is too large; send less at once.")
    except (SuspiciousOperation, MultiPartParserError, BadRequest) as exc:
        return error(400, f"The request could not be read ({exc}); check how it is encoded.")


def _authenticate(request):
    """None once request.user is the token's user; else the refusal to send."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return _without_token(request)
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return error(401, MISSING_CREDENTIAL, WWW_Authenticate="Bearer")
    address, secret = client_address(request), secret.strip()
    user = services.token_authenticate(secret)
    if user is not None:
        request.user = user
        return None
    try:
        blocked = count_refused_token(address)
    except CACHE_ERRORS:
        blocked = False  # refused anyway; only the 429 after many refusals needs the counter
    if blocked:  # no audit event either: one address cannot flood the audit log
        return error(
            429, "Too many refused tokens from this address; wait and try again.", Retry_After="900"
        )
    services.token_refusal_record(secret, remote_addr=audit_address(request))
    return error(401, REFUSED_CREDENTIAL, WWW_Authenticate='Bearer error="invalid_token"')


def _without_token(request):
    """No token: CSRF-check an unsafe request as any page would (403 without it), then 401."""
    if request.method not in SAFE_METHODS:
        request.upload_handlers = [_DiscardFiles(request)]  # never store an unauthenticated file
        refused = CsrfViewMiddleware(_not_called).process_view(request, _not_called, (), {})
        if refused is not None:
            return error(
                403,
                "CSRF check failed, and the API needs an API token anyway: " + MISSING_CREDENTIAL,
            )
    return error(401, MISSING_CREDENTIAL, WWW_Authenticate="Bearer")


def _not_called(request: HttpRequest) -> HttpResponse:
    """The CSRF check's next handler and view (one that is not CSRF-exempt): `process_view`
    reads the view's flag and calls neither."""
    return HttpResponse(status=204)


class _DiscardFiles(FileUploadHandler):
    """Read past a file field of a refused request without keeping any of its bytes."""

    def receive_data_chunk(self, raw_data, start):
        return None

    def file_complete(self, file_size):
        return None


def read_json(request) -> dict:
    """The request's JSON object, or an ApiError saying what is wrong with it."""
    if request.content_type != "application/json":
        raise ApiError(415, "Send a JSON object with the header Content-Type: application/json.")
    try:
        data = parsed_json(request.body or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The request body must be a JSON object ({...}).")
    return data


def form_data(data: dict, allowed) -> QueryDict:
    """A JSON object as the form data a page would send: lists become repeated fields,
    true/false a ticked/unticked box. Unknown fields are refused, never silently ignored; so
    is a list of several values for a field that takes one (its form would keep the last)."""
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ApiError(
            400,
            f"Unknown field(s): {', '.join(unknown)}. "
            f"The fields are: {', '.join(sorted(allowed))}.",
        )
    query = QueryDict(mutable=True)
    for key, value in data.items():
        items = value if isinstance(value, list) else [value]
        if len(items) > 1 and not _takes_several(allowed, key):
            raise ApiError(400, f"{key}: give one value, not a list of {len(items)}.")
        texts = []
        for item in items:
            if isinstance(item, bool):
                texts += ["on"] if item else []
            elif isinstance(item, int | float | str):
                texts.append(str(item))
            elif item is not None:
                raise ApiError(
                    400, f"{key}: give a number, a text, true/false, or a list of those."
                )
        query.setlist(key, texts)
    return query


def _takes_several(allowed, key: str) -> bool:
    """Whether the form field `key` of `allowed` (a form's fields, or plain names) takes
    several values."""
    field = allowed.get(key) if isinstance(allowed, dict) else None
    return field is None or isinstance(field, forms.MultipleChoiceField)


def form_errors(form) -> dict:
    """A form's errors by field ("__all__" for the whole request), as lists of sentences."""
    return {name: [str(e) for e in errors] for name, errors in form.errors.items()}


def invalid(form) -> ApiError:
    return ApiError(400, "The request is not valid; see errors.", form_errors(form))
