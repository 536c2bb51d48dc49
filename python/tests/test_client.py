#!/usr/bin/env python3
"""phos for Python against a real phosd on simgpu.

mlp deployed, invoked blocking, streamed and from many threads over one client, its answers checked
against an independent CPU reference (mlp_reference.py); a function answering in pieces
(tests/integration/functions/probe_fn.cc) read piece by piece while its call is under way, and
left early; every refusal raised as its phos.Error subclass; the client's lifetime.

    test_client.py [--phosd PATH] [--functions-dir DIR] [--test-functions-dir DIR] [--mlp PATH]
                   [--probe PATH] [--library PATH] [unittest arguments]

Defaults: the source tree's build/ (build/bin/phosd, ...). --library sets PHOS_LIBRARY.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package from the source tree
sys.path.insert(0, str(HERE))

import phos  # noqa: E402
from phos import _libphos  # noqa: E402

import mlp_reference  # noqa: E402

BUILD = HERE.parent.parent / "build"


class Paths:
    phosd = str(BUILD / "bin" / "phosd")
    functions_dir = str(BUILD / "bin" / "functions")
    test_functions_dir = str(BUILD / "bin" / "test-functions")
    mlp = str(BUILD / "bin" / "functions" / "mlp")
    probe = str(BUILD / "bin" / "test-functions" / "probe_fn")


MLP_ARGS = ["--size-mib", "16", "--layers", "4"]  # the shape tests/integration/mlp_expect.h checks
MLP_SHAPE = mlp_reference.shape_for_size(16, 4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Phosd:
    """A phosd on a data directory of its own, on simgpu, serving the build's functions."""

    def __init__(self) -> None:
        # The data directory itself, as tests/integration/phosd_fixture.cc makes it: a sandboxed
        # function's uid must be able to reach phosd's artifacts there, which a private (0700)
        # directory above the data directory would keep it from.
        self.dir = tempfile.mkdtemp(prefix="phosd-python-")
        # Where probe_fn waits for the tests' go-ahead files: readable by functions that phosd runs
        # sandboxed, as uids of their own.
        self.hooks = tempfile.mkdtemp(prefix="phos-python-hooks-")
        os.chmod(self.hooks, 0o755)
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.log_path = self.dir + ".log"
        # simgpu's small profile at real time, unless the caller chose otherwise (CTest sets them).
        env = {"PHOS_SIMGPU_PROFILE": "ci", "PHOS_SIMGPU_TIME_SCALE": "1", **os.environ}
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [Paths.phosd, "--gpu", "sim", "--listen", f"127.0.0.1:{port}", "--data-dir", self.dir,
                 "--functions-dir", Paths.functions_dir, "--functions-dir", Paths.test_functions_dir],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(self.endpoint + "/healthz", timeout=5).close()
                break
            except (urllib.error.URLError, ConnectionError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    tail = self.log_tail()
                    self.process.kill()
                    self.process.wait()
                    self.remove()
                    raise RuntimeError("phosd did not become healthy:\n" + tail)
                time.sleep(0.2)  # polling until phosd serves, not a wait for an assertion
        with open(self.dir + "/admin.token", encoding="utf-8") as f:
            self.token = f.read().split()[0]

    def hook(self, name: str) -> str:
        path = os.path.join(self.hooks, name)
        if os.path.exists(path):
            os.remove(path)
        return path

    def log_tail(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-60:])

    def stop(self) -> int:
        self.process.terminate()
        code = self.process.wait(timeout=60)
        return code

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.hooks, ignore_errors=True)
        os.remove(self.log_path)


PHOSD: Phosd | None = None
PHOSD_LOG_TAIL = ""
_MODEL: mlp_reference.Model | None = None


def phosd() -> Phosd:
    assert PHOSD is not None
    return PHOSD


def model() -> mlp_reference.Model:
    """mlp's weights, made once (a few seconds of pure Python)."""
    global _MODEL
    if _MODEL is None:
        _MODEL = mlp_reference.Model(MLP_SHAPE)
    return _MODEL


def setUpModule() -> None:
    global PHOSD
    PHOSD = Phosd()


def tearDownModule() -> None:
    global PHOSD, PHOSD_LOG_TAIL
    if PHOSD is not None:
        code = PHOSD.stop()
        PHOSD_LOG_TAIL = PHOSD.log_tail()
        PHOSD.remove()
        PHOSD = None
        if code != 0:
            raise RuntimeError(f"phosd exited {code} when stopped:\n{PHOSD_LOG_TAIL}")


def admin_client() -> phos.Client:
    return phos.Client(phosd().endpoint, phosd().token)


class MlpTestCase(unittest.TestCase):
    def assertMatchesReference(self, body: bytes, seed: int, full: bool) -> None:
        """mlp_expect.h's checks: argmax exact, checksum within 1e-3 relative, each output within 1e-4."""
        answer: dict[str, Any] = json.loads(body)
        expected = model().forward(mlp_reference.input_from_seed(seed, MLP_SHAPE))
        argmax, checksum = mlp_reference.summary(expected, MLP_SHAPE)
        self.assertEqual(answer["argmax"], argmax, body[:200])
        self.assertAlmostEqual(answer["checksum"], checksum, delta=1e-3 * (1 + abs(checksum)))
        if full:
            self.assertEqual(len(answer["output"]), len(expected))
            for i, (got, want) in enumerate(zip(answer["output"], expected)):
                self.assertAlmostEqual(got, want, delta=1e-4, msg=f"element {i}")


class MlpTest(MlpTestCase):
    """mlp deployed once by its path, one warm instance."""

    client: phos.Client
    deployed: dict[str, Any]

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = admin_client()
        cls.deployed = cls.client.deploy("mlp", Paths.mlp, MLP_ARGS, instances=1)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.remove("mlp")
        cls.client.close()

    def test_deploy_answers_the_spec_and_a_second_deploy_is_refused(self) -> None:
        self.assertEqual(self.deployed["name"], "mlp")
        self.assertEqual(self.deployed["args"], MLP_ARGS)
        self.assertIn("contexts_ready", self.deployed)
        with self.assertRaises(phos.AlreadyExists) as refused:
            self.client.deploy("mlp", Paths.mlp, MLP_ARGS)
        self.assertEqual(refused.exception.status, phos.Status.ALREADY_EXISTS)
        self.assertIn("mlp", refused.exception.message)

    def test_a_blocking_answer_matches_the_cpu_reference(self) -> None:
        answer = self.client.invoke("mlp", '{"seed": 7, "full": true}')
        self.assertIsInstance(answer, bytes)
        self.assertMatchesReference(answer, 7, full=True)
        self.assertTrue(answer.restore_mode, "phosd says which mode served every answer")

    def test_streamed_pieces_make_the_blocking_answer(self) -> None:
        request = b'{"seed": 9, "full": true}'
        blocking = self.client.invoke("mlp", request)
        stream = self.client.invoke_stream("mlp", request)
        pieces = list(stream)
        self.assertGreaterEqual(len(pieces), 1)
        self.assertTrue(all(isinstance(p, bytes) and p for p in pieces))
        self.assertEqual(b"".join(pieces), bytes(blocking))
        self.assertTrue(stream.restore_mode)
        self.assertMatchesReference(b"".join(pieces), 9, full=True)

    def test_a_restored_instance_says_how_and_when(self) -> None:
        answer = self.client.invoke("mlp", '{"seed": 8}', restore_mode="phos")
        self.assertMatchesReference(answer, 8, full=False)
        self.assertEqual(answer.restore_mode, "phos")
        self.assertIsNotNone(answer.first_byte_us)
        assert answer.first_byte_us is not None
        self.assertGreaterEqual(answer.first_byte_us, 0)

    def test_a_watch_sees_an_instance_restored_for_a_request(self) -> None:
        with self.client.events() as events:
            self.client.invoke("mlp", '{"seed": 9}', restore_mode="phos")
            seen = []
            while not any(e.kind == "restored" and e.function == "mlp" for e in seen):
                event = events.get(timeout=60)
                self.assertIsNotNone(event, f"no restored event for mlp; got {seen}")
                seen.append(event)
            restored = next(e for e in seen if e.kind == "restored")
            self.assertEqual(restored.version, 1)
            self.assertEqual(restored.mode, "phos")
            self.assertGreater(restored.instance, 0)
            self.assertGreater(restored.time_ms, 0)
        # Stopped by the with block: iterating ends at once, and a second stop does nothing.
        self.assertEqual(list(events), [])
        events.stop()

    def test_the_functions_refusal_is_a_function_error(self) -> None:
        with self.assertRaises(phos.FunctionError) as refused:
            self.client.invoke("mlp", '{"input": [1, 2, 3]}')
        self.assertTrue(refused.exception.message)
        with self.assertRaises(phos.FunctionError):
            list(self.client.invoke_stream("mlp", "not json"))

    def test_one_client_serves_many_threads_at_once(self) -> None:
        seeds = list(range(100, 108))
        answers: dict[int, bytes] = {}
        errors: list[BaseException] = []

        def invoke(seed: int) -> None:
            try:
                answers[seed] = self.client.invoke("mlp", f'{{"seed": {seed}}}')
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=invoke, args=(seed,)) for seed in seeds]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        for seed in seeds:
            with self.subTest(seed=seed):
                self.assertMatchesReference(answers[seed], seed, full=False)

    def test_listed_described_checkpointed_and_counted(self) -> None:
        listed = self.client.list()
        self.assertIn("mlp", [f["name"] for f in listed["functions"]])
        described = self.client.describe("mlp")
        self.assertEqual(described["function"]["name"], "mlp")
        self.assertIn("state", described["function"])
        self.assertGreaterEqual(len(described["instances"]), 1)

        taken = self.client.checkpoint("mlp", mode="soft-cow")
        self.assertEqual(taken["mode"], "soft-cow")
        self.assertEqual(taken["function"], "mlp")
        self.assertIn("version", taken)
        with self.assertRaises(phos.InvalidArgument):
            self.client.checkpoint("mlp", mode="sideways")  # type: ignore[arg-type]
        self.assertMatchesReference(self.client.invoke("mlp", '{"seed": 4}'), 4, full=False)

        self.assertIn("phos_invocations_total", self.client.stats())


class EmbeddedRuntimeTest(MlpTestCase):
    """The daemon inside this Python process (phos.Runtime): mlp deployed, invoked blocking and
    streamed against the CPU reference, reached from another process at its endpoint, removed."""

    def test_the_daemon_runs_in_this_process_behind_the_same_client(self) -> None:
        data_dir = tempfile.mkdtemp(prefix="phos-python-embedded-")
        try:
            with phos.Runtime(data_dir, gpu="sim", functions_dirs=[Paths.functions_dir]) as runtime:
                self.assertTrue(runtime.endpoint.startswith("http://127.0.0.1:"), runtime.endpoint)
                with runtime.connect() as client:
                    client.deploy("mlp", Paths.mlp, MLP_ARGS, instances=1)
                    answer = client.invoke("mlp", '{"seed": 12}')
                    self.assertMatchesReference(answer, 12, full=False)
                    self.assertEqual(b"".join(client.invoke_stream("mlp", '{"seed": 12}')), bytes(answer))
                    # Another process reaches it as it would a phosd.
                    health = subprocess.run(["/usr/bin/curl", "-sf", runtime.endpoint + "/healthz"],
                                            capture_output=True, check=False)
                    self.assertEqual(health.stdout, b"ok\n")
                    client.remove("mlp")
                    with self.assertRaises(phos.NotFound):
                        client.invoke("mlp", "{}")
            self.assertTrue(runtime.closed)
            with self.assertRaises(ValueError):
                runtime.connect()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)

    def test_bad_options_are_refused_with_their_reason(self) -> None:
        with self.assertRaises(phos.InvalidArgument) as refused:
            phos.Runtime("/tmp/phos-python-embedded-never", gpu="quantum")
        self.assertIn("quantum", refused.exception.message)
        shutil.rmtree("/tmp/phos-python-embedded-never", ignore_errors=True)


class UploadedFunctionTest(MlpTestCase):
    def test_an_uploaded_function_serves_until_removed(self) -> None:
        with admin_client() as client:
            client.deploy("mlp-uploaded", Path(Paths.mlp), MLP_ARGS, upload=True, max_instances=1,
                          sample_request='{"seed": 0}')
            self.assertMatchesReference(client.invoke("mlp-uploaded", '{"seed": 3}'), 3, full=False)
            client.remove("mlp-uploaded")
            with self.assertRaises(phos.NotFound):
                client.invoke("mlp-uploaded", '{"seed": 3}')
            with self.assertRaises(phos.NotFound):
                client.remove("mlp-uploaded")
            self.assertNotIn("mlp-uploaded", [f["name"] for f in client.list()["functions"]])


class StreamTest(unittest.TestCase):
    """probe_fn's "pieces:PATH": the piece "first\\n", then, once PATH exists, "second\\n"."""

    client: phos.Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.client = admin_client()
        # A second instance serves while the first is kept busy by a call a test has left.
        cls.client.deploy("probe", Paths.probe, instances=1, max_instances=2)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.remove("probe")
        cls.client.close()

    def test_pieces_arrive_while_the_call_is_under_way(self) -> None:
        go = phosd().hook("go-while-under-way")
        with self.client.invoke_stream("probe", "pieces:" + go) as stream:
            # The function cannot have answered "second" yet: it waits for `go`, made only now.
            self.assertEqual(next(stream), b"first\n")
            Path(go).touch()
            self.assertEqual(list(stream), [b"second\n"])
        self.assertTrue(stream.restore_mode, "said once the iteration ended")

    def test_leaving_early_neither_hangs_nor_leaks(self) -> None:
        with admin_client() as client:
            go = phosd().hook("go-after-leaving")
            before = set(threading.enumerate())
            stream = client.invoke_stream("probe", "pieces:" + go)
            for piece in stream:
                self.assertEqual(piece, b"first\n")
                break
            stream.close()  # returns at once: the call is still under way, waiting for `go`
            self.assertEqual(list(stream), [])
            workers = [t for t in threading.enumerate() if t not in before]
            self.assertTrue(workers, "the call is still under way")
            # The client serves on meanwhile.
            self.assertEqual(client.invoke("probe", "echo me"), b"echo me")
            Path(go).touch()
        # close() waited for the call to end: no worker is left.
        for worker in workers:
            self.assertFalse(worker.is_alive())

    def test_closing_the_client_ends_a_stream_nobody_reads(self) -> None:
        client = admin_client()
        go = phosd().hook("go-unread")
        stream = client.invoke_stream("probe", "pieces:" + go)
        self.assertEqual(next(stream), b"first\n")
        Path(go).touch()
        client.close()
        self.assertEqual(list(stream), [])

    def test_an_answer_cut_short_is_instance_lost(self) -> None:
        stream = self.client.invoke_stream("probe", "piece-then-crash")
        self.assertEqual(next(stream), b"first\n")
        with self.assertRaises(phos.InstanceLost) as lost:
            next(stream)
        self.assertIn("cut short", lost.exception.message)
        self.assertEqual(list(stream), [])
        # A new instance serves the next request.
        self.assertEqual(self.client.invoke("probe", "again"), b"again")

    def test_a_passed_deadline_is_timeout(self) -> None:
        self.client.deploy("probe-hang", Paths.probe, max_instances=1)
        try:
            with self.assertRaises(phos.Timeout):
                self.client.invoke("probe-hang", "hang", timeout_ms=500)
            with self.assertRaises(phos.Timeout):
                list(self.client.invoke_stream("probe-hang", "hang", timeout_ms=500))
        finally:
            self.client.remove("probe-hang")


class RefusalTest(unittest.TestCase):
    def test_nothing_of_that_name_is_not_found(self) -> None:
        with admin_client() as client:
            calls: list[Callable[[], object]] = [
                lambda: client.invoke("nothing-here", "{}"),
                lambda: list(client.invoke_stream("nothing-here", "{}")),
                lambda: client.describe("nothing-here"),
                lambda: client.remove("nothing-here"),
                lambda: client.checkpoint("nothing-here"),
            ]
            for call in calls:
                with self.assertRaises(phos.NotFound) as refused:
                    call()
                self.assertEqual(refused.exception.status, phos.Status.NOT_FOUND)
                self.assertIn("nothing-here", refused.exception.message)
                self.assertIn("NOT_FOUND", str(refused.exception))

    def test_a_wrong_token_is_permission_denied_and_none_unauthenticated(self) -> None:
        with phos.Client(phosd().endpoint, "not-the-admin-token") as wrong:
            with self.assertRaises(phos.PermissionDenied) as refused:
                wrong.deploy("mlp-denied", Paths.mlp, MLP_ARGS)
            self.assertIn("403", refused.exception.message)
            with self.assertRaises(phos.PermissionDenied):
                wrong.remove("mlp-denied")
        with phos.Client(phosd().endpoint) as anonymous:
            with self.assertRaises(phos.Unauthenticated):
                anonymous.deploy("mlp-denied", Paths.mlp, MLP_ARGS)
            self.assertIn("functions", anonymous.list(), "listing is open")

    def test_bad_arguments_are_refused_before_anything_is_sent(self) -> None:
        with admin_client() as client:
            with self.assertRaises(phos.InvalidArgument) as refused:
                client.invoke("mlp", "{}", restore_mode="sometimes")  # type: ignore[arg-type]
            self.assertIn("sometimes", refused.exception.message)
            with self.assertRaises(phos.InvalidArgument):
                client.invoke("a/b", "{}")
            with self.assertRaises(phos.InvalidArgument):
                client.deploy("mlp", "/nonexistent/mlp", upload=True)
            with self.assertRaises(phos.InvalidArgument) as outside:
                client.deploy("sh", "/bin/sh")  # outside phosd's --functions-dir: phosd refuses it
            self.assertIn("400", outside.exception.message)
            # What C types cannot carry, refused by the binding itself.
            with self.assertRaises(ValueError):
                client.invoke("ml\0p", "{}")
            with self.assertRaises(ValueError):
                client.invoke("mlp", "{}", timeout_ms=-1)
            with self.assertRaises(ValueError):
                client.checkpoint("mlp", instance=1 << 64)
            with self.assertRaises(TypeError):
                client.invoke("mlp", 7)  # type: ignore[arg-type]

    def test_endpoints_where_no_phosd_is_or_of_another_form(self) -> None:
        with self.assertRaises(phos.Unavailable):
            phos.Client(f"http://127.0.0.1:{free_port()}")
        with self.assertRaises(phos.Unavailable):
            phos.Client("unix:///nonexistent/phosd.sock")
        with self.assertRaises(phos.InvalidArgument):
            phos.Client("unix://relative.sock")
        with self.assertRaises(phos.InvalidArgument):
            phos.Client("ftp://127.0.0.1:7070")


class ClientLifetimeTest(unittest.TestCase):
    def test_a_with_block_closes_the_client(self) -> None:
        with admin_client() as client:
            self.assertFalse(client.closed)
            client.list()
        self.assertTrue(client.closed)
        with self.assertRaises(ValueError):
            client.list()
        with self.assertRaises(ValueError):
            client.invoke_stream("probe", "x")
        client.close()  # a second close does nothing


class LibraryTest(unittest.TestCase):
    def test_the_library_is_of_api_version_1(self) -> None:
        self.assertEqual(_libphos.library().phos_api_version(), phos.API_VERSION)

    def test_another_api_version_is_refused(self) -> None:
        other = ctypes.CDLL(_libphos.library()._name)
        other.phos_api_version = lambda: 2  # type: ignore[attr-defined]
        with mock.patch.object(_libphos, "_library", None), mock.patch.object(_libphos, "_open", return_value=other):
            with self.assertRaises(phos.LibraryError) as refused:
                _libphos.library()
        self.assertIn("API version 2", str(refused.exception))

    def test_a_library_that_is_not_libphos_is_refused(self) -> None:
        with mock.patch.object(_libphos, "_library", None), \
                mock.patch.dict(os.environ, {"PHOS_LIBRARY": "libc.so.6"}):
            with self.assertRaises(phos.LibraryError) as refused:
                _libphos.library()
        self.assertIn("not phos's C API library", str(refused.exception))
        with mock.patch.object(_libphos, "_library", None), \
                mock.patch.dict(os.environ, {"PHOS_LIBRARY": "/nonexistent/libphos.so.1"}):
            with self.assertRaises(phos.LibraryError) as missing:
                _libphos.library()
        self.assertIn("PHOS_LIBRARY=/nonexistent/libphos.so.1", str(missing.exception))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for option in ("phosd", "functions_dir", "test_functions_dir", "mlp", "probe"):
        parser.add_argument("--" + option.replace("_", "-"), default=getattr(Paths, option))
    parser.add_argument("--library", help="libphos.so (sets PHOS_LIBRARY)")
    args, rest = parser.parse_known_args()
    for option in ("phosd", "functions_dir", "test_functions_dir", "mlp", "probe"):
        setattr(Paths, option, getattr(args, option))
    if args.library:
        os.environ["PHOS_LIBRARY"] = args.library
    else:
        os.environ.setdefault("PHOS_LIBRARY", str(BUILD / "lib" / "libphos.so.1"))
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False).result
    if not result.wasSuccessful() and PHOSD_LOG_TAIL:
        print("phosd's log (tail):\n" + PHOSD_LOG_TAIL, file=sys.stderr)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
