"""How an API request says who it is: a bearer token or the browser's session, as a Principal."""
from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.security.session import SessionAuth

from controlplane.accounts.principal import Principal
from controlplane.accounts.services import token_authenticate


class TokenAuth(HttpBearer):
    """``Authorization: Bearer tmp_...`` for scripts; no CSRF (no cookies involved)."""

    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        api_token = token_authenticate(token)
        return Principal.for_token(api_token) if api_token else None


class SessionPrincipalAuth(SessionAuth):
    """Django's session for the browser; CSRF is enforced on writes."""

    def authenticate(self, request: HttpRequest, key: str | None) -> Principal | None:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return Principal.for_user(user)
        return None


AUTH = [TokenAuth(), SessionPrincipalAuth()]
