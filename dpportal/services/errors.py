"""The one exception the services raise for the user to read."""


class ServiceError(Exception):
    """A refusal to show the user as is: says what is wrong and what to do instead."""

    def __init__(self, message, problems=None):
        super().__init__(message)
        self.problems = problems or [message]  # one line each, for forms that list them
