"""The phos daemon inside this Python process: libphos's embedded mode (phos_runtime_open)."""

from __future__ import annotations

import ctypes
import os
from types import TracebackType
from typing import Sequence

from . import _libphos
from ._libphos import RuntimeOptions
from .client import Client, _check, _optional_text, _text


class Runtime:
    """The daemon phosd runs — its pools, snapshot store, API server and instances — run inside this
    process on `data_dir`, with phosd's defaults for what is not given: `gpu` ("sim", "cuda" or
    "auto"), `functions_dirs` (where deployable executables lie; none: <data_dir>/functions),
    `listen` ("HOST:PORT" of its HTTP API for other processes; None: a free loopback port),
    `log_level` (None: warn) and `sandbox` ("auto", "on", "off").

    connect() gives a Client of it, on which every call works as on a phosd; `endpoint` is where
    other processes reach it. close() (also on leaving a `with` block) ends its instances and stops
    it; the clients it gave must be closed first.

        with phos.Runtime("/tmp/phos", gpu="sim", functions_dirs=["build/bin/functions"]) as rt:
            with rt.connect() as client:
                client.deploy("mlp", "build/bin/functions/mlp", ["--size-mib", "16"], instances=1)
                print(client.invoke("mlp", '{"seed": 7}').decode())
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, gpu: str | None = None,
                 functions_dirs: Sequence[str | os.PathLike[str]] = (), listen: str | None = None,
                 log_level: str | None = None, sandbox: str | None = None) -> None:
        self._lib = _libphos.library()
        dirs = [_text(os.fspath(d), "functions_dirs") for d in functions_dirs]
        dir_array = (ctypes.c_char_p * max(len(dirs), 1))(*dirs)
        options = RuntimeOptions(struct_size=ctypes.sizeof(RuntimeOptions),
                                 data_dir=_text(os.fspath(data_dir), "data_dir"),
                                 gpu=_optional_text(gpu, "gpu"),
                                 functions_dirs=dir_array if dirs else None,
                                 functions_dir_count=len(dirs),
                                 listen=_optional_text(listen, "listen"),
                                 log_level=_optional_text(log_level, "log_level"),
                                 sandbox=_optional_text(sandbox, "sandbox"))
        handle = ctypes.c_void_p()
        _check(self._lib.phos_runtime_open(ctypes.byref(options), ctypes.byref(handle)))
        self._handle: int | None = handle.value
        endpoint: bytes = self._lib.phos_runtime_endpoint(self._handle)
        self._endpoint = endpoint.decode()

    @property
    def endpoint(self) -> str:
        """Where other processes reach its HTTP API: "http://HOST:PORT"."""
        return self._endpoint

    def connect(self) -> Client:
        """A client of it, bearing its admin token."""
        if self._handle is None:
            raise ValueError("the runtime is closed")
        client = ctypes.c_void_p()
        _check(self._lib.phos_runtime_connect(self._handle, ctypes.byref(client)))
        assert client.value is not None
        return Client._adopt(client.value)

    def close(self) -> None:
        """Ends its instances and stops it. A second call does nothing."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _check(self._lib.phos_runtime_close(handle))

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
