"""ASGI entry point: HTTP through Django's handler on a thread pool, websockets through Channels.

Run it with uvicorn (``make run``, docker-compose.yml): one process per core
(``WEB_WORKERS``), each serving HTTP on ``WEB_THREADS`` threads (portal/http_threads.py
says why not Django's ASGI handler) and any number of websockets on its event loop.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django_wsgi_app = get_wsgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from core.security import SameOriginWebsocket  # noqa: E402
from monitoring.routing import websocket_urlpatterns  # noqa: E402
from portal.http_threads import ThreadedWSGI  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": ThreadedWSGI(
            django_wsgi_app, threads=settings.WEB_THREADS, max_body=settings.REQUEST_MAX_BYTES
        ),
        # The host must be allowed, and the page's origin exactly this site's (scheme,
        # host and port), before the session is even looked up.
        "websocket": AllowedHostsOriginValidator(
            SameOriginWebsocket(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
    }
)
