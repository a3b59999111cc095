"""The REST API under /api/, with its OpenAPI document at /api/openapi.json."""
from __future__ import annotations

from django.core.exceptions import RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from controlplane.accounts.api import router as accounts_router
from controlplane.accounts.auth import AUTH
from controlplane.alerts.api import router as alerts_router
from controlplane.common.api import BodyParser, error_payload, pydantic_errors
from controlplane.common.body import body_limit
from controlplane.common.errors import FieldError, InvalidInput, ServiceError
from controlplane.domains.api import router as domains_router
from controlplane.registry.api import estimate_router
from controlplane.registry.api import router as registry_router
from controlplane.review.api import router as review_router
from controlplane.runs.api import router as runs_router
from controlplane.runs.trajectory_api import router as trajectories_router
from controlplane.scheduling.api import router as scheduling_router

api = NinjaAPI(
    title="Temper API",
    version="1.0",
    description="Runs, domains, tokens and the audit log. Session auth (CSRF enforced) or `Authorization: Bearer <token>`.",
    auth=AUTH,
    urls_namespace="api",
    parser=BodyParser(),
)
api.add_router("", accounts_router)
api.add_router("", scheduling_router)
api.add_router("", domains_router)
api.add_router("", estimate_router)  # before runs_router: its /runs/{run_id} would take /runs/estimate
api.add_router("", runs_router)
api.add_router("", trajectories_router)
api.add_router("", registry_router)
api.add_router("", review_router)
api.add_router("", alerts_router)


@api.exception_handler(InvalidInput)
def _invalid(request: HttpRequest, exc: InvalidInput):
    return api.create_response(request, error_payload("invalid input", exc.errors), status=422)


@api.exception_handler(ServiceError)
def _service_error(request: HttpRequest, exc: ServiceError):
    return api.create_response(request, error_payload(str(exc)), status=exc.status)


@api.exception_handler(DjangoValidationError)
def _model_validation(request: HttpRequest, exc: DjangoValidationError):
    errors = [FieldError(field if field != "__all__" else "", message)
              for field, messages in getattr(exc, "message_dict", {"": exc.messages}).items() for message in messages]
    return api.create_response(request, error_payload("invalid input", errors), status=422)


@api.exception_handler(NinjaValidationError)
def _validation(request: HttpRequest, exc: NinjaValidationError):
    return api.create_response(request, error_payload("invalid input", pydantic_errors(exc.errors)), status=422)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError):
    return api.create_response(request, error_payload("authentication required: sign in or send a bearer token"), status=401)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError):
    if isinstance(exc.__cause__, ServiceError):
        # Ninja wraps whatever its body parser raises in "400 Cannot parse request body"; the
        # parser is the API's body reader, whose own 413 or 422 (with field paths) is the answer.
        cause = exc.__cause__
        return _invalid(request, cause) if isinstance(cause, InvalidInput) else _service_error(request, cause)
    return api.create_response(request, error_payload(str(exc)), status=exc.status_code)


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig):
    """Django's own count of a body sent without Content-Length (DATA_UPLOAD_MAX_MEMORY_SIZE)."""
    return _service_error(request, body_limit(request.path).refusal())
