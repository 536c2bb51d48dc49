"""Instance events as they happen (phos_watch_events): the watch's thread hands each event to the
iterating thread through a queue."""

from __future__ import annotations

import ctypes
import dataclasses
import queue
import threading
from types import TracebackType
from typing import Any, Callable

from . import _libphos
from .errors import check

# phos_event_kind
_KINDS = {1: "started", 2: "restored", 3: "evicted", 4: "ended"}


@dataclasses.dataclass(frozen=True)
class Event:
    """What became of an instance: kind is "started", "restored", "evicted" or "ended"; mode how
    it came up (a restore mode, or "warm"); time_ms when, in Unix time."""

    kind: str
    function: str
    version: int
    instance: int
    mode: str
    time_ms: int


class Events:
    """The events of one watch, from its start until stop() (or the end of a with block):

        with client.events() as events:
            for event in events:
                print(event.kind, event.function, event.instance)

    Iterating blocks until the next event, and ends once stop() is called (from another thread, or
    by closing the client). get(timeout) waits at most `timeout` seconds and answers None when
    nothing came.
    """

    def __init__(self, lib: ctypes.CDLL, handle: int, end: Callable[[Events], None]) -> None:
        self._lib = lib
        self._end = end
        self._queue: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopped = False
        # Referenced for as long as the watch may call it.
        self._callback = _libphos.EventCallback(self._on_event)
        watch = ctypes.c_void_p()
        check(lib.phos_watch_events(handle, self._callback, None, ctypes.byref(watch)))
        self._watch = watch

    def _on_event(self, _user: Any, event: Any) -> None:
        # On the watch's thread: nothing may unwind into libphos.
        try:
            e = event.contents
            self._queue.put(Event(_KINDS.get(e.kind, "unknown"), (e.function or b"").decode(errors="replace"),
                                  e.version, e.instance, (e.mode or b"").decode(errors="replace"), e.time_ms))
        except BaseException:
            pass

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, waiting up to `timeout` seconds (None: until one comes or the watch
        stops); None when none came."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def __iter__(self) -> Events:
        return self

    def __next__(self) -> Event:
        if self._stopped:
            raise StopIteration
        event = self._queue.get()
        if event is None:  # stop()'s mark, for an iteration that waited
            raise StopIteration
        return event

    def stop(self) -> None:
        """Ends the watch and the iteration; raises the phos.Error that ended the watch before
        (phos.Unavailable: phosd stopped). A second call does nothing."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            check(self._lib.phos_watch_stop(self._watch))
        finally:
            self._queue.put(None)
            self._end(self)

    def __enter__(self) -> Events:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
