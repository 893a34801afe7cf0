"""`bert-pipeline demo`: run the `bert_demo` Airflow DAG once, in this process, on the bundled tiny data.

Sets up an embedded home (BERT_PIPELINE_HOME, default ./.bert-pipeline): Airflow's home and metadata DB
under it (`airflow db migrate`, idempotent), the DAGs folder pointed at the `pipelines` package
(`airflow dags reserialize`), the MLflow sqlite store beside them; then runs the DAG with `dag.test()`
(tasks in this process, pretraining on a local Ray), writes the run's report.html (bert_pipeline/report) and
prints where everything is.

bert_core never imports Airflow: the DAG module is imported by name, after the environment is set.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.io import storage
from bert_pipeline.dags_folder import pipelines_dir

DAG_ID = "bert_demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--home", metavar="DIR",
                        help="embedded home for Airflow, MLflow, Ray results and the run's artifacts "
                             "(default: $BERT_PIPELINE_HOME or ./.bert-pipeline)")
    parser.add_argument("--work-dir", metavar="DIR_OR_URI",
                        help="where the run's artifacts go: a directory or an s3:// prefix (AWS_ENDPOINT_URL and the "
                             "usual AWS credentials apply) (default: HOME/demo/<UTC timestamp>)")
    parser.add_argument("--conf", metavar="JSON", default="{}",
                        help='DAG params to override, as JSON, e.g. \'{"pretrain_num_steps": 10}\'')


def _airflow(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "airflow", *args], capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise BertPipelineError(f"`airflow {' '.join(args)}` failed: " + " | ".join(tail))


def setup_home(home: str | os.PathLike | None = None) -> Path:
    """Point BERT_PIPELINE_HOME, AIRFLOW_HOME and the DAGs folder at the embedded home; migrate and serialize."""
    root = Path(home or os.environ.get("BERT_PIPELINE_HOME") or Path.cwd() / ".bert-pipeline").absolute()
    root.mkdir(parents=True, exist_ok=True)
    os.environ["BERT_PIPELINE_HOME"] = str(root)
    os.environ["AIRFLOW_HOME"] = str(root / "airflow")
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(pipelines_dir())
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, loopback-only Ray for the demo
    _airflow("db", "migrate")
    _airflow("dags", "reserialize")
    return root


def run_dag(conf: dict[str, Any]) -> Any:
    """Run the bert_demo DAG once with dag.test(); returns the DagRun. (Imported here: Airflow reads its
    home when first imported, which setup_home has set by now.)"""
    from pipelines import bert_demo

    return getattr(bert_demo, DAG_ID)().test(run_conf=conf)


def summary_text(home: Path, summary: dict[str, Any]) -> str:
    lines = ["", "bert_demo finished.", ""]
    for model in summary["models"]:
        metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(model["candidate_metrics"].items()))
        state = "champion" if model.get("promoted") else "not promoted: " + "; ".join(model.get("reasons", []))
        lines.append(f"  {model['name']} v{model['candidate']} ({state}): {metrics}")
    uri = summary["tracking_uri"]
    lines += [
        "",
        f"Artifacts (manifests, models, predictions): {summary['summary_file'].rsplit('/', 1)[0]}",
        f"Summary: {summary['summary_file']}",
        f"MLflow UI:  mlflow ui --backend-store-uri {uri} --port 5000   (then http://127.0.0.1:5000)",
        f"Airflow UI, MLflow server and a Ray head together: bert-pipeline stack up --home {home}   "
        "(then http://127.0.0.1:8080; `bert-pipeline stack down --home ...` stops them)",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        conf = json.loads(args.conf)
    except json.JSONDecodeError as exc:
        raise BertPipelineError(f"--conf: not JSON ({exc.msg})") from None
    home = setup_home(args.home)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    if args.work_dir:
        conf["work_dir"] = args.work_dir
    conf.setdefault("work_dir", str(home / "demo" / stamp))
    dag_run = run_dag(conf)
    state = str(getattr(dag_run, "state", ""))
    summary_file = storage.join(conf["work_dir"], "demo_summary.json")
    # An s3:// work dir is read with the credentials the tasks used, which may come from an Airflow connection.
    from operators.airflow_tasks import s3_credentials_from_connection

    try:
        with s3_credentials_from_connection():
            summary = json.loads(storage.read_text(summary_file)) if state.endswith("success") else None
    except FileNotFoundError:
        summary = None
    if summary is None:
        raise BertPipelineError(f"the bert_demo run ended in state {state or 'unknown'}; see the task logs above "
                                f"and the artifacts under {conf['work_dir']}")
    from bert_pipeline.report.build import from_run_dir

    with s3_credentials_from_connection():
        report = from_run_dir(conf["work_dir"])  # report.html in the run dir and its MLflow run (bert-runs)
    print(summary_text(home, summary))
    print(f"Report (open it in a browser): {report.path}")
    return 0
