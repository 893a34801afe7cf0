"""The commands on a home with a stack up (`bert-pipeline stack up`): `run`, `demo` and `report` use the stack's
MLflow server, whose experiments keep their artifacts at `mlflow-artifacts:/N` (only the server resolves those),
never the sqlite file under it; with the server down, the sqlite file only where that is safe, else an error that
says what to do. Against a real `mlflow server`, started and recorded in HOME/stack/state.json with the stack's own
code, as `stack up` does (the whole stack takes ~35 s more to start, and Airflow and Ray play no part here)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError
from bert_core.launch.ports import free_ports
from bert_pipeline import embedded_home
from bert_pipeline.stack import processes
from bert_pipeline.stack.state import DEFAULT_PORTS, Stack
from tests import stack_fixture

pytestmark = pytest.mark.slow  # a real MLflow server, and a `bert-pipeline run`

RUN = "manual__2026-11-24T10:00:00+00:00"


@pytest.fixture(scope="module")
def mlflow_stack() -> Iterator[tuple[Path, str]]:
    """(home, server URL) of a home whose recorded stack runs the MLflow server of `stack up` (sqlite store
    HOME/mlflow.db, artifacts served from HOME/mlartifacts)."""
    root = Path(tempfile.mkdtemp(prefix="bert-stack-mlflow-"))
    home = root / "home"
    try:
        with stack_fixture.mlflow_only_stack(home) as url:
            # The store as the server makes it, before anything is logged: its Default experiment only.
            _copy_store(home / "mlflow.db", root / "new-store.db")
            yield home, url
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _copy_store(database: Path, to: Path) -> None:
    """A consistent copy of the sqlite store `database` that a running server writes (sqlite's backup API)."""
    to.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(database)) as source, closing(sqlite3.connect(to)) as copy:
        source.backup(copy)


@pytest.fixture(autouse=True)
def _own_environment(monkeypatch):
    """The variables the commands set are restored after each test, and no tracking URI comes from outside."""
    from mlflow.tracking._model_registry import utils as registry_utils
    from mlflow.tracking._tracking_service import utils

    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "BERT_PIPELINE_HOME", "AIRFLOW_HOME",
                 "AIRFLOW__CORE__DAGS_FOLDER", "AIRFLOW__CORE__LOAD_EXAMPLES"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # remembered as it was, so restored afterwards
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("MLFLOW_REGISTRY_URI")
    monkeypatch.delenv("BERT_PIPELINE_HOME")
    monkeypatch.setattr(embedded_home, "_stack_uri_set", None)
    monkeypatch.setattr(utils, "_tracking_uri", utils._tracking_uri)  # mlflow.set_tracking_uri's global
    # mlflow.set_registry_uri's global and its export: left pointing at this module's server (stopped at its end),
    # every later registry call of the test process hung in HTTP retries (test_registry, in the full suite).
    monkeypatch.setattr(registry_utils, "_registry_uri", registry_utils._registry_uri)


def _server_experiment(url: str, name: str = "bert-pretrain") -> str:
    """An experiment the stack's server creates (as for a run triggered in its Airflow UI): at mlflow-artifacts:/N."""
    from mlflow import MlflowClient

    client = MlflowClient(url)  # not mlflow.set_tracking_uri: it would export MLFLOW_TRACKING_URI
    found = client.get_experiment_by_name(name)
    experiment_id = found.experiment_id if found else client.create_experiment(name)
    assert client.get_experiment(experiment_id).artifact_location.startswith("mlflow-artifacts:/")
    return experiment_id


def test_the_home_logs_to_the_stacks_mlflow_server(mlflow_stack, tmp_path, monkeypatch):
    from bert_core.io.tracking import MlflowTracker

    home, url = mlflow_stack
    experiment_id = _server_experiment(url)
    assert embedded_home.setup_home(home, serialize=False) == home
    assert os.environ["MLFLOW_TRACKING_URI"] == url
    # What pretraining's rank 0 does; on the sqlite file this raised "When an mlflow-artifacts URI was supplied,
    # the tracking URI must be a valid http or https URI".
    tracker = MlflowTracker("bert-pretrain")
    (tmp_path / "notes.txt").write_text("step 30\n")
    tracker.log_artifact(tmp_path / "notes.txt")
    tracker.end()
    assert tracker.tracking_uri == url
    assert (home / "mlartifacts" / experiment_id / tracker.run_id / "artifacts" / "notes.txt").is_file()

    # A tracking URI the user set is theirs.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mine.db'}")
    assert embedded_home.use_stack_mlflow(home) is None
    assert os.environ["MLFLOW_TRACKING_URI"] == f"sqlite:///{tmp_path / 'mine.db'}"


def _dead_server_record(home: Path, store: str | None = None, pid: int | None = None) -> None:
    """Record in `home` a stack whose MLflow server is gone (`pid`: a process that runs but does not answer)."""
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    started = processes.start_time(pid) if pid else 0  # 0: no process started at tick 0, whatever has the pid
    record = {"pid": pid or os.getpid(), "started": started, "url": url, "health_url": f"{url}/health",
              "log": str(home / "stack" / "mlflow.log"), "store": store or f"sqlite:///{home / 'mlflow.db'}"}
    stack = Stack(home)
    stack.state.update(ports={**DEFAULT_PORTS, "mlflow": port}, home=str(home), profile="default",
                       services={"mlflow": record})
    stack.save()


def test_with_the_stacks_server_down_sqlite_is_used_only_where_safe(mlflow_stack, tmp_path):
    home, url = mlflow_stack
    _server_experiment(url)

    # Nothing in the home's sqlite store needs the server: it is used, as with no stack. The server's own
    # Default experiment (at mlflow-artifacts:/0) takes no pipeline run.
    for fresh, store in ((tmp_path / "no-store", None), (tmp_path / "new-store", home.parent / "new-store.db")):
        _dead_server_record(fresh)
        if store:
            _copy_store(store, fresh / "mlflow.db")
        assert embedded_home.use_stack_mlflow(fresh) is None and "MLFLOW_TRACKING_URI" not in os.environ

    # The server made experiments there: their artifacts are out of the sqlite store's reach.
    used = tmp_path / "used"
    _dead_server_record(used)
    _copy_store(home / "mlflow.db", used / "mlflow.db")
    with pytest.raises(BertPipelineError) as refused:
        embedded_home.use_stack_mlflow(used)
    said = str(refused.value)
    assert "MLflow server of the stack on" in said and f"`bert-pipeline stack up --home {used}`" in said
    assert "'bert-pretrain' at mlflow-artifacts:/" in said and "MLFLOW_TRACKING_URI" in said
    # ... and the same after `stack down`, which forgets the stack: the store still needs its server.
    (used / "stack" / "state.json").unlink()
    with pytest.raises(BertPipelineError, match=r"experiment 'bert-pretrain' keeps its artifacts through the "
                                                rf"MLflow server of a stack .*stack up --home {used}`"):
        embedded_home.use_stack_mlflow(used)

    # Its process runs but does not answer (here: this test's own process stands for it).
    hung = tmp_path / "hung"
    _dead_server_record(hung, pid=os.getpid())
    with pytest.raises(BertPipelineError, match=rf"runs \(pid {os.getpid()}\) but does not answer.*"
                                                rf"stack down --home {hung}"):
        embedded_home.use_stack_mlflow(hung)

    # A production stack keeps its runs in PostgreSQL: the sqlite file would be another store.
    production = tmp_path / "production"
    _dead_server_record(production, store="127.0.0.1:5432/mlflow")
    with pytest.raises(BertPipelineError, match=r"its runs are in 127\.0\.0\.1:5432/mlflow.*stack down --home"):
        embedded_home.use_stack_mlflow(production)
    assert "MLFLOW_TRACKING_URI" not in os.environ


@contextlib.contextmanager
def _stand_in_airflow(home: Path) -> Iterator[str]:
    """Airflow recorded in the home's stack for the block, as a process that runs (what the commands check of it:
    the state file, and whether the recorded process runs); yields its URL. Real Airflow takes ~30 s to start."""
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    stand_in = subprocess.Popen(["sleep", "300"])
    stack = Stack(home).load()
    stack.services["airflow"] = {"pid": stand_in.pid, "started": processes.start_time(stand_in.pid), "url": url,
                                 "health_url": f"{url}/api/v2/monitor/health",
                                 "log": str(home / "stack" / "airflow.log")}
    stack.save()
    try:
        yield url
    finally:
        stand_in.kill()
        stand_in.wait()
        stack = Stack(home).load()
        del stack.services["airflow"]
        stack.save()


def test_run_uses_the_stacks_server_and_names_its_airflow(mlflow_stack, tmp_path):
    """`bert-pipeline run` as a user runs it: its tasks record the stack's server as their MLflow store, and the
    last line is the stack's Airflow UI. The conf names a missing input, which fails the run in its first tasks
    (a whole pretraining run takes minutes; its later tasks find their MLflow store the same way)."""
    home, url = mlflow_stack
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"inputs": [str(tmp_path / "missing.txt")]}))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "MLFLOW_", "BERT_PIPELINE_HOME", "RAY_ADDRESS"))}
    with _stand_in_airflow(home) as airflow_url:
        done = subprocess.run([sys.executable, "-m", "bert_pipeline.cli", "run", "bert_pretraining", "--conf-file",
                               str(conf), "--home", str(home)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1 and done.stderr == "", done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == f"Airflow UI on this home: {airflow_url}   (the stack up on {home})"
    run_dir = Path(lines[0].split()[2]).parent
    records = [json.loads(p.read_text()) for p in (run_dir / "tasks").glob("*.json")]
    assert "plan" in {r["task_id"] for r in records}
    assert {r["tracking_uri"] for r in records} == {url}


def test_demo_names_the_stacks_uis(mlflow_stack, tmp_path):
    from bert_pipeline.commands.demo import ui_lines

    home, url = mlflow_stack
    with _stand_in_airflow(home) as airflow_url:
        assert ui_lines(home, url) == [f"MLflow UI:  {url}",
                                       f"Airflow UI on this home: {airflow_url}   (the stack up on {home})"]
    # No stack: the commands that show the sqlite store and start the stack.
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert ui_lines(tmp_path, store) == [
        f"MLflow UI:  mlflow ui --backend-store-uri {store} --port 5000   (then http://127.0.0.1:5000)",
        f"Airflow UI, MLflow server and a Ray head together: bert-pipeline stack up --home {tmp_path}   "
        "(then http://127.0.0.1:8080; `bert-pipeline stack down --home ...` stops them)"]


def _registered_model(url: str, name: str) -> str:
    """Version 1 of `name`: a logged model with a serving input example, in an experiment of the server."""
    import mlflow

    class Echo(mlflow.pyfunc.PythonModel):
        def predict(self, model_input: list[str], params=None) -> list[str]:
            return model_input

    mlflow.set_tracking_uri(url)
    mlflow.set_registry_uri(url)
    with mlflow.start_run(experiment_id=_server_experiment(url, "bert-finetune/sst-2")):
        info = mlflow.pyfunc.log_model(name="model", python_model=Echo(), pip_requirements=[],
                                       input_example=["it's a wonderful film"])
    return mlflow.register_model(info.model_uri, name).version


def _run_dir(tmp_path: Path, url: str, name: str, version: str) -> Path:
    """A DAG run's work directory as its tasks leave it: a promotion decision, and a task record naming the
    MLflow store the tasks used (the stack's server)."""
    run_dir = tmp_path / "run"
    (run_dir / "registry").mkdir(parents=True)
    (run_dir / "tasks").mkdir()
    decision = {"name": name, "candidate": version, "champion_before": None, "promoted": True,
                "champion_after": version, "previous_after": None, "gates": ["accuracy"], "floors": {},
                "candidate_metrics": {"accuracy": 0.9}, "champion_metrics": None, "reasons": [],
                "decided_at": "2026-11-24T10:05:00+00:00"}
    (run_dir / "registry" / f"{name}-v{version}.json").write_text(json.dumps(decision))
    task = {"dag_id": "bert_finetune", "run_id": RUN, "task_id": "register", "map_index": -1, "try_number": 1,
            "state": "success", "started_at": "2026-11-24T10:04:00+00:00",
            "finished_at": "2026-11-24T10:05:00+00:00", "duration_s": 60.0, "hostname": "h", "error": None,
            "tracking_uri": url}
    (run_dir / "tasks" / "register.try1.json").write_text(json.dumps(task))
    return run_dir


def test_report_of_a_stack_run_from_its_directory_and_from_mlflow(mlflow_stack, tmp_path, monkeypatch, capsys):
    import mlflow
    from mlflow import MlflowClient

    from bert_pipeline.cli import main
    from operators.report.collect import collect
    from operators.report.publish import records_from_mlflow
    from operators.report.render import render

    home, url = mlflow_stack
    version = _registered_model(url, "bert-sst-2")
    # MLflow's process-wide tracking URI elsewhere, as in a command that has no stack to point it at: the
    # home's sqlite file (mlflow.set_tracking_uri exports it; a user's shell has no MLFLOW_TRACKING_URI).
    mlflow.set_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    run_dir = _run_dir(tmp_path, url, "bert-sst-2", version)

    # The serving example is read through the run's server, not MLflow's process-wide (sqlite) tracking URI.
    records = collect(str(run_dir))
    assert records["tracking_uri"] == url
    example = records["registry"][0]["serving_example"]
    assert example == {"inputs": ["it's a wonderful film"]}, example
    assert "curl -s 127.0.0.1:" in render(records)

    # Logged to the DAG run's report run, then drawn again from MLflow as the docs show it, with only
    # BERT_PIPELINE_HOME pointing at the stack's home.
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(home))
    assert main(["report", str(run_dir)]) == 0
    report_run = capsys.readouterr().out.split("Logged to MLflow run ", 1)[1].split()[0]
    experiment = MlflowClient(url).get_run(report_run).info.experiment_id
    for source in (f"{url}/#/experiments/{experiment}/runs/{report_run}", f"runs:/{report_run}"):
        rebuilt = tmp_path / f"rebuilt-{len(source)}.html"
        assert main(["report", source, "--output", str(rebuilt), "--no-mlflow"]) == 0, capsys.readouterr().err
        assert "curl -s 127.0.0.1:" in rebuilt.read_text()
    assert "MLFLOW_TRACKING_URI" in os.environ  # the report command pointed MLflow at the stack

    # Through the sqlite file the run is there but its artifacts are not reachable: said as such, with MLflow's
    # reason, not as a run without a report.
    with pytest.raises(BertPipelineError) as unreachable:
        records_from_mlflow(f"runs:/{report_run}", f"sqlite:///{home / 'mlflow.db'}")
    said = str(unreachable.value)
    assert "holds no" not in said and f"the artifacts of MLflow run {report_run} cannot be read through sqlite" in said
    assert "When an mlflow-artifacts URI was supplied" in said
