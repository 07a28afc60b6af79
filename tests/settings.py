"""Settings for the test suite: production settings with a throwaway data folder and broker queue.

Values go into os.environ so that worker processes started by the tests inherit them.
"""

import os
import tempfile
import uuid

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-" + "x" * 40)
# One throwaway data folder and one broker queue per pytest process, created by it and removed at
# its exit. A pytest-xdist worker gets its own rather than its controller's; processes a test
# starts (Celery workers, servers) inherit their pytest process's, as they carry the same session.
session = os.environ.get("PYTEST_XDIST_WORKER", "main")
if os.environ.get("DPPORTAL_TEST_SESSION") != session:
    os.environ["DPPORTAL_TEST_SESSION"] = session
    os.environ["DPPORTAL_DATA_DIR"] = tempfile.mkdtemp(prefix=f"dpportal-test-{session}-")
    os.environ["DPPORTAL_TEST_DATA_DIR_OWNER_PID"] = str(os.getpid())
    os.environ["DPPORTAL_CELERY_QUEUE"] = f"test-{uuid.uuid4().hex[:12]}"
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DJANGO_SECURE_SSL_REDIRECT", "0")
# Most releases a test makes are never downloaded: their zip (a PDF report made by WeasyPrint, a
# workbook) is built on first download instead, by the same code. That was 9% of the suite's CPU.
# The tests of the prebuild itself turn it on (the `prebuild_packages` fixture).
os.environ.setdefault("DPPORTAL_PREBUILD_PACKAGES", "0")

from dpportal.settings import *  # noqa: E402,F403

STORAGES["staticfiles"] = {  # noqa: F405  (no collectstatic manifest in tests)
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast test logins
STATIC_ROOT = DATA_DIR / "static"  # noqa: F405
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True
# Look static files up per request instead of listing every finder's files each time a test
# client or live server builds the middleware stack (6 s of the suite's CPU).
WHITENOISE_AUTOREFRESH = True
