"""Where a CLI-started DAG run's output goes: everything the components print or log into the run's log file,
the terminal kept for the run view.

The components write in every way there is: Airflow's structlog and task logs, Python logging handlers made
before the run, tqdm bars, warnings, MLflow, great-expectations, NLTK, Ray's C++ core (straight to file
descriptor 2), and the lines Ray forwards from its workers (log_to_driver) and the processes it starts. So the
redirection is at the file-descriptor level (fds 1 and 2 become the log file, which the Ray processes started
during the run inherit too), and sys.stdout/sys.stderr and the logging handlers that held them point at the log
as well (Python writers that bypass the fds, e.g. under pytest's capture). The view writes to a duplicate of the
original stdout. With `echo` (--verbose) a thread copies the log to that terminal as it grows, so it streams as
before the run view existed.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

# Set while the output goes to the log, unless the user set them: Ray's worker-line prefixes without color codes
# (a file, not a terminal); no MLflow artifact-download bars (a bar per registered model, redrawn into a file).
LOG_ENV = {"RAY_COLOR_PREFIX": "0", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Terminal:
    """Where the run view writes: the terminal (or pipe, or file) stdout was when the run started."""

    stream: TextIO
    is_tty: bool
    width: int

    def current_width(self) -> int:
        """The terminal's width now (it may have been resized), else the width it had."""
        if self.is_tty and not os.environ.get("COLUMNS"):
            with contextlib.suppress(OSError, ValueError):
                return os.get_terminal_size(self.stream.fileno()).columns or self.width
        return self.width


def _fileno(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):  # StringIO, a closed stream
        return None


def _terminal() -> tuple[Terminal, bool]:
    """The view's stream over a duplicate of stdout's fd (it survives the redirection; True: ours to close), or
    stdout itself when it has no fd (an in-memory stream)."""
    fd = _fileno(sys.stdout)
    if fd is None:
        return Terminal(sys.stdout, False, 100), False
    dup = os.dup(fd)
    is_tty = os.isatty(dup)
    width = shutil.get_terminal_size((100, 24)).columns  # $COLUMNS first
    if is_tty and not os.environ.get("COLUMNS"):
        with contextlib.suppress(OSError):
            width = os.get_terminal_size(dup).columns or width  # 0 on a pseudo-terminal nobody sized
    return Terminal(open(dup, "w", buffering=1, encoding="utf-8", errors="replace", closefd=True), is_tty, width), True


def _stream_handlers(streams: tuple[object, ...]) -> list[logging.StreamHandler]:
    loggers = [logging.getLogger()] + [v for v in logging.Logger.manager.loggerDict.values()
                                       if isinstance(v, logging.Logger)]
    return [h for lg in loggers for h in lg.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            and h.stream in streams]


class _Follower(threading.Thread):
    """Copies what is appended to the log to the terminal (--verbose), until stopped and drained."""

    def __init__(self, path: Path, start: int, out: TextIO):
        super().__init__(name="run-log-follower", daemon=True)
        self.path, self.start_at, self.out = path, start, out
        self.stopping = threading.Event()

    def run(self) -> None:
        with open(self.path, "rb") as log:
            log.seek(self.start_at)
            while True:
                chunk = log.read(1 << 16)
                if chunk:
                    self.out.write(chunk.decode("utf-8", errors="replace"))
                    self.out.flush()
                elif self.stopping.is_set():
                    return
                else:
                    time.sleep(0.2)


@contextlib.contextmanager
def output_to_log(log_path: Path, echo: bool = False) -> Iterator[Terminal]:
    """While the block runs, everything printed or logged in this process (and by processes it starts) is
    appended to `log_path`; yields the Terminal for the run view. Restores stdout/stderr, the logging handlers it
    re-pointed and the root logger's handlers afterwards."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    terminal, owned = _terminal()
    saved_fds = {fd: os.dup(fd) for fd in (1, 2)}
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    start = os.fstat(log_fd).st_size
    # Not closed afterwards: loggers configured during the run (Airflow's) may keep writing to it.
    log_stream = open(log_path, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115
    old_out, old_err = sys.stdout, sys.stderr
    handlers = _stream_handlers((old_out, old_err, sys.__stdout__, sys.__stderr__))
    handler_streams = [(h, h.stream) for h in handlers]
    root_handlers = list(logging.getLogger().handlers)
    env_before = {k: os.environ.get(k) for k in LOG_ENV}
    follower = _Follower(log_path, start, terminal.stream) if echo else None
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        sys.stdout = sys.stderr = log_stream
        for handler in handlers:
            handler.setStream(log_stream)
        for key, value in LOG_ENV.items():
            os.environ.setdefault(key, value)
        if follower:
            follower.start()
        yield terminal
    finally:
        for stream in (log_stream, sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        sys.stdout, sys.stderr = old_out, old_err
        for fd, saved in saved_fds.items():
            os.dup2(saved, fd)
            os.close(saved)
        os.close(log_fd)
        for handler, stream in handler_streams:
            handler.setStream(stream)
        logging.getLogger().handlers[:] = root_handlers
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if follower:
            follower.stopping.set()
            follower.join(timeout=10)
        terminal.stream.flush()
        if owned:
            terminal.stream.close()


def clean_line(line: str) -> str:
    """A log line as a person reads it: the last redraw of a progress bar, no color codes."""
    return ANSI.sub("", line.rstrip("\n").split("\r")[-1]).rstrip()
