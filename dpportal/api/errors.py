"""Every API answer is JSON, failures included: {"error": "<what happened and what to do>"}.

Refusals the endpoints foresee are turned into JSON by `auth.api_endpoint`. This module covers
the rest, for every path under API_PREFIX:

- `ApiErrorMiddleware` (a view raised): a lost database connection answers 503 with
  Retry-After, a JSON body nested too deeply for the parser 400, PermissionDenied 403 with its
  message, any other exception 500, each logged as Django logs a server error;
- `error_response` also serves the portal's 400, 404 and 500 handlers (dpportal/core/error_views.py)
  for what fails outside a view (a middleware, an address that names no endpoint).
"""

import logging

from django.core.exceptions import PermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import JsonResponse

API_PREFIX = "/api/"
RETRY_AFTER_SECONDS = 30
DATABASE_DOWN = (
    "The portal's database is not answering right now, so nothing was done; try again in a "
    "minute. If it keeps happening, tell the portal's operator."
)
SERVER_ERROR = (
    "The server failed while answering this request, so nothing was done; the problem was "
    "logged for the portal's operator. Try again; if it keeps happening, tell the operator the "
    "time and the address you called."
)
TOO_DEEP = (
    "The request body is nested too deeply to be read (arrays or objects inside each other "
    "hundreds of levels deep); send a flat JSON object as the API description shows."
)
NOT_FOUND = "No API endpoint has this address; the endpoints are listed in /api/v1/openapi.json."
BAD_REQUEST = "The request could not be understood, so nothing was done; check how it is sent."

logger = logging.getLogger("django.request")


def is_api(request) -> bool:
    return request.path.startswith(API_PREFIX)


def error_response(status: int, message: str, **headers) -> JsonResponse:
    response = JsonResponse({"error": message}, status=status)
    response["Cache-Control"] = "no-store, private"
    for name, value in headers.items():
        response[name.replace("_", "-")] = value
    return response


def exception_response(request, exception: BaseException, *, log=True) -> JsonResponse:
    """The JSON answer to an exception no endpoint handled; a failure is logged (unless `log`
    is false: Django's 500 handler logs it itself)."""
    if isinstance(exception, PermissionDenied):
        return error_response(403, str(exception) or "You may not do this, so nothing was done.")
    if isinstance(exception, RecursionError):
        return error_response(400, TOO_DEEP)
    if log:  # as Django logs a server error, with the traceback
        logger.error("API error: %s %s", request.method, request.path, exc_info=exception)
    if isinstance(exception, OperationalError | InterfaceError):
        return error_response(503, DATABASE_DOWN, Retry_After=str(RETRY_AFTER_SECONDS))
    return error_response(500, SERVER_ERROR)


class ApiErrorMiddleware:
    """Answer an exception raised by a view under API_PREFIX with JSON, never an HTML page."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not is_api(request):
            return None
        return exception_response(request, exception)
