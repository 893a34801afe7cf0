"""Ending a command's process: an orderly shutdown that never runs the interpreter's teardown.

An intermittent segmentation fault has been seen *after* all work was done, in a non-main native thread
during interpreter teardown (issue 15, item 3): the process holds thread pools of several native
libraries (torch's OpenMP pool, ONNX Runtime's pools, the Rust tokenizer's, Ray's core worker and gRPC
threads), and C++ static destructors running at `exit()` free memory that one of those threads can
still touch. A command that finished its work must not then fail its Airflow task or Ray job.

So a command process ends like this: Python's own shutdown work runs in the usual order (non-daemon
threads joined, then every `atexit` handler: Ray's shutdown, MLflow's asynchronous logging flush,
logging's flush, multiprocessing's child clean-up, temp-file removal), standard streams are flushed,
and the process leaves with `os._exit`, which skips module and object teardown and native destructors.
The operating system frees the rest. This does not cover a race inside an atexit handler: the one crash
caught in a core so far (2026-11-24, a Ray worker) was Ray's OpenCensus harvester thread during Ray's own
atexit `ray.shutdown()`; its root cause is still open (issue 15).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced stream: nothing left to save
            pass


def exit_process(status: int) -> None:
    """Shut down as Python would (threads, atexit handlers), then leave with `status`, skipping teardown."""
    _flush()
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    try:
        atexit._run_exitfuncs()  # the handlers the interpreter would run next, in the same order
    finally:
        _flush()
        os._exit(status)


def run_and_exit(main: Callable[[], int | None]) -> None:
    """Run a command's `main` and end the process with its status (1 and a traceback on an uncaught error)."""
    try:
        status = main()
        code = 0 if status is None else int(status)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:  # sys.exit("message"): printed, status 1, as the interpreter does
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:  # noqa: BLE001  (printed as the interpreter would, then the same orderly exit)
        traceback.print_exc()
        code = 1
    exit_process(code)
