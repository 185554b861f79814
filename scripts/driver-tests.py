#!/usr/bin/env python3
"""The drivers' Python tests (drivers/tests) as one ctest each (tests/CMakeLists.txt).

  driver-tests.py list DRIVERS   at configure time: `torch=<version|none>`, then one unittest id a line
  driver-tests.py run ID         in DRIVERS (the ctest's working directory): that one test;
                                 exit 0 passed, 1 failed, 77 skipped (the ctest's SKIP_RETURN_CODE)
  driver-tests.py tool ruff|mypy DRIVERS   the linter or the type checker on DRIVERS, configured
                                 by DRIVERS/pyproject.toml (same exit codes)
  driver-tests.py package DRIVERS   `pip install DRIVERS` into a fresh venv in a temporary folder,
                                 then `python -m recap_drivers --help` and `recap-driver --help`

With RECAP_REQUIRE_TORCH set (scripts/bootstrap.sh test, so CI), a skip for want of something the
set-up installs (torch, numpy, jsonschema, ruff, mypy, RECAP_BIN) fails instead: a test that CI
believes ran must have run. Skips for a missing GPU or megatron-core stay skips.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

# The skip reasons of a missing dependency (drivers/tests: "torch is not importable", "torch is not
# installed", "jsonschema is not installed", "RECAP_BIN is not set").
WANT_OF = re.compile(r"not importable|not installed|is not set|No module named")


def required():
    return os.environ.get("RECAP_REQUIRE_TORCH", "").lower() not in ("", "0", "off", "false", "no")


def torch_version():
    try:
        import torch
        return torch.__version__
    except Exception as e:  # any failure to import is "no torch", with its reason
        return "none (%s: %s)" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")


def ids(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from ids(t)
        elif isinstance(t, unittest.loader._FailedTest):
            # A module that does not import: its dotted name, which fails when run (it shows).
            yield t._testMethodName
        else:
            yield t.id()


def list_tests(drivers):
    os.chdir(drivers)
    sys.path.insert(0, drivers)  # the tests import recap_drivers and tests.helpers from DRIVERS
    print("torch=" + torch_version())
    suite = unittest.defaultTestLoader.discover(os.path.join(drivers, "tests"), top_level_dir=drivers)
    for i in sorted(set(ids(suite))):
        print(i)
    return 0


def run_test(test_id):
    sys.path.insert(0, os.getcwd())
    if required():
        v = torch_version()
        if v.startswith("none"):
            print("FAIL: RECAP_REQUIRE_TORCH is set but %s cannot import torch: %s" % (sys.executable, v))
            return 1
    suite = unittest.defaultTestLoader.loadTestsFromName(test_id)
    result = unittest.TextTestRunner(stream=sys.stdout, verbosity=2).run(suite)
    if result.testsRun == 0:
        print("FAIL: no test named %s" % test_id)
        return 1
    if result.failures or result.errors or result.unexpectedSuccesses:
        return 1
    # Skips of the test itself (a skipped subtest leaves the test passed, its skip printed above).
    own = [reason for t, reason in result.skipped if not isinstance(t, unittest.case._SubTest)]
    if required():
        wanting = [reason for _, reason in result.skipped if WANT_OF.search(reason)]
        if wanting:
            print("FAIL: skipped for want of a dependency, with RECAP_REQUIRE_TORCH set: " + "; ".join(wanting))
            return 1
    return 77 if own else 0


def skip_or_fail(why):
    """A check that cannot run here: skipped, or failed when the set-up should have provided it."""
    if required():
        print("FAIL: RECAP_REQUIRE_TORCH is set but " + why)
        return 1
    print("SKIP: " + why)
    return 77


def run_tool(tool, drivers):
    """ruff or mypy on the drivers (package and tests), with their pyproject.toml's settings."""
    try:
        __import__(tool)
    except ImportError:
        return skip_or_fail("%s is not installed for %s (drivers/requirements-cpu.txt pins it)" % (tool, sys.executable))
    argv = {"ruff": ["check", "."], "mypy": []}[tool]
    return subprocess.call([sys.executable, "-m", tool] + argv, cwd=drivers)


def check_package(drivers):
    """The package installs with pip into a fresh venv, and its command line starts there without
    torch (pip fetches the build backend, setuptools, as the bootstrap fetches its pins)."""
    with tempfile.TemporaryDirectory(prefix="recap-drivers-pkg-") as tmp:
        venv = os.path.join(tmp, "venv")
        if subprocess.call([sys.executable, "-m", "venv", venv]) != 0:
            return skip_or_fail("%s -m venv fails" % sys.executable)
        py, script = os.path.join(venv, "bin", "python"), os.path.join(venv, "bin", "recap-driver")
        # from a copy: setuptools builds in the source tree (build/, *.egg-info)
        src = os.path.join(tmp, "drivers")
        shutil.copytree(drivers, src, ignore=shutil.ignore_patterns("tests", "benchmarks", "__pycache__", "build"))
        pip = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", src],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if pip.returncode != 0:
            print(pip.stdout)
            if "NewConnectionError" in pip.stdout or "No matching distribution" in pip.stdout:
                return skip_or_fail("pip cannot reach a package index to fetch setuptools")
            print("FAIL: pip install %s" % drivers)
            return 1
        for argv in ([py, "-m", "recap_drivers", "--help"], [script, "--help"]):
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp)
            print("$ %s\n%s" % (" ".join(argv[1:] if argv[0] == py else argv), p.stdout))
            if p.returncode != 0 or "--sut" not in p.stdout:
                print("FAIL: %s exited %d" % (" ".join(argv), p.returncode))
                return 1
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "list":
        return list_tests(os.path.abspath(argv[2]))
    if len(argv) == 3 and argv[1] == "run":
        return run_test(argv[2])
    if len(argv) == 4 and argv[1] == "tool" and argv[2] in ("ruff", "mypy"):
        return run_tool(argv[2], os.path.abspath(argv[3]))
    if len(argv) == 3 and argv[1] == "package":
        return check_package(os.path.abspath(argv[2]))
    print("usage: driver-tests.py list DRIVERS | run TEST_ID | tool ruff|mypy DRIVERS | package DRIVERS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
