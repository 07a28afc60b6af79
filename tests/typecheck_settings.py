"""Settings that mypy's django-stubs plugin imports to learn the models: no data folder, no I/O.

The production settings refuse to load without a secret key; the type checker needs none.
"""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "typecheck-only-placeholder-" + "x" * 40)

from dpportal.settings import *  # noqa: E402,F403
