"""What the server-rendered pages share."""
from __future__ import annotations

from typing import Callable, TypeVar

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from controlplane.common.api import error_payload
from controlplane.common.errors import NotFound

T = TypeVar("T")


def get_or_404(select: Callable[..., T], **kwargs) -> T:
    """``select(**kwargs)`` (a selector's ``*_get``); an object that does not exist or that the
    actor may not see is the page's 404, with the selector's message."""
    try:
        return select(**kwargs)
    except NotFound as exc:
        raise Http404(str(exc)) from None


@csrf_exempt  # it changes nothing; without this a POST with a bearer token got CSRF's HTML 403
def api_not_found(request: HttpRequest, rest: str) -> JsonResponse:
    """Any path under /api/ that no endpoint serves: the API's JSON error, in DEBUG too (never
    Django's page listing the URL patterns)."""
    return JsonResponse(error_payload(f"no such endpoint: {request.path}"), status=404)
