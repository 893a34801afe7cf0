"""Logging in the processes that run bert-pipeline's work for a driver: the Ray Train workers of a step.

Airflow 3's task supervisor records a task's stdout at level info and its stderr at level error, and Ray re-prints
its workers' stdout on the driver's stdout and their stderr on the driver's stderr. Python logging writes to stderr
(logging.basicConfig, and the console handler Ray Train puts on a worker's root logger), so under Airflow every line
of a worker (progress, learning checks, "model written to ...") came out as an error, red in the UI. In a process
working for an Airflow task, records below ERROR therefore go to stdout, and errors with their tracebacks stay on
stderr. Elsewhere nothing changes: a command's stdout carries its result (`bert-pipeline pretrain` prints its
manifest as JSON there).

MLflow gives its own loggers a handler of their own on import (`mlflow`, propagation off, on a stream that writes to
stderr), so on a worker its lines ("INFO mlflow.pyfunc: Validating input example ...", its warnings) were errors in
the task log too: configure() sends those below ERROR to stdout as well, whether MLflow is imported before it (its
handlers get a twin) or after (MLflow is told not to configure its loggers, MLFLOW_CONFIGURE_LOGGING=false, so
they reach the root logger's handlers; alembic's migration chatter stays at WARNING, as MLflow would set it).

The Airflow task process itself needs none of this for our loggers: Airflow configures its logging, and the records
keep their levels. The driver's `ray` logger (its own stderr handler, no propagation, set when ray is imported:
"Started a local Ray instance", "Connecting to existing Ray cluster", "Connected to Ray cluster. View the dashboard
at ...") gets the stdout twin from bert_core.launch.ray_cluster.connect. Ray's other lines are not ours to route
here, and still come out as errors under Airflow: Ray Train's
controller actor, where none of our code runs ("(TrainController pid=...) Requesting resources ...", "Started
training worker group ..."), and Ray Train's `ray.train` logger on a worker before the step's function (and this
configure()) runs ("(RayTrainWorker pid=...) Setting up process group ...").
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


# The loggers MLflow gives a handler of its own when imported (mlflow.utils.logging_utils._configure_mlflow_loggers).
MLFLOW_LOGGERS = ("mlflow", "sqlalchemy.engine", "alembic", "huey")
MLFLOW_CONFIGURE_ENV = "MLFLOW_CONFIGURE_LOGGING"


def _stderr_streams() -> tuple:
    # MLflow's handlers write to a stream of its own that forwards to sys.stderr at each write.
    mlflow_logging = sys.modules.get("mlflow.utils.logging_utils")
    mlflow_stream = getattr(mlflow_logging, "MLFLOW_LOGGING_STREAM", None)
    return tuple(s for s in (sys.stderr, sys.__stderr__, mlflow_stream) if s is not None)


def _on_stderr(handler: logging.Handler) -> bool:
    return (isinstance(handler, logging.StreamHandler) and not isinstance(handler, (logging.FileHandler, _StdoutTwin))
            and any(handler.stream is s for s in _stderr_streams()))


def info_to_stdout(logger: logging.Logger) -> None:
    """Each stderr handler of `logger` keeps only ERROR and above; a twin on stdout, in FORMAT (the level names
    stay readable in the task log), takes the records below ERROR that it would have written. Once per logger."""
    if any(isinstance(h, _StdoutTwin) for h in logger.handlers):
        return
    for handler in [h for h in logger.handlers if _on_stderr(h)]:
        # A handler several loggers share (MLflow's) is raised to ERROR once; its twins keep its level before that.
        before = handler.__dict__.setdefault("_bert_level_before_error", handler.level)
        twin = _StdoutTwin(sys.stdout)
        twin.setLevel(before)
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
        _mlflow_info_to_stdout()


def _mlflow_info_to_stdout() -> None:
    """MLflow's loggers as the root logger's: their handlers twinned where MLflow is imported already, else MLflow
    leaves them without a handler of their own (unless MLFLOW_CONFIGURE_LOGGING is set) and they propagate."""
    if "mlflow" in sys.modules:
        for name in MLFLOW_LOGGERS:
            info_to_stdout(logging.getLogger(name))
        return
    if os.environ.setdefault(MLFLOW_CONFIGURE_ENV, "false") == "false":
        for name in MLFLOW_LOGGERS[1:]:
            logger = logging.getLogger(name)
            logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
