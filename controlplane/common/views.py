"""What the server-rendered pages share."""
from __future__ import annotations

from typing import Callable, TypeVar

from django.http import Http404

from controlplane.common.errors import NotFound

T = TypeVar("T")


def get_or_404(select: Callable[..., T], **kwargs) -> T:
    """``select(**kwargs)`` (a selector's ``*_get``); an object that does not exist or that the
    actor may not see is the page's 404, with the selector's message."""
    try:
        return select(**kwargs)
    except NotFound as exc:
        raise Http404(str(exc)) from None
