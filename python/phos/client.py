"""Client: a phosd reached through libphos's C API (phos.h), one method per phos_* call."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import threading
from types import TracebackType
from typing import Any, Callable, Iterator, Literal, Sequence

from . import _libphos
from ._libphos import ChunkCallback, DeployOptions, InvokeInfo, InvokeOptions
from .errors import Internal
from .errors import check as _check
from .events import Events
from .stream import Pieces, Stream

# README, "Restore modes"; libphos refuses another name with InvalidArgument.
RestoreMode = Literal["auto", "cold-boot", "stop-the-world", "eager", "no-pool", "no-order", "phos", "warm"]
# phos_checkpoint's modes (docs/design.md D10).
CheckpointMode = Literal["stop-the-world", "soft-cow", "soft-recopy"]

_UINT32_MAX = (1 << 32) - 1
_UINT64_MAX = (1 << 64) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class Answer(bytes):
    """An invocation's answer: its bytes (an Answer is a bytes), and how phosd served it.

    `restore_mode`: the restore mode that served it ("warm" for an idle instance, "phos", ...);
    None when phosd did not say. `first_byte_us`: microseconds from the request's arrival to the
    answer's first byte, for an instance brought up for this request; None for a warm instance.
    """

    restore_mode: str | None
    first_byte_us: int | None

    def __new__(cls, body: bytes, restore_mode: str | None = None, first_byte_us: int | None = None) -> Answer:
        answer = super().__new__(cls, body)
        answer.restore_mode = restore_mode
        answer.first_byte_us = first_byte_us
        return answer

    def __repr__(self) -> str:
        return (f"Answer({bytes(self)!r}, restore_mode={self.restore_mode!r}, "
                f"first_byte_us={self.first_byte_us!r})")


def _text(value: str, what: str) -> bytes:
    """`value` as the NUL-terminated UTF-8 text the C API takes."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{what} holds a NUL character")
    return value.encode("utf-8")


def _optional_text(value: str | None, what: str) -> bytes | None:
    return None if value is None else _text(value, what)


def _path(value: str | os.PathLike[str], what: str) -> bytes:
    encoded = os.fsencode(value)
    if b"\0" in encoded:
        raise ValueError(f"{what} holds a NUL character")
    return encoded


def _request(value: bytes | str) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"request must be bytes or str, not {type(value).__name__}")


def _integer(value: int, low: int, high: int, what: str) -> int:
    """`value` checked to fit its C type (ctypes would wrap it silently)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{what} must be in {low}..{high}, not {value}")
    return value


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise Internal(f"{what}: phosd's answer is not JSON ({e}): {text[:200]!r}") from e
    if not isinstance(value, dict):
        raise Internal(f"{what}: phosd's answer is not a JSON object: {text[:200]!r}")
    return value


def _invoke_options(restore_mode: str | None, timeout_ms: int) -> InvokeOptions:
    return InvokeOptions(struct_size=ctypes.sizeof(InvokeOptions),
                         restore_mode=_optional_text(restore_mode, "restore_mode"),
                         timeout_ms=_integer(timeout_ms, 0, _UINT32_MAX, "timeout_ms"))


def _new_info() -> InvokeInfo:
    return InvokeInfo(struct_size=ctypes.sizeof(InvokeInfo))


def _served(info: InvokeInfo) -> tuple[str | None, int | None]:
    """phos_invoke_info as (restore mode, first-byte µs), None for what phosd did not say."""
    mode = info.restore_mode.decode("utf-8", errors="replace")
    return (mode or None), (info.first_byte_us if info.first_byte_us >= 0 else None)


class Client:
    """A client of the phosd at `endpoint` ("http://HOST:PORT", or "unix:///PATH" for its
    --listen-unix socket), whose calls bear `token` (the admin token for deploys, removals,
    describe and checkpoints; a function's invoke token, or the admin token, for invoke; None for
    none).

    Opening checks that phosd answers (Unavailable otherwise). A Client may be used from many threads
    at once. close() (also on leaving a `with` block) ends the client's open streams, waits for the
    calls under way to return, then releases the client; calls after that raise ValueError.

    Every failure raises the phos.Error subclass of its phos_status (phos.NotFound, ...), whose
    `message` says why; arguments of the wrong type or out of their C type's range raise TypeError
    and ValueError before anything is sent.
    """

    _handle: int | None

    def __init__(self, endpoint: str, token: str | None = None) -> None:
        self._setup()
        handle = ctypes.c_void_p()
        _check(self._lib.phos_connect(_text(endpoint, "endpoint"), _optional_text(token, "token"),
                                      ctypes.byref(handle)))
        self._handle = handle.value

    @classmethod
    def _adopt(cls, handle: int) -> Client:
        """A Client of a phos_client* made elsewhere (phos_runtime_connect), released by close()."""
        client = cls.__new__(cls)
        client._setup()
        client._handle = handle
        return client

    def _setup(self) -> None:
        self._lib = _libphos.library()
        self._changed = threading.Condition()
        self._calls = 0  # calls under way, streams' worker threads included
        self._closing = False
        self._streams: set[Pieces | Events] = set()
        self._handle = None  # set by __init__ or _adopt

    # ---- lifetime ----

    def close(self) -> None:
        """Ends open streams, waits for calls under way, releases the client. A second call does
        nothing."""
        with self._changed:
            if self._closing:
                while self._handle is not None:
                    self._changed.wait()
                return
            self._closing = True
            for stream in list(self._streams):  # an Events' stop() leaves the set
                stream.stop()
            while self._calls:
                self._changed.wait()
            handle = self._handle
        self._lib.phos_close(handle)
        with self._changed:
            self._handle = None
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._closing

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        # Collected unclosed: nothing can be under way (a call and a stream's worker hold the client).
        if getattr(self, "_handle", None) is not None and not self._closing:
            self.close()

    def _begin(self, stream: Pieces | None = None) -> int:
        """Counts a call under way (and the stream it feeds, which close() stops) and returns the
        handle it uses; ValueError once closing."""
        with self._changed:
            if self._closing or self._handle is None:
                raise ValueError("the phos client is closed")
            self._calls += 1
            if stream is not None:
                self._streams.add(stream)
            return self._handle

    def _end(self, stream: Pieces | None = None) -> None:
        with self._changed:
            self._calls -= 1
            if stream is not None:
                self._streams.discard(stream)
            self._changed.notify_all()

    @contextlib.contextmanager
    def _call(self) -> Iterator[int]:
        handle = self._begin()
        try:
            yield handle
        finally:
            self._end()

    # ---- functions ----

    def deploy(self, name: str, executable: str | os.PathLike[str], args: Sequence[str] = (), *,
               upload: bool = False, instances: int = 0, max_instances: int = 0, gpus: int = 0,
               sample_request: bytes | str | None = None, sample_timeout_ms: int = 0) -> dict[str, Any]:
        """Deploys function `name`; returns once its snapshots are committed, with phosd's answer:
        the spec, "sample": {"ok", "first_touch_learned", "error"} and "contexts_ready".

        `executable`: a path under one of phosd's --functions-dir on phosd's machine (a relative one
        from this process's working directory), or with `upload`, any file this process reads, sent
        to phosd. `args`: its arguments. `instances`: kept warm (0: scale to zero);
        `max_instances`: at most at once (0: `instances`, at least 1); `gpus`: devices per
        instance (0: 1). `sample_request`: run once deployed, so phosd learns the order in which
        the function first touches its buffers; `sample_timeout_ms` its deadline (0: phosd's).
        """
        encoded_args = [_text(arg, "args[]") for arg in args]
        argv = (ctypes.c_char_p * max(1, len(encoded_args)))(*encoded_args)
        sample = None
        if sample_request is not None:
            sample = _request(sample_request)
            if b"\0" in sample:
                raise ValueError("sample_request holds a NUL byte")
        options = DeployOptions(
            struct_size=ctypes.sizeof(DeployOptions),
            name=_text(name, "name"),
            executable=_path(executable, "executable"),
            upload=1 if upload else 0,
            args=ctypes.cast(argv, ctypes.POINTER(ctypes.c_char_p)),
            arg_count=len(encoded_args),
            instances=_integer(instances, _INT_MIN, _INT_MAX, "instances"),
            max_instances=_integer(max_instances, _INT_MIN, _INT_MAX, "max_instances"),
            gpus=_integer(gpus, _INT_MIN, _INT_MAX, "gpus"),
            sample_request=sample,
            sample_timeout_ms=_integer(sample_timeout_ms, 0, _UINT32_MAX, "sample_timeout_ms"))
        answer = ctypes.c_void_p()
        with self._call() as handle:
            _check(self._lib.phos_deploy(handle, ctypes.byref(options), ctypes.byref(answer)))
        return _json(_libphos.take_string(answer), f"deploy '{name}'")

    def list(self) -> dict[str, Any]:
        """The deployed functions: {"functions": [spec + "state", ...]} (environment values
        redacted unless the client bears the admin token)."""
        answer = ctypes.c_void_p()
        with self._call() as handle:
            _check(self._lib.phos_list(handle, ctypes.byref(answer)))
        return _json(_libphos.take_string(answer), "list")

    def describe(self, name: str) -> dict[str, Any]:
        """One function: {"function": its entry of list(), "instances": [{"id", "state", "pid",
        "mode", "restored", "device"}, ...]}. Needs the admin token."""
        answer = ctypes.c_void_p()
        encoded = _text(name, "name")
        with self._call() as handle:
            _check(self._lib.phos_describe(handle, encoded, ctypes.byref(answer)))
        return _json(_libphos.take_string(answer), f"describe '{name}'")

    def remove(self, name: str) -> None:
        """Removes function `name` and ends its instances."""
        encoded = _text(name, "name")
        with self._call() as handle:
            _check(self._lib.phos_remove(handle, encoded))

    def checkpoint(self, name: str, instance: int = 0, mode: CheckpointMode = "stop-the-world") -> dict[str, Any]:
        """Checkpoints a running instance of `name` (0: an idle one phosd picks) in `mode`; returns
        once the snapshot is committed, with {"function", "instance", "mode", "version",
        "stall_us", "total_us", ...}."""
        answer = ctypes.c_void_p()
        encoded = _text(name, "name")
        encoded_mode = _text(mode, "mode")
        number = _integer(instance, 0, _UINT64_MAX, "instance")
        with self._call() as handle:
            _check(self._lib.phos_checkpoint(handle, encoded, number, encoded_mode, ctypes.byref(answer)))
        return _json(_libphos.take_string(answer), f"checkpoint '{name}'")

    def stats(self) -> str:
        """phosd's metrics (GET /metrics), Prometheus text."""
        answer = ctypes.c_void_p()
        with self._call() as handle:
            _check(self._lib.phos_stats(handle, ctypes.byref(answer)))
        return _libphos.take_string(answer)

    # ---- invocations ----

    def invoke(self, name: str, request: bytes | str, *, restore_mode: RestoreMode | None = None,
               timeout_ms: int = 0) -> Answer:
        """Invokes `name` with `request` (a str is sent as UTF-8) and returns its whole answer.

        `restore_mode`: how a new instance is brought up if one is needed (None: "auto");
        `timeout_ms`: the invocation's deadline (0: phosd's --invoke-timeout-ms). The function's
        own refusal or failure raises FunctionError.
        """
        encoded = _text(name, "name")
        body = _request(request)
        options = _invoke_options(restore_mode, timeout_ms)
        info = _new_info()
        response = ctypes.c_void_p()
        length = ctypes.c_size_t()
        with self._call() as handle:
            _check(self._lib.phos_invoke(handle, encoded, body, len(body), ctypes.byref(options),
                                         ctypes.byref(response), ctypes.byref(length), ctypes.byref(info)))
        return Answer(_libphos.take_bytes(response, length.value), *_served(info))

    def events(self) -> Events:
        """Instance events from now on (phos_watch_events): started, restored, evicted and ended
        instances of every function, as they happen; see Events. Closing the client stops it."""
        handle = self._begin()
        try:
            events = Events(self._lib, handle, self._end)
        except BaseException:
            self._end()
            raise
        with self._changed:
            self._streams.add(events)
        return events

    def invoke_stream(self, name: str, request: bytes | str, *, restore_mode: RestoreMode | None = None,
                      timeout_ms: int = 0) -> Stream:
        """Invokes `name` as invoke() does and returns the answer's pieces as they arrive:

            for piece in client.invoke_stream("llama", request):
                print(piece.decode(), end="", flush=True)

        The call runs on a worker thread from here on; see Stream for what the iteration raises and
        how it ends early.
        """
        encoded = _text(name, "name")
        body = _request(request)
        options = _invoke_options(restore_mode, timeout_ms)
        lib = self._lib
        pieces = Pieces()
        handle = self._begin(pieces)

        def call(offer: Callable[[bytes], bool]) -> tuple[str | None, int | None]:
            def on_chunk(_user: Any, data: Any, length: int) -> int:
                # Nothing may unwind through libphos: any failure here stops the transfer.
                try:
                    return 0 if offer(ctypes.string_at(data, length)) else 1
                except BaseException:
                    return 1

            callback = ChunkCallback(on_chunk)  # referenced until the call returns
            info = _new_info()
            _check(lib.phos_invoke_stream(handle, encoded, body, len(body), ctypes.byref(options), callback,
                                          None, ctypes.byref(info)))
            return _served(info)

        return Stream(pieces, call, lambda: self._end(pieces), name)
