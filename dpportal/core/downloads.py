"""Responses that hand the browser a file: the one place a download's headers are set.

Every download is marked `nosniff`, so a browser never reads a CSV or a text file as HTML.
"""

from collections.abc import Iterable
from typing import TypeVar

from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase

CONTENT_TYPES = {
    ".csv": "text/csv; charset=utf-8",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".pdf": "application/pdf",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
Response = TypeVar("Response", bound=HttpResponseBase)


def content_type_for(filename: str) -> str:
    """The content type of a package file by its suffix; unknown suffixes download as bytes."""
    return CONTENT_TYPES.get(filename[filename.rfind(".") :], "application/octet-stream")


def attachment(
    content: bytes, filename: str, content_type: str, *, inline: bool = False
) -> HttpResponse:
    """`content` as a file named `filename`: saved by the browser, or shown if `inline`."""
    return _named(HttpResponse(content, content_type=content_type), filename, inline=inline)


def streamed_attachment(
    chunks: Iterable[bytes], size: int, filename: str, content_type: str
) -> StreamingHttpResponse:
    """A large file sent in pieces as they are read (never held whole in memory)."""
    response = StreamingHttpResponse(chunks, content_type=content_type)
    response["Content-Length"] = str(size)
    return _named(response, filename, inline=False)


def _named(response: Response, filename: str, *, inline: bool) -> Response:
    how = "inline" if inline else "attachment"
    response["Content-Disposition"] = f'{how}; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response
