"""A pytest plugin: the run fails when an xdist worker process died of a crash signal, including after it
reported its last test, and the crash's native and Python stacks are printed at the end of the run.

pytest-xdist reads its workers' results over a channel and never looks at how their processes ended, so a
worker that segfaults in the interpreter's teardown, once everything is reported, leaves a green run
(issue 15, item 3: a crash at process exit). The harness therefore keeps each worker's process and, once
xdist has shut them down, fails the run for any that ended by SIGSEGV, SIGABRT, SIGBUS, SIGILL or SIGFPE.
A worker that xdist itself had to kill (SIGKILL after its exit timeout) is not a crash.

A worker is a Ray driver (the in-process `ray.init` of the Ray tests), so it ends as every Ray driver of the
product does (`bert_pipeline.process_exit`): the atexit handlers, Ray's shutdown among them, then `os._exit`,
never the C++ teardown that Ray's OpenCensus harvester thread races (docs/architecture.md, section 6; a CI run
(stop 45's) had gw1 crash after its last report). A crash in Ray's shutdown itself or in any other atexit
handler still fails the run.

pytest's own faulthandler is off again by the time a worker ends (its pytest_unconfigure), so a crash at exit
printed no stack; and what a worker prints to stderr is far from the end of a long run's log. Each worker
therefore writes a crash's stacks (faulthandler, all threads) to a file of its own at its exit, and the summary
line is followed by that file.
"""

from __future__ import annotations

import atexit
import faulthandler
import os
import signal
import tempfile
from pathlib import Path

import pytest

CRASH_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
_workers: dict[str, object] = {}  # controller: worker id -> its process
_fault_files: dict[str, Path] = {}  # controller: worker id -> where that worker writes a crash's stacks at exit
_open_fault_file = []  # worker: the open file faulthandler writes to (kept open until the process ends)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist (controller side), before a worker starts: the file it writes a crash's stacks to at its exit."""
    fd, path = tempfile.mkstemp(prefix=f"pytest-{node.gateway.id}-", suffix=".crash.txt")
    os.close(fd)
    _fault_files[node.gateway.id] = Path(path)
    node.workerinput["crash_stack_file"] = path


@pytest.hookimpl(optionalhook=True)
def pytest_testnodeready(node) -> None:
    """xdist (controller side): a worker is up; keep its process to read its exit status at the end."""
    popen = getattr(getattr(node.gateway, "_io", None), "popen", None)
    if popen is not None:
        _workers[node.gateway.id] = popen


def _end_worker_process() -> None:
    """A worker's last atexit handler to be registered, so the first to run: stacks to the file on a crash from
    here on, then the orderly exit (the remaining atexit handlers, then os._exit)."""
    from bert_pipeline.process_exit import exit_process

    atexit.unregister(_end_worker_process)  # exit_process runs the remaining handlers; not this one again
    if _open_fault_file:
        faulthandler.enable(file=_open_fault_file[0], all_threads=True)
    exit_process(0)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Worker: arrange its exit. Controller: after xdist's own sessionfinish, which shuts the workers down and
    waits for their processes, fail the run for any that crashed, with its stacks."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None:
        path = workerinput.get("crash_stack_file")
        if path:
            _open_fault_file.append(open(path, "w"))  # noqa: SIM115  (open until the process ends)
        # Registered now, after Ray registered its own shutdown at import, so it runs first (atexit is LIFO).
        atexit.register(_end_worker_process)
        return
    crashed = crashed_workers()
    if crashed:
        writer = session.config.get_terminal_writer()
        writer.line()
        writer.line(f"pytest-xdist worker process(es) crashed: {', '.join(crashed)} (with no failed test, the "
                    "crash came after the worker's last report)", red=True, bold=True)
        for name in (entry.split(":")[0] for entry in crashed):
            stacks = _read(_fault_files.get(name))
            writer.line(f"--- {name}'s stacks at the crash (faulthandler) ---" if stacks else
                        f"--- {name} wrote no stack (it crashed before its exit handlers ran: see the "
                        "faulthandler output above) ---")
            if stacks:
                writer.line(stacks.rstrip())
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    for path in _fault_files.values():
        path.unlink(missing_ok=True)


def _read(path: Path | None) -> str:
    try:
        return path.read_text(errors="replace") if path else ""
    except OSError:
        return ""


def crashed_workers() -> list[str]:
    """'gw0: SIGSEGV' for each worker process that has ended by a crash signal."""
    crashed = []
    for name, popen in sorted(_workers.items()):
        code = popen.poll()
        if code is not None and code < 0 and -code in CRASH_SIGNALS:
            crashed.append(f"{name}: {signal.Signals(-code).name}")
    return crashed
