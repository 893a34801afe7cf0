"""The embedded home in which `bert-pipeline demo` and `bert-pipeline run` run DAGs in this process.

BERT_PIPELINE_HOME (default ./.bert-pipeline, or --home): Airflow's home and metadata DB under it (`airflow db
migrate`, idempotent), the DAGs folder pointed at the `pipelines` package (`airflow dags reserialize`), the MLflow
sqlite store, Ray results and the runs' outputs beside them. The stack (`bert-pipeline stack up`) serves the same
home, so its Airflow UI shows the runs started here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_pipeline.dags_folder import pipelines_dir
from bert_pipeline.stack.state import stack_home


def _airflow(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "airflow", *args], capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise BertPipelineError(f"`airflow {' '.join(args)}` failed: " + " | ".join(tail))


def setup_home(home: str | os.PathLike | None = None, serialize: bool = True) -> Path:
    """Point BERT_PIPELINE_HOME, AIRFLOW_HOME and the DAGs folder at the embedded home; migrate, and serialize the
    DAGs (`serialize=False` where a dag.test() follows: it writes every DAG of the folder to the DB itself).
    Call it before anything imports Airflow in this process (Airflow reads its home when first imported)."""
    root = stack_home(str(home) if home else None)
    root.mkdir(parents=True, exist_ok=True)
    os.environ["BERT_PIPELINE_HOME"] = str(root)
    os.environ["AIRFLOW_HOME"] = str(root / "airflow")
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(pipelines_dir())
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local, loopback-only Ray for in-process runs
    _airflow("db", "migrate")
    if serialize:
        _airflow("dags", "reserialize")
    return root
