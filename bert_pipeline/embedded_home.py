"""The embedded home in which `bert-pipeline demo` and `bert-pipeline run` run DAGs in this process.

BERT_PIPELINE_HOME (default ./.bert-pipeline, or --home): Airflow's home and metadata DB under it (`airflow db
migrate`, idempotent), the DAGs folder pointed at the `pipelines` package (`airflow dags reserialize`), the MLflow
sqlite store, Ray results and the runs' outputs beside them. The stack (`bert-pipeline stack up`) serves the same
home, so its Airflow UI shows the runs started here.

While a stack is up on the home, its MLflow server is the home's MLflow (MLFLOW_TRACKING_URI, unless the user set
it): the experiments the server creates keep their artifacts at `mlflow-artifacts:/N`, which only the server can
resolve, so logging to the sqlite file under it fails as soon as an artifact is written.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_pipeline.dags_folder import pipelines_dir
from bert_pipeline.stack import processes, ray_head
from bert_pipeline.stack.health import http_ok
from bert_pipeline.stack.service import Record
from bert_pipeline.stack.state import Stack, stack_home

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
# The value use_stack_mlflow last gave MLFLOW_TRACKING_URI: that one is ours to replace (another home in the same
# process); any other value was set by the user and is kept.
_stack_uri_set: str | None = None


def _airflow(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "airflow", *args], capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise BertPipelineError(f"`airflow {' '.join(args)}` failed: " + " | ".join(tail))


def setup_home(home: str | os.PathLike | None = None, serialize: bool = True) -> Path:
    """Point BERT_PIPELINE_HOME, AIRFLOW_HOME and the DAGs folder at the embedded home, and MLflow at the stack's
    server when one is up there (use_stack_mlflow); migrate, and serialize the DAGs (`serialize=False` where a
    dag.test() follows: it writes every DAG of the folder to the DB itself).
    Call it before anything imports Airflow in this process (Airflow reads its home when first imported)."""
    root = stack_home(str(home) if home else None)
    root.mkdir(parents=True, exist_ok=True)
    os.environ["BERT_PIPELINE_HOME"] = str(root)
    use_stack_mlflow(root)
    os.environ["AIRFLOW_HOME"] = str(root / "airflow")
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(pipelines_dir())
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    if not os.environ.get("RAY_AUTH_MODE"):
        # The run's local Ray listens on every interface (Ray 2.60 binds its GCS and raylet so): it checks the
        # home's token, as the stack's head does (docs/stack.md). RAY_AUTH_MODE set by the user is theirs.
        os.environ.update(ray_head.auth_env(root))
    _airflow("db", "migrate")
    if serialize:
        _airflow("dags", "reserialize")
    return root


def use_stack_mlflow(root: Path) -> str | None:
    """Set MLFLOW_TRACKING_URI to the MLflow server of the stack up on the home `root`, unless the user set the
    variable; returns the URI set, or None where MLflow is left as it was (the user's URI, or the home's sqlite
    store). An error where neither the server nor the sqlite store can be used (stack_tracking_uri)."""
    global _stack_uri_set
    current = os.environ.get(TRACKING_URI_ENV)
    if current and current != _stack_uri_set:
        return None
    os.environ.pop(TRACKING_URI_ENV, None)
    _stack_uri_set = stack_tracking_uri(root)
    if _stack_uri_set:
        os.environ[TRACKING_URI_ENV] = _stack_uri_set
    return _stack_uri_set


def stack_tracking_uri(root: Path) -> str | None:
    """The URL of the MLflow server of the stack recorded on the home `root` when it answers. None when no stack
    is recorded there, or when its server is down and the home's sqlite store is safe to use in its place: the
    server's own store, with no experiment whose artifacts only the server can reach. An error otherwise."""
    record = Stack(root).load().services.get("mlflow")
    if record is None:
        # No stack (any more): a store its server made experiments in still needs that server for their artifacts.
        served = server_only_experiment(root / "mlflow.db")
        if served:
            raise BertPipelineError(f"sqlite:///{root / 'mlflow.db'}: experiment {served[0]!r} keeps its artifacts "
                                    f"through the MLflow server of a stack ({served[1]}), which the sqlite store "
                                    f"cannot reach: start it with `bert-pipeline stack up --home {root}`, or set "
                                    f"{TRACKING_URI_ENV} to the MLflow store to use")
        return None
    healthy, reason = http_ok(record)
    if healthy:
        return record["url"]
    stack = f"the stack on {root} (recorded in {root / 'stack' / 'state.json'})"
    restart = (f"start it with `bert-pipeline stack up --home {root}`, or set {TRACKING_URI_ENV} to the MLflow "
               "store to use")
    if processes.alive(record["pid"], record.get("started")):
        raise BertPipelineError(f"the MLflow server of {stack} runs (pid {record['pid']}) but does not answer: "
                                f"{reason}. Wait for `bert-pipeline stack status --home {root}` to show it "
                                f"healthy, or stop the stack (`bert-pipeline stack down --home {root}`) and "
                                f"{restart}")
    sqlite = f"sqlite:///{root / 'mlflow.db'}"
    if not _same_store(record.get("store", sqlite), root / "mlflow.db"):
        raise BertPipelineError(f"the MLflow server of {stack} is down ({reason}), and its runs are in "
                                f"{record['store']}, not in {sqlite}: {restart}; or stop the stack "
                                f"(`bert-pipeline stack down --home {root}`) to log to {sqlite}")
    served = server_only_experiment(root / "mlflow.db")
    if served:
        raise BertPipelineError(f"the MLflow server of {stack} is down ({reason}), and the experiments it "
                                f"created in {sqlite} keep their artifacts through it (experiment {served[0]!r} "
                                f"at {served[1]}), which the sqlite store cannot reach: {restart}")
    return None


def server_only_experiment(database: Path) -> tuple[str, str] | None:
    """(name, artifact location) of an experiment in the sqlite store `database` whose artifacts only an MLflow
    server resolves (an `mlflow-artifacts:` location, given by a server with --serve-artifacts); None when there
    is none, or no such store. The `Default` experiment (id 0) does not count: the server makes it with the store,
    and the pipeline logs only to experiments of its own."""
    if not database.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as connection:
            return connection.execute("SELECT name, artifact_location FROM experiments WHERE experiment_id != 0 "
                                      "AND artifact_location LIKE 'mlflow-artifacts:%' LIMIT 1").fetchone()
    except sqlite3.Error:  # not (yet) an MLflow store: nothing in it needs the server
        return None


def _same_store(store: str, database: Path) -> bool:
    """Whether the server's `store` (its record's) is the sqlite file `database`, however the path was spelt."""
    return store.startswith("sqlite:///") and Path(store[len("sqlite:///"):]).resolve() == database.resolve()


def refuse_production_home(root: Path | None, dag_id: str) -> None:
    """`run` and `demo` run a DAG in this process on the home's embedded Airflow (SQLite). While the production
    stack is up on the home, such a run went into another database than the stack's (PostgreSQL): its UI never
    showed it, its Celery workers never ran it, and the command still printed the stack's UI as where to look.
    An error before anything is written, saying how to run it on the stack."""
    from bert_pipeline.stack.profiles import DEFAULT

    home = stack_home(str(root) if root is not None else None)
    stack = Stack(home).load()
    profile = stack.state.get("profile", DEFAULT)
    if profile == DEFAULT or not any(processes.alive(r["pid"], r.get("started")) for r in stack.services.values()):
        return
    url = stack_airflow_url(home) or "the stack's Airflow API server"
    raise BertPipelineError(
        f"the {profile} stack is up on {home}: `bert-pipeline run` and `demo` run a DAG in this process on an "
        f"embedded SQLite Airflow, which that stack's Airflow (PostgreSQL) does not show and its Celery workers do "
        f"not run. Trigger {dag_id} on the stack: its UI ({url}), or its REST API, POST "
        f"{url}/api/v2/dags/{dag_id}/dagRuns (docs/deployment.md); or give another --home")


def stack_airflow_url(root: Path) -> str | None:
    """The Airflow UI of the stack up on the home `root` (its API server's process runs), else None."""
    record = _running(root, "airflow") or _running(root, "airflow-api")  # the default profile's, production's
    return record["url"] if record else None


def _running(root: Path, name: str) -> Record | None:
    record = Stack(root).load().services.get(name)
    return record if record and processes.alive(record["pid"], record.get("started")) else None
