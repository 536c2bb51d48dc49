"""libphos.so found, loaded once and checked, with the prototypes of phos.h's functions.

Where the library is looked for, first match wins:
  1. $PHOS_LIBRARY, a path (a failure to load it is an error: no fallback hides a wrong path);
  2. build/lib/libphos.so.1 in this package's directory or one above it (a source tree's build,
     where CMake puts the library);
  3. libphos.so.1 as the dynamic loader finds it (LD_LIBRARY_PATH, the ld.so cache), then
     ctypes.util.find_library("phos"), then libphos.so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

# The API version this binding is written against (PHOS_API_VERSION in phos.h). Later libraries
# keep version 1's ABI under the symbol version PHOS_1 but may answer a higher number; a library
# answering another number is refused rather than called with structs it may not read alike.
API_VERSION = 1

_SONAME = "libphos.so.1"


class LibraryError(OSError):
    """libphos.so could not be found or loaded, or is of an API version this binding does not know."""


class DeployOptions(ctypes.Structure):
    """phos_deploy_options (phos.h)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("executable", ctypes.c_char_p),
        ("upload", ctypes.c_int),
        ("args", ctypes.POINTER(ctypes.c_char_p)),
        ("arg_count", ctypes.c_size_t),
        ("instances", ctypes.c_int),
        ("max_instances", ctypes.c_int),
        ("gpus", ctypes.c_int),
        ("sample_request", ctypes.c_char_p),
        ("sample_timeout_ms", ctypes.c_uint32),
    ]


class InvokeOptions(ctypes.Structure):
    """phos_invoke_options (phos.h)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("restore_mode", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_uint32),
    ]


class InvokeInfo(ctypes.Structure):
    """phos_invoke_info (phos.h)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("restore_mode", ctypes.c_char * 32),
        ("first_byte_us", ctypes.c_int64),
    ]


class RuntimeOptions(ctypes.Structure):
    """phos_runtime_options (phos.h)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("data_dir", ctypes.c_char_p),
        ("gpu", ctypes.c_char_p),
        ("functions_dirs", ctypes.POINTER(ctypes.c_char_p)),
        ("functions_dir_count", ctypes.c_size_t),
        ("listen", ctypes.c_char_p),
        ("log_level", ctypes.c_char_p),
        ("sandbox", ctypes.c_char_p),
    ]


# int (*phos_chunk_fn)(void* user, const void* data, size_t len)
ChunkCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class EventStruct(ctypes.Structure):
    """phos_event"""
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kind", ctypes.c_int),
        ("function", ctypes.c_char_p),
        ("version", ctypes.c_uint64),
        ("instance", ctypes.c_uint64),
        ("mode", ctypes.c_char_p),
        ("time_ms", ctypes.c_int64),
    ]


# void (*phos_event_fn)(void* user, const phos_event* event)
EventCallback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(EventStruct))

_client_p = ctypes.c_void_p
_status = ctypes.c_int
_out_p = ctypes.POINTER(ctypes.c_void_p)  # char** / void**: kept as raw pointers for phos_free

# name: (restype, argtypes), as declared in phos.h.
_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "phos_api_version": (ctypes.c_int, []),
    "phos_status_name": (ctypes.c_char_p, [_status]),
    "phos_last_error": (ctypes.c_char_p, []),
    "phos_free": (None, [ctypes.c_void_p]),
    "phos_connect": (_status, [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_client_p)]),
    "phos_close": (_status, [_client_p]),
    "phos_deploy": (_status, [_client_p, ctypes.POINTER(DeployOptions), _out_p]),
    "phos_list": (_status, [_client_p, _out_p]),
    "phos_describe": (_status, [_client_p, ctypes.c_char_p, _out_p]),
    "phos_remove": (_status, [_client_p, ctypes.c_char_p]),
    "phos_invoke": (_status, [_client_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                              ctypes.POINTER(InvokeOptions), _out_p, ctypes.POINTER(ctypes.c_size_t),
                              ctypes.POINTER(InvokeInfo)]),
    "phos_invoke_stream": (_status, [_client_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                     ctypes.POINTER(InvokeOptions), ChunkCallback, ctypes.c_void_p,
                                     ctypes.POINTER(InvokeInfo)]),
    "phos_checkpoint": (_status, [_client_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_char_p, _out_p]),
    "phos_stats": (_status, [_client_p, _out_p]),
    "phos_watch_events": (_status, [_client_p, EventCallback, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
    "phos_watch_stop": (_status, [ctypes.c_void_p]),
    "phos_runtime_open": (_status, [ctypes.POINTER(RuntimeOptions), ctypes.POINTER(ctypes.c_void_p)]),
    "phos_runtime_connect": (_status, [ctypes.c_void_p, ctypes.POINTER(_client_p)]),
    "phos_runtime_endpoint": (ctypes.c_char_p, [ctypes.c_void_p]),
    "phos_runtime_close": (_status, [ctypes.c_void_p]),
}

_lock = threading.Lock()
_library: ctypes.CDLL | None = None


def _build_tree_candidates() -> list[str]:
    """build/lib/libphos.so.1 in this file's directory and each one above it, nearest first."""
    here = Path(__file__).resolve().parent
    return [str(d / "build" / "lib" / _SONAME) for d in (here, *here.parents)
            if (d / "build" / "lib" / _SONAME).is_file()]


def _open(path: str) -> ctypes.CDLL:
    # CDLL releases the GIL around each call: a blocking invoke does not stall other threads.
    return ctypes.CDLL(path)


def _find() -> ctypes.CDLL:
    explicit = os.environ.get("PHOS_LIBRARY")
    if explicit:
        try:
            return _open(explicit)
        except OSError as e:
            raise LibraryError(f"PHOS_LIBRARY={explicit}: cannot load it: {e}") from e
    tried = []
    for candidate in _build_tree_candidates():
        try:
            return _open(candidate)
        except OSError as e:
            tried.append(f"{candidate}: {e}")
    names = [_SONAME]
    found = ctypes.util.find_library("phos")
    if found:
        names.append(found)
    names.append("libphos.so")
    for name in names:
        try:
            return _open(name)
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise LibraryError("libphos.so not found; set PHOS_LIBRARY to its path (a build has it at "
                       "build/lib/libphos.so.1). Tried: " + "; ".join(tried))


def library() -> ctypes.CDLL:
    """libphos, loaded at the first call and checked to be of API version 1."""
    global _library
    with _lock:
        if _library is None:
            lib = _find()
            try:
                for name, (restype, argtypes) in _PROTOTYPES.items():
                    function = getattr(lib, name)
                    function.restype = restype
                    function.argtypes = argtypes
            except AttributeError as e:
                raise LibraryError(f"{lib._name}: not phos's C API library: {e}") from e
            version = lib.phos_api_version()
            if version != API_VERSION:
                raise LibraryError(f"{lib._name}: API version {version}; this binding (phos for Python) "
                                   f"speaks version {API_VERSION} only")
            _library = lib
        return _library


def last_error() -> str:
    """phos_last_error() of the calling thread."""
    message: bytes | None = library().phos_last_error()
    return message.decode("utf-8", errors="replace") if message else ""


def take_string(pointer: ctypes.c_void_p) -> str:
    """The NUL-terminated text at `pointer`, which libphos allocated; released here."""
    if not pointer.value:
        return ""
    try:
        return ctypes.string_at(pointer.value).decode("utf-8", errors="replace")
    finally:
        library().phos_free(pointer)


def take_bytes(pointer: ctypes.c_void_p, length: int) -> bytes:
    """`length` bytes at `pointer`, which libphos allocated; released here."""
    if not pointer.value:
        return b""
    try:
        return ctypes.string_at(pointer.value, length)
    finally:
        library().phos_free(pointer)
