"""Logging in the processes that run bert-pipeline's work for a driver: the Ray Train workers of a step.

Airflow 3's task supervisor records a task's stdout at level info and its stderr at level error, and Ray re-prints
its workers' stdout on the driver's stdout and their stderr on the driver's stderr. Python logging writes to stderr
(logging.basicConfig, and the console handler Ray Train puts on a worker's root logger), so under Airflow every line
of a worker (progress, learning checks, "model written to ...") came out as an error, red in the UI. In a process
working for an Airflow task, records below ERROR therefore go to stdout, and errors with their tracebacks stay on
stderr. Elsewhere nothing changes: a command's stdout carries its result (`bert-pipeline pretrain` prints its
manifest as JSON there).

The Airflow task process itself needs none of this: Airflow configures its logging, and the records keep their
levels.
"""

from __future__ import annotations

import logging
import os
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Exported by Airflow's task runner into a task's environment, and passed on by the driver to its Ray workers
# (bert_core.launch.ray_cluster.FORWARDED_ENV).
AIRFLOW_RUN_ENV = "AIRFLOW_CTX_DAG_RUN_ID"


def for_airflow_task() -> bool:
    """Whether this process works for an Airflow task (the task process, or a Ray worker of its driver)."""
    return bool(os.environ.get(AIRFLOW_RUN_ENV))


class _BelowError(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


class _StdoutTwin(logging.StreamHandler):
    """Takes the records below ERROR off a stderr handler, to stdout."""


def _on_stderr(handler: logging.Handler) -> bool:
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, (logging.FileHandler, _StdoutTwin))
            and handler.stream in (sys.stderr, sys.__stderr__))


def info_to_stdout(logger: logging.Logger) -> None:
    """Each stderr handler of `logger` keeps only ERROR and above; a twin on stdout, in FORMAT (the level names
    stay readable in the task log), takes the records below ERROR that it would have written. Once per logger."""
    if any(isinstance(h, _StdoutTwin) for h in logger.handlers):
        return
    for handler in [h for h in logger.handlers if _on_stderr(h)]:
        twin = _StdoutTwin(sys.stdout)
        twin.setLevel(handler.level)
        twin.setFormatter(logging.Formatter(FORMAT))
        for kept in handler.filters:  # e.g. Ray Train's log-level filter (RunConfig's LoggingConfig)
            twin.addFilter(kept)
        twin.addFilter(_BelowError())
        handler.setLevel(max(handler.level, logging.ERROR))
        logger.addHandler(twin)


def configure(level: int = logging.INFO) -> None:
    """logging.basicConfig(level=level, format=FORMAT) (nothing when the root logger has handlers: Ray Train
    gives its workers' one a console handler of its own); then, in a process that works for an Airflow task, the
    records below ERROR go to stdout (info_to_stdout)."""
    logging.basicConfig(level=level, format=FORMAT)
    if for_airflow_task():
        info_to_stdout(logging.getLogger())
