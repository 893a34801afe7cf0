"""tests/worker_crashes.py: a worker that crashes after its last report fails the run; a clean run stays green."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import REPO

CONFTEST = """
import atexit, ctypes, faulthandler, os, resource
faulthandler.disable()  # the crash is the point here, not its traceback
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # nor a core file
if os.environ.get("PYTEST_XDIST_WORKER") == "gw1" and os.environ.get("CRASH_AT_EXIT"):
    atexit.register(ctypes.string_at, 0)  # reads address 0 during shutdown: SIGSEGV
"""


def _run(tmp_path, crash: bool) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_two.py").write_text("def test_a():\n    pass\n\n\ndef test_b():\n    pass\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), **({"CRASH_AT_EXIT": "1"} if crash else {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "tests.worker_crashes",
                           "-p", "no:cacheprovider", "-o", "faulthandler_timeout=0", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("crash", [False, True])
def test_a_worker_crash_after_its_last_report_fails_the_run(tmp_path, crash):
    done = _run(tmp_path, crash)
    out = done.stdout + done.stderr
    assert "2 passed" in out, out
    if crash:
        assert done.returncode == pytest.ExitCode.TESTS_FAILED, out
        assert "worker process(es) crashed: gw1: SIGSEGV" in out
        # Its stacks follow the summary line: the crashing atexit handler's frame, under the worker's orderly exit.
        stacks = out.split("gw1's stacks at the crash (faulthandler)")[1]
        assert "in string_at" in stacks and "in exit_process" in stacks, out
    else:
        assert done.returncode == 0, out
        assert "crashed" not in out
