"""phos_status as Python: the Status codes and one exception class per failure."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """phos_status (phos.h). The values never change; a later library may add codes."""

    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    ALREADY_EXISTS = 3
    FAILED_PRECONDITION = 4
    UNAVAILABLE = 5
    UNAUTHENTICATED = 6
    PERMISSION_DENIED = 7
    TIMEOUT = 8
    FUNCTION_ERROR = 9
    INSTANCE_LOST = 10
    TOO_MANY_REQUESTS = 11
    NOT_SUPPORTED = 12
    INTERNAL = 13


class Error(Exception):
    """A call of the C API failed. `status` is the phos_status (a Status, or a plain int for a code
    this binding does not know, raised as Error itself); `message` is phos_last_error()."""

    status: int = -1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.message = message

    def __str__(self) -> str:
        name = self.status.name if isinstance(self.status, Status) else f"status {self.status}"
        return f"{name}: {self.message}"


class InvalidArgument(Error):
    """The caller's arguments, or the request phosd was given (HTTP 400)."""

    status = Status.INVALID_ARGUMENT


class NotFound(Error):
    """No such function, instance or artifact (404)."""

    status = Status.NOT_FOUND


class AlreadyExists(Error):
    """A function of that name is deployed (409 on deploy)."""

    status = Status.ALREADY_EXISTS


class FailedPrecondition(Error):
    """phosd is not in a state where the call can run (409, 412)."""

    status = Status.FAILED_PRECONDITION


class Unavailable(Error):
    """phosd unreachable, or stopping (503)."""

    status = Status.UNAVAILABLE


class Unauthenticated(Error):
    """The call needs a token and bore none (401)."""

    status = Status.UNAUTHENTICATED


class PermissionDenied(Error):
    """The token is not the one the call needs (403)."""

    status = Status.PERMISSION_DENIED


class Timeout(Error):
    """A deadline passed (504)."""

    status = Status.TIMEOUT


class FunctionError(Error):
    """The function itself failed the request (invoke: 400, 500)."""

    status = Status.FUNCTION_ERROR


class InstanceLost(Error):
    """The instance serving the request ended (502), or a streamed answer was cut short."""

    status = Status.INSTANCE_LOST


class TooManyRequests(Error):
    """phosd refused more work for now (429)."""

    status = Status.TOO_MANY_REQUESTS


class NotSupported(Error):
    """Not built, or not in this version (501)."""

    status = Status.NOT_SUPPORTED


class Internal(Error):
    """phosd or libphos broke an invariant (500)."""

    status = Status.INTERNAL


_BY_STATUS: dict[int, type[Error]] = {
    cls.status: cls
    for cls in (InvalidArgument, NotFound, AlreadyExists, FailedPrecondition, Unavailable, Unauthenticated,
                PermissionDenied, Timeout, FunctionError, InstanceLost, TooManyRequests, NotSupported, Internal)
}


def error_for(status: int, message: str) -> Error:
    """The exception for a failed call's `status`: its class, or Error for a code unknown here."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return Error(message, status)
    return cls(message)


def check(status: int) -> None:
    """Raises the call's Error, with phos_last_error() of this thread, unless `status` is PHOS_OK."""
    if status != Status.OK:
        from . import _libphos  # here: the library loads when a call has been made
        raise error_for(status, _libphos.last_error())
