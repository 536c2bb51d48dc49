"""A streamed answer as an iterator: phos_invoke_stream runs on a worker thread whose callback
hands each piece to the iterating thread through a bounded buffer."""

from __future__ import annotations

import collections
import threading
from types import TracebackType
from typing import Callable, Iterator

# What the worker runs: the C call, given the function that takes each piece (False: stop taking
# them), returning the served restore mode and first-byte time, or raising the call's Error.
StreamCall = Callable[[Callable[[bytes], bool]], tuple[str | None, int | None]]

# Pieces received and not yet taken before the worker waits (and with it libcurl's reads, so a
# slow reader slows the transfer rather than growing the buffer without bound).
_MAX_PENDING = 64


class Pieces:
    """The buffer between the worker (offer, finish) and the iterating thread (take); stop() from
    either the iterating thread or the client closing."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.pending: collections.deque[bytes] = collections.deque()
        self.done = False
        self.stopped = False
        self.error: BaseException | None = None
        self.restore_mode: str | None = None
        self.first_byte_us: int | None = None

    def offer(self, piece: bytes) -> bool:
        with self.changed:
            while len(self.pending) >= _MAX_PENDING and not self.stopped:
                self.changed.wait()
            if self.stopped:
                return False
            self.pending.append(piece)
            self.changed.notify_all()
            return True

    def finish(self, error: BaseException | None, restore_mode: str | None, first_byte_us: int | None) -> None:
        with self.changed:
            self.done = True
            self.error = error
            self.restore_mode = restore_mode
            self.first_byte_us = first_byte_us
            self.changed.notify_all()

    def stop(self) -> None:
        with self.changed:
            self.stopped = True
            self.pending.clear()
            self.changed.notify_all()

    def take(self) -> bytes:
        with self.changed:
            while not self.pending and not self.done and not self.stopped:
                self.changed.wait()
            if self.pending:
                piece = self.pending.popleft()
                self.changed.notify_all()
                return piece
            if self.error is not None and not self.stopped:
                error, self.error = self.error, None
                self.stopped = True
                raise error
            self.stopped = True
            raise StopIteration


def _work(pieces: Pieces, call: StreamCall, done: Callable[[], None]) -> None:
    try:
        restore_mode, first_byte_us = call(pieces.offer)
    except BaseException as e:  # handed to the iterating thread, which raises it
        pieces.finish(e, None, None)
    else:
        pieces.finish(None, restore_mode, first_byte_us)
    finally:
        done()


class Stream(Iterator[bytes]):
    """The pieces of a streamed answer, each as soon as phosd forwarded it.

    Iterate it (`for piece in stream`); a failure of the call is raised from the iteration, after
    the pieces that came before it (an answer cut short after it began: InstanceLost). Once the
    iteration has ended, `restore_mode` and `first_byte_us` say how the call was served (None when
    phosd did not say, or before the end).

    close() (also on leaving a `with` block, or when the stream is collected) ends the iteration at
    once. libphos cannot end a transfer early: the worker thread reads the rest of phosd's answer,
    drops it, and ends; Client.close() waits for that.
    """

    def __init__(self, pieces: Pieces, call: StreamCall, done: Callable[[], None], name: str) -> None:
        """Starts `call` on a worker thread that feeds `pieces`; `done` runs when the call returned
        (also when the thread could not start)."""
        self._pieces = pieces
        # A daemon: a stream left open does not keep the interpreter from exiting.
        worker = threading.Thread(target=_work, args=(pieces, call, done), name=f"phos-invoke-stream {name}",
                                  daemon=True)
        try:
            worker.start()
        except BaseException:
            done()
            raise

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> bytes:
        return self._pieces.take()

    def close(self) -> None:
        """Ends the iteration; the pieces not taken yet and those still to come are dropped."""
        self._pieces.stop()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        if hasattr(self, "_pieces"):
            self.close()

    @property
    def restore_mode(self) -> str | None:
        """The restore mode that served the call ("warm", "phos", ...), once the iteration ended."""
        return self._pieces.restore_mode

    @property
    def first_byte_us(self) -> int | None:
        """Microseconds from the request's arrival to the answer's first byte, for an instance
        brought up for it; None for a warm instance, or before the iteration ended."""
        return self._pieces.first_byte_us
