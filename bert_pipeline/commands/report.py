"""`bert-pipeline report RUN_DIR_OR_MLFLOW_RUN`: build a DAG run's report.html (operators/report) again.

From a run's work directory (local or s3://) the records are gathered afresh: its steps' manifests and metrics,
the registry's decisions, the tasks' records, and the curves from MLflow. From an MLflow run (the DAG run's run in
the `bert-runs` experiment, or any of its steps' runs) the records logged with the report are drawn again.
"""

from __future__ import annotations

import argparse

from bert_core.io import storage
from bert_pipeline.commands.config_flags import HOME_MLFLOW


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", metavar="RUN_DIR_OR_MLFLOW_RUN",
                        help="a DAG run's work directory (e.g. .bert-pipeline/demo/20261124T101500, or an s3:// "
                             "prefix), or an MLflow run: runs:/RUN_ID, a 32-hex run id, or an MLflow UI address "
                             "(http://host:5000/#/experiments/N/runs/RUN_ID) of the run's report run or of any of "
                             "its pretraining / fine-tuning runs")
    parser.add_argument("--output", metavar="FILE_OR_URI",
                        help="where to write the report (default: RUN_DIR/report.html for a run directory; "
                             "./report.html for an MLflow run)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help=f"the MLflow store of the run's curves, registry and report run (default: the store "
                             f"the run's tasks recorded, else {HOME_MLFLOW}; an MLflow UI address names its own)")
    parser.add_argument("--no-mlflow", dest="log_to_mlflow", action="store_false",
                        help="do not log the report to the DAG run's MLflow run (experiment bert-runs); by default "
                             "it is logged there, replacing an earlier one")


def _names_its_store(args: argparse.Namespace) -> bool:
    """--tracking-uri, or an MLflow UI address (its server is the store): the home's stack is not asked then."""
    return bool(args.tracking_uri) or args.source.startswith(("http://", "https://"))


def run(args: argparse.Namespace) -> int:
    from bert_pipeline.embedded_home import use_stack_mlflow
    from bert_pipeline.stack.state import stack_home
    from operators.report.build import build

    if not _names_its_store(args):
        # The home's MLflow is the stack's server while one is up there: what it logged, only it can serve.
        use_stack_mlflow(stack_home(None))
    if storage.is_s3(args.source) or storage.is_s3(args.output or ""):
        # The credentials the tasks had, which may come from an Airflow connection.
        from operators.airflow_tasks import s3_credentials_from_connection

        with s3_credentials_from_connection():
            built = build(args.source, args.tracking_uri, args.output, args.log_to_mlflow)
    else:
        built = build(args.source, args.tracking_uri, args.output, args.log_to_mlflow)
    print(f"Report: {built.path}")
    if built.mlflow:
        print(f"Logged to MLflow run {built.mlflow.run_id} (experiment bert-runs)"
              + (f": {built.mlflow.page}" if built.mlflow.page else ""))
    return 0
