"""Django settings, driven entirely by the environment (see README "Configuration").

Bad values fail at start-up with ``ImproperlyConfigured``. Without ``DATABASE_URL`` /
``REDIS_URL`` the settings point at the embedded PostgreSQL and Redis that
``make run`` starts under ``.devdata/``.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.env import (
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_list,
    env_networks,
    env_str,
    env_url,
)
from portal.auth.config import ldap_settings, oidc_settings
from scheduling.backends import BACKENDS

BASE_DIR = Path(__file__).resolve().parent.parent

EMBEDDED_DATABASE_URL = "postgres://postgres@127.0.0.1:55432/portal"
EMBEDDED_REDIS_URL = "redis://127.0.0.1:56379/0"

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"  # noqa: S105
elif not DEBUG and (len(SECRET_KEY) < 50 or SECRET_KEY.startswith("dev-only")):
    raise ImproperlyConfigured("SECRET_KEY must be a random string of at least 50 characters")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

DATABASE_URL = env_url("DATABASE_URL", ("postgres", "postgresql", "pgsql")) or EMBEDDED_DATABASE_URL
REDIS_URL = env_url("REDIS_URL", ("redis", "rediss")) or EMBEDDED_REDIS_URL

SCHEDULING_BACKEND = env_choice("SCHEDULING_BACKEND", "simulator", tuple(BACKENDS))
SCHEDULER_CYCLE_SECONDS = env_float("SCHEDULER_CYCLE_SECONDS", 5.0, minimum=0.5, maximum=3600)
# Virtual seconds the simulator advances per real second (demo: minutes per second).
SIMULATOR_SPEED = env_float("SIMULATOR_SPEED", 60.0, minimum=0.0, maximum=86400)
# The web server: uvicorn processes (WEB_WORKERS, read by make run) with WEB_THREADS
# threads each for HTTP requests (portal/http_threads.py).
WEB_THREADS = env_int("WEB_THREADS", 4, minimum=1, maximum=64)
# Request bodies above this are refused with 413 before they are read (portal/http_threads.py);
# Django's own form-parsing limit is the same, so the test client and the server agree.
REQUEST_MAX_BYTES = env_int("REQUEST_MAX_BYTES", 1024 * 1024, minimum=64 * 1024, maximum=1 << 30)
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_MAX_BYTES
# The most active (pending or running) jobs one person may have: a submission past it is
# refused (Slurm's MaxSubmitJobs per user; a job array counts each task). 0: no bound.
ACTIVE_JOBS_PER_PERSON = env_int("ACTIVE_JOBS_PER_PERSON", 5_000, minimum=0, maximum=10_000_000)
PREEMPTION_GRACE_SECONDS = env_float("PREEMPTION_GRACE_SECONDS", 300.0, minimum=0, maximum=86400)
# The TLS-terminating proxy in front (docker-compose.yml's `proxy`): its addresses or networks.
# The web server (portal/web.py) takes X-Forwarded-For and X-Forwarded-Proto from these
# peers only, and from no one when this is empty (docs/deploy.md, "TLS and the proxy").
FORWARDED_ALLOW_IPS = env_networks("FORWARDED_ALLOW_IPS")
# Retention (portal/retention.py, beat entry `retention`): days kept; 0 keeps rows forever.
# Job events live as long as their job, and jobs are kept.
_FOREVER = 36500  # days: the largest period accepted
RETENTION_CYCLE_DAYS = env_int("RETENTION_CYCLE_DAYS", 14, minimum=0, maximum=_FOREVER)
RETENTION_RESOLVED_ALERT_DAYS = env_int(
    "RETENTION_RESOLVED_ALERT_DAYS", 90, minimum=0, maximum=_FOREVER
)
RETENTION_AUDIT_DAYS = env_int("RETENTION_AUDIT_DAYS", 365, minimum=0, maximum=_FOREVER)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served locally (no CDN)
    "channels",
    "core",
    "demo",
    "bench",
    "quotas",
    "scheduling",
    "monitoring",
    "portal.apps.PortalShellConfig",  # the shell's commands (prune, check_health) and tasks
    "portal.auth.apps.PortalAuthConfig",  # directory accounts, sweep task, sync_directory
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.security.SecurityHeadersMiddleware",  # CSP, Permissions-Policy (docs/security.md)
    "core.security.ControlCharacterMiddleware",  # 400 for NUL & co. in path, query, form
    "core.security.ApiFieldOnceMiddleware",  # 400 for an API form field given twice
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "core.security.LoginRateLimitMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # With OpenID Connect on: asks the provider again whether a person it signed in still
    # is, at a page load every OIDC_RECHECK_SECONDS (portal/auth/oidc.py); off otherwise.
    "portal.auth.oidc.SessionCheck",
    "core.timezones.TimeZoneMiddleware",  # pages in the viewer's zone; the API stays UTC
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.clock.ClockMiddleware",  # one request, one instant on the cluster clock
    "portal.errors.DebugErrorPagesMiddleware",  # the portal's 404/500 pages with DEBUG on too
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = "portal.wsgi.application"

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
                "portal.context_processors.role",
                "portal.context_processors.cluster_clock",  # the header's clock and badge
            ],
        },
    },
]

DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
# A pool per process (psycopg_pool). Under ASGI every request runs in a new thread, so
# per-thread connections (CONN_MAX_AGE) would open a PostgreSQL connection per request.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # a pooled connection is checked when lent
DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
    "min_size": 1,
    "max_size": env_int("DB_POOL_MAX_SIZE", 16, minimum=1, maximum=500),
    "timeout": 10,
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Argon2id first, at OWASP's 19 MiB / 2 passes / 1 lane (core/hashers.py): ~0.1 s a check
# here where PBKDF2 at 1,000,000 iterations, and Django's own Argon2 parameters (100 MiB,
# 8 lanes), took 0.5-1.2 s of a sign-in on the shared demo machine (docs/benchmarks.md).
# PBKDF2 and default-Argon2 hashes still verify and are rewritten at the next sign-in.
PASSWORD_HASHERS = [
    "core.hashers.OwaspArgon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Sign-in with the organization's identity (docs/deploy.md, "Identity"; portal/auth/):
# LDAP when LDAP_SERVER_URI is set, OpenID Connect when OIDC_ISSUER is; neither by default.
# Local accounts come first and always work (break-glass admins, the demo users).
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.ModelBackend"]
_identity = {**ldap_settings(), **oidc_settings()}
globals().update(_identity)  # LDAP_*/AUTH_LDAP_* and OIDC_*/OIDC_RP_* (portal/auth/config.py)
if _identity["LDAP_ENABLED"]:
    AUTHENTICATION_BACKENDS.append("portal.auth.ldap_backend.PortalLDAPBackend")
if _identity["OIDC_ENABLED"]:
    AUTHENTICATION_BACKENDS.append("portal.auth.oidc.PortalOIDCBackend")
# mozilla-django-oidc's views (/oidc/), answering 404 while OpenID Connect is off.
OIDC_AUTHENTICATE_CLASS = "portal.auth.oidc.SignInStart"
OIDC_CALLBACK_CLASS = "portal.auth.oidc.SignInCallback"
LOGIN_REDIRECT_URL_FAILURE = LOGIN_URL

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Dates and times Django writes itself (the admin) in the pages' shape: 2026-12-01 03:10 UTC.
FORMAT_MODULE_PATH = ["portal.formats"]

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = DEBUG

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        # The rate limits (core/security.py) read it on logins and token calls: a frozen
        # Redis must cost a second and fail open, not hang the request.
        "OPTIONS": {
            "socket_connect_timeout": 1,
            "socket_timeout": 1,
            "pool_class": "core.redis_pool.SharedConnectionPool",
        },
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # socket_timeout must outwait channels-redis's 5 s blocking read, or quiet live
        # sockets are closed (1011); 100+ viewers need more than 100 pooled connections.
        "CONFIG": {
            "hosts": [
                {"address": REDIS_URL, "socket_timeout": 10, "socket_connect_timeout": 5,
                 "max_connections": 1000}
            ]
        },
    }
}  # fmt: skip

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.security.RateLimitedTokenAuthentication",  # 429 after many bad tokens
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "core.security.SafeJSONParser",  # deeply nested JSON is a 400, not a 500
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["core.filters.StrictFilterBackend"],  # 400 on unknown filters
    "DEFAULT_PAGINATION_CLASS": "core.security.BoundedLimitOffsetPagination",  # no 500s
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU cluster scheduling portal API",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Every 4xx the API can answer, in the portal's error shapes (core/api.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.document_errors",
    ],
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "scheduling.models.Job.State",
        "NodeStateEnum": "scheduling.models.Node.State",
        "NodeHealthEnum": "scheduling.models.Node.Health",
        "TierEnum": "quotas.models.Tier",
    },
}

# Production hardening (active when DEBUG is off; `manage.py check --deploy` is clean).
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
# Lax, not Strict: a link to a job page from mail or chat must arrive signed in.
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Probes from a load balancer or an orchestrator speak plain HTTP to the process.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(env_float("SECURE_HSTS_SECONDS", 31536000, minimum=0))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    # No SECURE_PROXY_SSL_HEADER: Django would take X-Forwarded-Proto from anyone who
    # reaches the port. The web server takes it from FORWARDED_ALLOW_IPS only and passes
    # the scheme on (request.is_secure()); Host is passed through by the proxy unchanged.

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
