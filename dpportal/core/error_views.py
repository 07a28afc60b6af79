"""Error pages with words: what happened and what to do (templates/400.html ... 500.html).

Django's own handlers render 403.html, 404.html and 500.html; this module replaces the 400
handler so that a request body over DATA_UPLOAD_MAX_MEMORY_SIZE gets a 413 page, and a form
with too many fields says so instead of a bare "Bad Request (400)". Under the API's prefix the
400, 404 and 500 answers are JSON instead (dpportal/api/errors.py): an API error is never an
HTML page.
"""

import sys

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.shortcuts import render
from django.views import defaults

from dpportal.api import errors as api_errors


def bad_request(request, exception):
    if isinstance(exception, RequestDataTooBig):
        if api_errors.is_api(request):
            return api_errors.error_response(413, "The request body is too large; send less.")
        return render(request, "413.html", status=413)
    if isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
        reason = "The form sent more fields or files than the server accepts, so nothing was saved."
    else:
        reason = "The server could not understand the request, so nothing was done."
    if api_errors.is_api(request):
        return api_errors.error_response(400, reason)
    return render(request, "400.html", {"reason": reason}, status=400)


def page_not_found(request, exception):
    if api_errors.is_api(request):
        return api_errors.error_response(404, api_errors.NOT_FOUND)
    return defaults.page_not_found(request, exception)


def server_error(request):
    """Django calls this while it handles the exception, so sys.exc_info() names it: under the
    API a lost database connection answers 503, anything else 500, both JSON."""
    if api_errors.is_api(request):
        exception = sys.exc_info()[1]
        if exception is None:
            return api_errors.error_response(500, api_errors.SERVER_ERROR)
        return api_errors.exception_response(request, exception, log=False)
    return defaults.server_error(request)
