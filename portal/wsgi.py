"""WSGI entry point. The portal runs under ASGI (portal/web.py), which serves this same
handler for HTTP on a pool of threads (portal/http_threads.py)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()
