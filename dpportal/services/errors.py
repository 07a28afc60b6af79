"""The one exception the services raise for the user to read."""


class ServiceError(Exception):
    """A refusal to show the user as is: says what is wrong and what to do instead."""

    def __init__(self, message, problems=None):
        super().__init__(message)
        self.problems = problems or [message]  # one line each, for forms that list them


class DuplicateSubmission(ServiceError):
    """The form's one-time token was already used: `release` is the release it made."""

    def __init__(self, release):
        super().__init__("This request was already submitted; here is its release.")
        self.release = release


class DuplicateRequest(ServiceError):
    """The request form's one-time token was already used: `request` is the request it made."""

    def __init__(self, request):
        super().__init__("This request was already submitted; here it is.")
        self.request = request


class ClampingNotAccepted(ServiceError):
    """Confirmation held back: bounds or categories move a large share of a column's values
    (`clamping`, the owner-only lines of `schema_checks.clamping_lines`); nothing was saved."""

    def __init__(self, clamping: list[dict]):
        self.clamping = clamping
        super().__init__(" ".join(entry["message"] for entry in clamping))
