"""`bert-pipeline run DAG_ID`: run one of the DAGs once, in this process, the way `bert-pipeline demo` runs
bert_demo: Airflow's dag.test() on the embedded home (tasks here, local Ray unless RAY_ADDRESS, the MLflow sqlite
store or, while a stack is up on the home, the stack's MLflow server), with the run view on the terminal and
everything the components log in the run's log file.

The DAG's Params are its settings: `--conf` / `--conf-file` give them as JSON, exactly what "Trigger DAG" in the
Airflow UI takes; the DAG's `plan` task checks them before any work. `bert-pipeline stack up --home HOME` shows
these runs in the Airflow UI afterwards.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from bert_pipeline.dags_folder import dag_ids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dag_id", metavar="DAG_ID", choices=dag_ids(),
                        help="the DAG to run: " + ", ".join(dag_ids()))
    add_run_arguments(parser)
    parser.add_argument("--conf-file", metavar="PATH",
                        help="a JSON file with the DAG params; --conf entries win over it")


def add_run_arguments(parser: argparse.ArgumentParser, example: str = '{"num_steps": 10}') -> None:
    """The flags `run` and `demo` share."""
    parser.add_argument("--conf", metavar="JSON",
                        help='DAG params as a JSON object, as "Trigger DAG" in the Airflow UI takes them, e.g. '
                             f"'{example}' (an unknown param fails the run's plan task, naming it)")
    parser.add_argument("--home", metavar="DIR",
                        help="embedded home for Airflow, MLflow, Ray results and the runs' outputs "
                             "(default: $BERT_PIPELINE_HOME or ./.bert-pipeline)")
    parser.add_argument("--verbose", action="store_true",
                        help="stream everything the components log (Airflow's task logs, Ray, MLflow, ...) to the "
                             "terminal, with a line per finished task, instead of the live view; it goes to the "
                             "run's log file either way")


def stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")


def run(args: argparse.Namespace) -> int:
    from bert_pipeline.dag_run import conf_from, run_dag, run_dir_for
    from bert_pipeline.run_view import duration
    from bert_pipeline.stack.state import stack_home
    from operators.locations import RUN_KINDS

    conf = conf_from(args.conf, args.conf_file)
    home = stack_home(args.home)
    when = stamp()
    # The work dir the DAG would choose itself (HOME/<kind>/...), named here so that the run's log, record and
    # report sit beside its outputs.
    conf.setdefault("work_dir", str(home / RUN_KINDS.get(args.dag_id, args.dag_id) / when))
    result = run_dag(args.dag_id, conf, run_dir_for(home, args.dag_id, conf, when), home=home,
                     verbose=args.verbose)
    took = duration((result.ended_at - result.started_at).total_seconds())
    print(f"\n{result.dag_id} {result.outcome} in {took} (run {result.run_id}).")
    print(f"Run record (tasks, states, figures): {result.run_dir / 'run.json'}")
    if result.succeeded:
        print(f"Log: {result.log_path}")
    if result.report:
        print(result.report)
    print(airflow_ui_line(home))
    return 0 if result.succeeded else 1


def airflow_ui_line(home: Path) -> str:
    """Where this home's runs show in the Airflow UI: the stack's, when one is up on the home (on its own port),
    else the command that starts one."""
    from bert_pipeline.embedded_home import stack_airflow_url
    from bert_pipeline.stack.state import DEFAULT_PORTS

    url = stack_airflow_url(home)
    if url:
        return f"Airflow UI on this home: {url}   (the stack up on {home})"
    return (f"Airflow UI on this home: bert-pipeline stack up --home {home}   "
            f"(then http://127.0.0.1:{DEFAULT_PORTS['airflow']})")
