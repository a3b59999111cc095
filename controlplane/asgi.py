"""ASGI entry point: HTTP through Django, websockets through Channels."""
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
django_asgi_app = get_asgi_application()

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from controlplane.common.body import BodyLimit  # noqa: E402
from controlplane.live.origins import allowed_hosts_origin_validator  # noqa: E402
from controlplane.live.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files (CSS, JS, plotly.min.js) from the app's finders, so one process serves all.
        # BodyLimit refuses an oversized body (413) before Django's handler reads it.
        "http": BodyLimit(ASGIStaticFilesHandler(django_asgi_app)),
        "websocket": allowed_hosts_origin_validator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
