"""phos for Python: a client of phosd, the serverless GPU cold-start runtime, over libphos's C API
(phos.h) through ctypes.

    import phos

    with phos.Client("http://127.0.0.1:7070", token) as client:
        client.deploy("mlp", "build/bin/functions/mlp", ["--size-mib", "64"], instances=1)
        answer = client.invoke("mlp", '{"seed": 7}')
        print(answer.decode(), answer.restore_mode)

phos.Runtime runs the daemon itself inside this process (embedded mode) and hands out Clients of it.
libphos.so is found as phos._libphos says ($PHOS_LIBRARY first) when the first Client or Runtime
opens.
"""

from ._libphos import API_VERSION, LibraryError
from .client import Answer, CheckpointMode, Client, RestoreMode
from .errors import (AlreadyExists, Error, FailedPrecondition, FunctionError, InstanceLost, Internal,
                     InvalidArgument, NotFound, NotSupported, PermissionDenied, Status, Timeout, TooManyRequests,
                     Unauthenticated, Unavailable)
from .events import Event, Events
from .runtime import Runtime
from .stream import Stream

__all__ = [
    "API_VERSION", "AlreadyExists", "Answer", "CheckpointMode", "Client", "Error", "Event", "Events", "FailedPrecondition",
    "FunctionError", "InstanceLost", "Internal", "InvalidArgument", "LibraryError", "NotFound", "NotSupported",
    "PermissionDenied", "RestoreMode", "Runtime", "Status", "Stream", "Timeout", "TooManyRequests", "Unauthenticated",
    "Unavailable",
]
