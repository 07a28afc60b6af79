"""Django settings for DP Portal, read from the environment.

Defaults work on a bare machine (SQLite file and uploads under ./var, Redis on localhost).
Production (DJANGO_DEBUG unset or 0) refuses to start without a real DJANGO_SECRET_KEY.
Every variable is listed in docs/operating.md (Configuration).
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


DEBUG = env_bool("DJANGO_DEBUG", False)
_DEV_SECRET = "insecure-development-key-do-not-use-in-production"  # noqa: S105 (DEBUG only)
SECRET_KEY = env("DJANGO_SECRET_KEY") or (_DEV_SECRET if DEBUG else "")
if not SECRET_KEY or (not DEBUG and SECRET_KEY == _DEV_SECRET) or len(SECRET_KEY) < 32:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is missing or too short (need 32+ random characters). Set it, e.g. "
        "DJANGO_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
        "or set DJANGO_DEBUG=1 for local development."
    )

ALLOWED_HOSTS = [h.strip() for h in env("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",")]
CSRF_TRUSTED_ORIGINS = [o for o in env("DJANGO_CSRF_TRUSTED_ORIGINS").split(",") if o]

# Runtime files: database (SQLite default), private dataset storage, release artifacts.
DATA_DIR = Path(env("DPPORTAL_DATA_DIR", str(BASE_DIR / "var")))
DATASET_STORAGE_DIR = Path(env("DPPORTAL_STORAGE_DIR", str(DATA_DIR / "storage")))
MAX_UPLOAD_BYTES = env_int("DPPORTAL_MAX_UPLOAD_MB", 200) * 1024 * 1024
# Keep the uploaded file itself beside its validated Parquet copy (releases read only the copy).
DPPORTAL_KEEP_ORIGINAL_UPLOADS = env_bool("DPPORTAL_KEEP_ORIGINAL_UPLOADS", True)
# Object storage (docs/deployment-object-storage.md): with DPPORTAL_S3_BUCKET set, datasets (raw
# upload, Parquet copy) and release files (outputs, zips, utility reports) are private objects in
# that S3-compatible bucket instead of files under the data folder. Keys: the standard AWS
# variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or an instance role. DPPORTAL_S3_SSE=0
# only for a store without server-side encryption (with it on, such a store refuses the writes).
DPPORTAL_S3_BUCKET = env("DPPORTAL_S3_BUCKET")
DPPORTAL_S3_ENDPOINT_URL = env("DPPORTAL_S3_ENDPOINT_URL")  # empty: AWS itself
DPPORTAL_S3_REGION = env("DPPORTAL_S3_REGION", "us-east-1")
DPPORTAL_S3_SSE = env_bool("DPPORTAL_S3_SSE", True)
# A privacy budget belongs to the data: uploads of the same table content share one. Off: only
# one owner's uploads share (nothing tells an owner that another holds the same content). On:
# uploads by any owner share, for a portal used by one organisation.
DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS = env_bool(
    "DPPORTAL_SHARE_FINGERPRINTS_ACROSS_OWNERS", False
)
# The schema page's "estimate for me": the share of a dataset's total ε (and δ) one DP estimate
# of a column's bounds or categories spends, in percent.
DPPORTAL_ESTIMATE_PERCENT = env("DPPORTAL_ESTIMATE_PERCENT", "1")
# Tables that stay where they live (dpportal/sources/tables.py). DPPORTAL_SOURCE_ROOTS: the folders
# custodians may register local Parquet files from, separated by ":", each `NAME=FOLDER` (all of
# it the custodian NAME's) or `FOLDER` (per-custodian folders FOLDER/NAME); none: no local paths
# (dpportal/sources/paths.py). DPPORTAL_SOURCE_HOSTS: the PostgreSQL servers and object-storage
# endpoints sources may be on, separated by ",", each `host`, `host:port` or a socket folder;
# none (the default): no such source (dpportal/sources/reach.py). DPPORTAL_CREDENTIALS_KEY: the
# Fernet key that encrypts their connection credentials at rest; without it one is derived from
# SECRET_KEY (development only: rotating SECRET_KEY then makes stored credentials unreadable).
DPPORTAL_SOURCE_ROOTS = [p for p in env("DPPORTAL_SOURCE_ROOTS").split(":") if p.strip()]
DPPORTAL_SOURCE_HOSTS = [h.strip() for h in env("DPPORTAL_SOURCE_HOSTS").split(",") if h.strip()]
DPPORTAL_CREDENTIALS_KEY = env("DPPORTAL_CREDENTIALS_KEY")
# Tables in the Spark catalog custodians may register (the `spark` engine, DPPORTAL_SPARK_REMOTE):
# entries `NAME=TABLE` separated by ",", TABLE as `db.table` (or `catalog.db.table`); one per
# custodian and table. None (the default): no catalog table (dpportal/sources/reach.py).
DPPORTAL_SPARK_TABLES = [t.strip() for t in env("DPPORTAL_SPARK_TABLES").split(",") if t.strip()]
# The Ed25519 key that signs datasets' public records (dpportal/records, docs/public-record.md):
# a PEM private key, or the path of a file holding one. Without it one is derived from SECRET_KEY
# (development only: `manage.py check --deploy` warns, dpportal.W020).
DPPORTAL_SIGNING_KEY = env("DPPORTAL_SIGNING_KEY")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "dpportal",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "dpportal.core.middleware.ContentSecurityPolicyMiddleware",
    "dpportal.api.errors.ApiErrorMiddleware",  # an API error is JSON, never an HTML page
]

ROOT_URLCONF = "dpportal.urls"
WSGI_APPLICATION = "dpportal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'dpportal.sqlite3'}",
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions take the write lock at BEGIN, so budget checks serialise.
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE", "timeout": 20}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# Login rate limiting (dpportal/access/login_limit.py). Failure counters live in the cache: set
# DPPORTAL_CACHE_URL (e.g. redis://redis:6379/1) so that all web processes share them; without
# it each process counts on its own, and `check --deploy` reports dpportal.E001 (error) unless
# DPPORTAL_ALLOW_LOCAL_CACHE=1 says this deployment runs a single web process.
LOGIN_MAX_FAILURES = env_int("DPPORTAL_LOGIN_MAX_FAILURES", 5)
LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("DPPORTAL_LOGIN_MAX_FAILURES_PER_ADDRESS", 30)
LOGIN_LOCKOUT_SECONDS = env_int("DPPORTAL_LOGIN_LOCKOUT_SECONDS", 900)
DPPORTAL_ALLOW_LOCAL_CACHE = env_bool("DPPORTAL_ALLOW_LOCAL_CACHE", False)
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": env("DPPORTAL_CACHE_URL"),
        # A Redis that is down or unreachable refuses logins within 2 s, never hangs.
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
    if env("DPPORTAL_CACHE_URL")
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}
# Addresses (IPs or CIDR networks, comma-separated) of the reverse proxies in front of the
# portal. X-Forwarded-For is believed only on requests coming from one of them; empty (the
# default) means it is never believed and the client is REMOTE_ADDR (login_limit.client_address).
# Behind a TLS proxy it must be set (`check --deploy`: dpportal.E003); compose sets its network.
DPPORTAL_TRUSTED_PROXIES = [
    p.strip() for p in env("DPPORTAL_TRUSTED_PROXIES").split(",") if p.strip()
]
# Wide tables: the schema form posts 13 fields per column (dataset_forms.SchemaColumnForm) plus
# a few for the form set; ingest accepts up to 1000 columns. Django's default (1000) refused
# the schema of a table of more than about 250 numeric columns with a bare "Bad Request".
DATA_UPLOAD_MAX_NUMBER_FIELDS = 13 * 1000 + 100

LANGUAGE_CODE = "en-gb"
TIME_ZONE = env("DJANGO_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env("DJANGO_STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = DEBUG

# Security headers and cookies (see `manage.py check --deploy`).
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_AGE = env_int("DPPORTAL_SESSION_HOURS", 12) * 3600
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # plain-HTTP liveness probe from inside the network
if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Celery: JSON only, late acks so a killed worker's job is redelivered (the release itself
# guards against publishing twice), tasks enqueued only after the transaction commits.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("DPPORTAL_TASK_SOFT_TIME_LIMIT", 3600)
CELERY_TASK_TIME_LIMIT = env_int("DPPORTAL_TASK_TIME_LIMIT", 3900)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env_int("DPPORTAL_VISIBILITY_TIMEOUT", 4200),
    # Sweep for unacknowledged jobs of dead workers this often (kombu's default is ~100 s).
    "unacked_restore_interval": env_int("DPPORTAL_RESTORE_SWEEP_SECONDS", 10),
    "unacked_restore_throttle": 1,
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker that loses the broker reconnects until it is back, however long that takes (Celery's
# default gives up after 100 tries and the worker exits).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# A submission never waits long for a broker that is down: the job stays queued in the
# database and the reaper sends it once the broker is back.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 0.5,
}
CELERY_TASK_DEFAULT_QUEUE = env("DPPORTAL_CELERY_QUEUE", "celery")
# Long jobs (MWEM, supports larger than DPPORTAL_LONG_JOB_CELLS) get their own queue and workers.
DPPORTAL_CELERY_LONG_QUEUE = env("DPPORTAL_CELERY_LONG_QUEUE", f"{CELERY_TASK_DEFAULT_QUEUE}.long")
DPPORTAL_LONG_JOB_CELLS = env_int("DPPORTAL_LONG_JOB_CELLS", 100_000)
# A running release holds a lease renewed by a heartbeat; the reaper retries or fails a release
# whose lease lapsed (its worker died), and resends jobs the broker lost.
DPPORTAL_HEARTBEAT_SECONDS = env_int("DPPORTAL_HEARTBEAT_SECONDS", 10)
DPPORTAL_LEASE_SECONDS = env_int("DPPORTAL_LEASE_SECONDS", 60)
DPPORTAL_RELEASE_MAX_ATTEMPTS = env_int("DPPORTAL_RELEASE_MAX_ATTEMPTS", 3)
DPPORTAL_REAPER_SECONDS = env_int("DPPORTAL_REAPER_SECONDS", 15)
# Build each release's public zip (its PDF report and workbook included) right after the release,
# so the first download is immediate; otherwise it is built, by the same code, on first download.
DPPORTAL_PREBUILD_PACKAGES = env_bool("DPPORTAL_PREBUILD_PACKAGES", True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env("DJANGO_LOG_LEVEL", "INFO")},
}

# E-mail (invitations to audit a dataset): printed to the console unless configured.
EMAIL_BACKEND = env("DPPORTAL_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env("DPPORTAL_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("DPPORTAL_EMAIL_PORT", 25)
EMAIL_HOST_USER = env("DPPORTAL_EMAIL_USER")
EMAIL_HOST_PASSWORD = env("DPPORTAL_EMAIL_PASSWORD")
EMAIL_USE_TLS = env_bool("DPPORTAL_EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = env("DPPORTAL_EMAIL_FROM", "dp-portal@localhost")
