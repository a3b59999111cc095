"""Errors the services raise; the API and CLI turn them into responses and messages."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of an input, e.g. ``verifier.stages[1].timeout_s``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class ServiceError(Exception):
    """Base of the errors a service raises on purpose."""

    status = 400


class InvalidInput(ServiceError):
    """The input broke one or more rules; nothing was saved."""

    status = 422

    def __init__(self, errors: list[FieldError]):
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))

    @classmethod
    def one(cls, path: str, message: str) -> "InvalidInput":
        return cls([FieldError(path, message)])

    def prefixed(self, prefix: str) -> "InvalidInput":
        return InvalidInput([FieldError(join_path(prefix, e.path), e.message) for e in self.errors])


class NotFound(ServiceError):
    """The object does not exist or is invisible to the actor (another team's)."""

    status = 404


def found(value: T | None, message: str) -> T:
    """``value``, unless it is None (a ``.first()`` that matched nothing): then ``NotFound(message)``."""
    if value is None:
        raise NotFound(message)
    return value


class Forbidden(ServiceError):
    """The actor sees the object but their role does not allow the action."""

    status = 403


class Conflict(ServiceError):
    """The action does not fit the object's current state (an illegal transition)."""

    status = 409


def join_path(prefix: str, path: str) -> str:
    if not prefix:
        return path
    if not path:
        return prefix
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"
