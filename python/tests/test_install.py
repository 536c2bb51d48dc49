#!/usr/bin/env python3
"""phos for Python installs offline with pip (Debian's setuptools and wheel, no index, no build
isolation) into a directory of its own, and imports from there: typed, its version the product's,
libphos found through PHOS_LIBRARY, and a clear error without it.

    test_install.py [--library PATH] [unittest arguments]

The package's sources are copied to a temporary directory first, so the in-tree build pip runs
leaves nothing in the source tree.
"""

from __future__ import annotations

import argparse
import ctypes.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # python/
LIBRARY = str(PACKAGE.parent / "build" / "lib" / "libphos.so.1")


class InstallTest(unittest.TestCase):
    dir: str  # the temporary directory: source/ (a copy of the package), site/ (where pip installs)
    target: str
    pip: subprocess.CompletedProcess[str]

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp(prefix="phos-python-install-")
        source = os.path.join(cls.dir, "source")
        os.mkdir(source)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(PACKAGE / name, source)
        shutil.copytree(PACKAGE / "phos", os.path.join(source, "phos"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        cls.target = os.path.join(cls.dir, "site")
        env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
        cls.pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-cache-dir",
             "--target", cls.target, source],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cls.dir)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_installed(self, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """`code` in a fresh interpreter that sees the installed package and neither the source tree
        nor PYTHON* variables (-I), from a directory of its own."""
        prelude = f"import sys; sys.path.insert(0, {self.target!r})\n"
        return subprocess.run([sys.executable, "-I", "-c", prelude + textwrap.dedent(code)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              cwd=self.dir)

    def test_pip_installs_the_package_offline(self) -> None:
        self.assertEqual(self.pip.returncode, 0, self.pip.stdout)
        installed = Path(self.target) / "phos"
        for name in ("__init__.py", "_libphos.py", "client.py", "errors.py", "stream.py", "py.typed"):
            self.assertTrue((installed / name).is_file(), f"{name} not installed:\n{self.pip.stdout}")

    def test_the_installed_package_imports_and_loads_libphos(self) -> None:
        self.assertEqual(self.pip.returncode, 0, self.pip.stdout)
        run = self.run_installed("""
            import importlib.metadata, phos
            assert phos.__file__.startswith(sys.path[0]), phos.__file__
            assert importlib.metadata.version("phos") == "0.1.0", importlib.metadata.version("phos")
            assert issubclass(phos.NotFound, phos.Error) and phos.NotFound.status == phos.Status.NOT_FOUND
            print("api version", phos._libphos.library().phos_api_version())
            """, dict(os.environ, PHOS_LIBRARY=os.environ.get("PHOS_LIBRARY", LIBRARY)))
        self.assertEqual(run.returncode, 0, run.stdout)
        self.assertIn("api version 1", run.stdout)

    def test_without_a_library_to_find_the_error_says_how_to_name_one(self) -> None:
        self.assertEqual(self.pip.returncode, 0, self.pip.stdout)
        if ctypes.util.find_library("phos"):
            self.skipTest("a libphos is installed on this machine: the installed package finds it")
        env = {k: v for k, v in os.environ.items() if k not in ("PHOS_LIBRARY", "LD_LIBRARY_PATH")}
        run = self.run_installed("""
            import phos
            try:
                phos.Client("http://127.0.0.1:1")
            except phos.LibraryError as e:
                print("refused:", e)
            """, env)
        self.assertEqual(run.returncode, 0, run.stdout)
        self.assertIn("refused: libphos.so not found; set PHOS_LIBRARY", run.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", help="libphos.so (sets PHOS_LIBRARY)")
    args, rest = parser.parse_known_args()
    if args.library:
        os.environ["PHOS_LIBRARY"] = args.library
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
