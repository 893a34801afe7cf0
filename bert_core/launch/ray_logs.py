"""Ray Train's own log lines in an Airflow task's log, at their level.

Airflow's supervisor records a task's stderr as errors, and Ray re-prints each Ray process's stderr on the
driver's stderr. Ray Train gives its `ray.train` logger a console handler on stderr, in the controller actor and in
each worker, so its info lines ("(TrainController) Attempting to start training worker group ...", "(RayTrainWorker)
Setting up process group ...") were red lines in every training task's log, beside our own info lines, which
bert_core.logs already sends to stdout. `TaskLogLevels` does the same for Ray Train's loggers, in the processes
where Ray Train configures them, right after it has (its controller and worker callbacks); Ray Train's errors and
their tracebacks stay on stderr.
"""

from __future__ import annotations

import logging

from ray.train.v2._internal.execution.callback import ControllerCallback, WorkerCallback

from bert_core import logs

RAY_TRAIN_LOGGER = "ray.train"


class TaskLogLevels(ControllerCallback, WorkerCallback):
    """A RunConfig callback for runs driven from an Airflow task (logs.for_airflow_task() on the driver)."""

    def after_controller_start(self, train_run_context) -> None:
        logs.info_to_stdout(logging.getLogger(RAY_TRAIN_LOGGER))

    def after_init_train_context(self) -> None:
        # The worker's root logger has Ray Train's console handler too (logs.configure() does it again, harmlessly).
        logs.info_to_stdout(logging.getLogger(RAY_TRAIN_LOGGER))
        logs.info_to_stdout(logging.getLogger())


class QuietReports(WorkerCallback):
    """Ray Train logs every ray.train.report() of every worker at INFO: "Reporting training result 7:
    TrainingReport(checkpoint=Checkpoint(filesystem=s3, path=...), metrics={'step': 350, 'loss': 7.854103613721914,
    'mlm_loss': ..., ...}, validation=False) from rank 1", a 400-character line per rank per report, so a run of 2
    workers reporting every 50 steps printed two of them beside each of our own step lines (which say the same
    figures, rounded, once). Its logger (named after its file) is set to WARNING in each worker; Ray Train's
    "Checkpoint successfully created at: ..." (one per checkpoint, rank 0) stays."""

    def after_init_train_context(self) -> None:
        from ray.train.v2._internal.execution import context

        context.logger.setLevel(logging.WARNING)


def callbacks() -> list[ControllerCallback | WorkerCallback]:
    """QuietReports, and TaskLogLevels where this driver works for an Airflow task (a command's terminal shows
    stderr as it is)."""
    return [QuietReports(), *([TaskLogLevels()] if logs.for_airflow_task() else [])]
