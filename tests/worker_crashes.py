"""A pytest plugin: the run fails when an xdist worker process died of a crash signal, including after it
reported its last test.

pytest-xdist reads its workers' results over a channel and never looks at how their processes ended, so a
worker that segfaults in the interpreter's teardown, once everything is reported, leaves a green run
(issue 15, item 3: a crash at process exit). The harness therefore keeps each worker's process and, once
xdist has shut them down, fails the run for any that ended by SIGSEGV, SIGABRT, SIGBUS, SIGILL or SIGFPE.
A worker that xdist itself had to kill (SIGKILL after its exit timeout) is not a crash.
"""

from __future__ import annotations

import signal

import pytest

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
_workers: dict[str, object] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodeready(node) -> None:
    """xdist (controller side): a worker is up; keep its process to read its exit status at the end."""
    popen = getattr(getattr(node.gateway, "_io", None), "popen", None)
    if popen is not None:
        _workers[node.gateway.id] = popen


def crashed_workers() -> list[str]:
    """'gw0: SIGSEGV' for each worker process that has ended by a crash signal."""
    crashed = []
    for name, popen in sorted(_workers.items()):
        code = popen.poll()
        if code is not None and code < 0 and -code in CRASH_SIGNALS:
            crashed.append(f"{name}: {signal.Signals(-code).name}")
    return crashed


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After xdist's own sessionfinish, which shuts the workers down and waits for their processes."""
    crashed = crashed_workers()
    if crashed:
        writer = session.config.get_terminal_writer()
        writer.line(f"pytest-xdist worker process(es) crashed: {', '.join(crashed)} (see the faulthandler "
                    "output above; with no failed test, the crash came after the worker's last report)",
                    red=True, bold=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
