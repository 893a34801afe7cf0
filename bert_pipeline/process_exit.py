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
The operating system frees the rest.

The one crash caught in a core (2026-11-24) was Ray's: every Ray process, at `ray.shutdown()`, starts
an OpenCensus harvester thread (`CoreWorker::Disconnect` -> `StatsExporter::ExportNow` creates it), which
then lives through the rest of the process's end, touching Ray's metric state while that is torn down
(docs/architecture.md, section 6). Leaving with `os._exit` right after the atexit handlers keeps that
thread away from the C++ teardown; Ray's own worker processes are Ray's and end their own way.
"""

from __future__ import annotations

import atexit
import contextlib
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
    """Shut down as Python would (threading's exit hooks and threads, atexit handlers), then leave with `status`,
    skipping teardown."""
    _flush()
    # What the interpreter's own shutdown runs first (threading._shutdown): the hooks registered with
    # threading._register_atexit, then every non-daemon thread joined. concurrent.futures stops an executor's
    # idle workers in such a hook: joining them without it waits forever (MLflow keeps a module-level executor
    # for artifact transfers).
    threading._shutdown()
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
    except BrokenPipeError:
        # The reader of stdout left (`bert-pipeline zoo | head -3`): nothing to report, and what is still buffered
        # goes nowhere rather than raising again at the flush (Python's documented handling of SIGPIPE's EPIPE).
        with contextlib.suppress(OSError, ValueError, AttributeError):  # a stream with no descriptor: nothing to point
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except BaseException:  # noqa: BLE001  (printed as the interpreter would, then the same orderly exit)
        traceback.print_exc()
        code = 1
    exit_process(code)
