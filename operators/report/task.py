"""The `report` task each pipeline DAG ends with (bert_demo, bert_pretraining, bert_finetune): the run's
report.html, built from its work directory by the run itself, so a run triggered in the Airflow UI or over the
REST API gets one as a run of `bert-pipeline demo` / `run` does.

It is an Airflow teardown task downstream of every other task: it runs when they are all done, whatever their
outcome (a failed run's report shows how far it got; so does a run stopped by Ctrl-C, after which no other
task starts), and, as teardowns are, it is left out of the DAG run's
state: the run's outcome is its work's, and a report that could not be built is a failed `report` task in a run
that otherwise stands. No retries: what failed (a record it cannot read, an MLflow server that is down) is in its
log, and `bert-pipeline report WORK_DIR` builds it again. First, it ends `KILLED` the DAG run's MLflow runs still
`RUNNING`: their tasks are done, so a killed process left them so (operators.left_running).
"""

from __future__ import annotations

import logging
from typing import Any

from operators.airflow_tasks import bert_task
from operators.report import TASK_ID

log = logging.getLogger(__name__)


@bert_task(task_id=TASK_ID, retries=0, runs_when_stopped=True)
def report() -> dict[str, Any]:
    # The run's directory as the task records find it (not from the plan's result: a run whose plan failed has
    # a report too, showing that).
    from airflow.sdk import get_current_context

    from operators.left_running import end_and_record
    from operators.report.build import from_run_dir
    from operators.run_records import context_run_dir

    context = get_current_context()
    # Every other task is done: a run of this DAG run still RUNNING was left so by a killed process.
    end_and_record(context, whole_run=True)
    built = from_run_dir(context_run_dir(context))
    logged = built.mlflow
    log.info("Report: %s", built.path)
    if logged is not None:
        log.info("Report in MLflow (experiment bert-runs): %s", logged.page or f"run {logged.run_id}")
    return {"report": built.path, "mlflow_run_id": logged.run_id if logged else None,
            "mlflow_page": logged.page if logged else None}


def at_the_end() -> Any:
    """The report task, a teardown downstream of every other task of the DAG being defined: call it last in the
    DAG function. Every task, not only the last: a teardown waits for its direct upstream only, and Airflow
    marks a last task `upstream_failed` as soon as one branch fails, while other branches still run (seen: a
    bert_finetune whose sst-2 failed reported "no model fine-tuned" while squad was still training). The DAG
    run's state still comes from the same last tasks: a task whose only downstream is a teardown counts as a
    leaf (Airflow's DagRun._tis_for_dagrun_state)."""
    built = report().as_teardown()
    task = built.operator
    task.set_upstream([other for other in task.dag.tasks if other is not task])
    return built
