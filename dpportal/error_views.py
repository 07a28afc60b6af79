"""Error pages with words: what happened and what to do (templates/400.html ... 500.html).

Django's own handlers render 403.html, 404.html and 500.html; this module replaces the 400
handler so that a request body over DATA_UPLOAD_MAX_MEMORY_SIZE gets a 413 page, and a form
with too many fields says so instead of a bare "Bad Request (400)".
"""

from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.shortcuts import render


def bad_request(request, exception):
    if isinstance(exception, RequestDataTooBig):
        return render(request, "413.html", status=413)
    if isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
        reason = "The form sent more fields or files than the server accepts, so nothing was saved."
    else:
        reason = "The server could not understand the request, so nothing was done."
    return render(request, "400.html", {"reason": reason}, status=400)
