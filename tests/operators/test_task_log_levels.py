"""A task's log as the Airflow UI shows it: Airflow's supervisor records a task's stdout at level info and its
stderr at level error, and Ray re-prints its workers' stdout and stderr on the driver's. The lines our Ray workers
log (progress, learning checks, "model written to ...") must come out at info, their errors and tracebacks at
error; outside Airflow the workers' logging stays on stderr (a command's stdout carries its result)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bert_core import logs
from tests.operators.supervised_task import read_log

ROOT = Path(__file__).resolve().parents[2]

# A bert_task whose driver runs a function on a Ray worker of a fresh local Ray, with the environment a step's
# driver gives its workers (worker_env), and whose worker sets its logging up as a Ray Train worker of a step does.
DAG = '''
import logging
import sys
import time

from airflow.sdk import dag

from operators.airflow_tasks import bert_task


def work():
    from bert_core import logs

    logs.configure()
    import mlflow  # noqa: F401 - as rank 0 imports it after configure (its tracker): MLflow's loggers too

    logging.getLogger("mlflow.pyfunc").info("Validating input example against model signature")
    log = logging.getLogger("bert_core.pretrain.step")
    log.info("learning check: masked LM accuracy 0.231")
    log.warning("the warmup ends after the last step")
    try:
        raise ValueError("shard 3 is empty")
    except ValueError:
        log.exception("cannot read shard 3")
    return {"best_epoch": 1}


@bert_task
def train():
    import ray

    from bert_core.launch.ray_cluster import connect, worker_env

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the DAG file is no module a worker imports
    connect(local_cpus=1, include_dashboard=False)
    try:
        result = ray.get(ray.remote(work).options(runtime_env={"env_vars": worker_env()}).remote())
        # Ray's log monitor forwards a worker's lines to the driver by polling its log files: a shutdown right
        # after the result can beat it (seen on a loaded machine: none of the worker's lines in the task log).
        time.sleep(3)
        return result
    finally:
        ray.shutdown()


@dag(schedule=None)
def log_levels():
    train()


log_levels()
'''


# A bert_task whose driver runs a one-worker Ray Train run with the callbacks a step's run gets (ray_logs).
TRAIN_DAG = '''
import sys
import time

from airflow.sdk import dag

from operators.airflow_tasks import bert_task


def loop(config):
    import logging
    import os
    import tempfile

    import ray.train

    logging.getLogger("ray.train.tests").info("an info line of Ray Train's worker logger")
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "x"), "w").write("x")
        ray.train.report({"step": 50, "loss": 7.25}, checkpoint=ray.train.Checkpoint.from_directory(d))


@bert_task
def train():
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from bert_core.launch import ray_logs
    from bert_core.launch.ray_cluster import connect, worker_env

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    connect(local_cpus=1)  # with its dashboard, as a run's: Ray Train's placement-group cleaner asks its state API
    try:
        TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1),
                     run_config=RunConfig(storage_path="STORAGE", callbacks=ray_logs.callbacks(),
                                          worker_runtime_env={"env_vars": worker_env()})).fit()
        time.sleep(3)  # Ray's log monitor forwards the lines by polling (see the other DAG)
        return "trained"
    finally:
        ray.shutdown()


@dag(schedule=None)
def ray_train_levels():
    train()


ray_train_levels()
'''


def _supervised(tmp_path: Path, dag_text: str, dag_id: str) -> list[dict]:
    """The task log's records of DAG_ID's `train` task, run by Airflow's supervisor."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{dag_id}.py").write_text(dag_text)
    log_path = tmp_path / "task.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RAY_ADDRESS", "MLFLOW_TRACKING"))}
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", RAY_COLOR_PREFIX="0")
    done = subprocess.run([sys.executable, "-m", "tests.operators.supervised_task", str(dags), f"{dag_id}.py",
                           dag_id, "train", str(log_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return read_log(log_path)


def _levels_of(records: list[dict]):
    """text -> the levels of the task log's records that contain it (asserting there is one)."""
    def levels(text: str) -> set[str]:
        found = {r["level"] for r in records if text in r["event"]}
        assert found, f"{text!r} not in the task log: {[r['event'] for r in records]}"
        return found

    return levels


def test_ray_trains_own_info_lines_are_info_in_the_task_log(tmp_path):
    """Ray Train's `ray.train` logger has a console handler of its own on stderr in its controller and workers:
    "(TrainController) ..." and "(RayTrainWorker) ..." info lines were error lines in every training task's log.
    And its per-report line is gone (the walk that found it: `ray job submit ... pretrain --num-workers 2`, two
    such lines beside each step line)."""
    records = _supervised(tmp_path, TRAIN_DAG.replace("STORAGE", str(tmp_path / "ray")), "ray_train_levels")
    assert any("Returned value was: trained" in r["event"] for r in records), records
    levels = _levels_of(records)

    # Controller and worker lines of Ray Train, and a line of the training function's own (a ray.train child).
    # (Its scaling policy's "Requesting resources" comes before any callback of a run and stays an error line.)
    assert levels("Attempting to start training worker group") == {"info"}
    assert levels("Setting up process group for: env://") == {"info"}
    assert levels("an info line of Ray Train's worker logger") == {"info"}
    # Ray Train's ~400-character "Reporting training result N: TrainingReport(... metrics={...}) from rank R", one
    # per worker per report, is not in the log (ray_logs.QuietReports, in every run); its checkpoint line is.
    assert levels("Checkpoint successfully created") == {"info"}
    assert not [r for r in records if "Reporting training result" in r["event"]], records


def test_a_ray_workers_info_lines_are_info_in_the_task_log_its_errors_error(tmp_path):
    records = _supervised(tmp_path, DAG, "log_levels")
    assert any("Returned value was: {'best_epoch': 1}" in r["event"] for r in records), records
    levels = _levels_of(records)

    assert levels("learning check: masked LM accuracy 0.231") == {"info"}
    assert levels("INFO mlflow.pyfunc: Validating input example against model signature") == {"info"}
    assert levels("WARNING bert_core.pretrain.step: the warmup ends") == {"info"}  # the level name stays readable
    assert levels("cannot read shard 3") == {"error"}
    assert levels("Traceback (most recent call last):") == {"error"}
    assert levels("ValueError: shard 3 is empty") == {"error"}


def test_outside_airflow_a_workers_logging_stays_on_stderr():
    """configure() is basicConfig where no Airflow task is served: everything on stderr, stdout left alone."""
    code = textwrap.dedent("""
        import logging
        from bert_core import logs
        logs.configure()
        logging.getLogger("bert_core.pretrain.step").info("learning check: 0.231")
        logging.getLogger("bert_core.pretrain.step").error("cannot read shard 3")
    """)
    env = {k: v for k, v in os.environ.items() if k != logs.AIRFLOW_RUN_ENV}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "INFO bert_core.pretrain.step: learning check: 0.231" in done.stderr
    assert "ERROR bert_core.pretrain.step: cannot read shard 3" in done.stderr


def test_a_console_handler_ray_train_installed_keeps_only_the_errors(monkeypatch, capsys):
    """A Ray Train worker's root logger has Ray's console handler (stderr) before the step runs, so basicConfig does
    nothing there: under Airflow that handler keeps ERROR and above, and a twin on stdout takes the rest, with its
    filters (Ray Train's log-level filter). Twice is the same as once."""
    monkeypatch.setenv(logs.AIRFLOW_RUN_ENV, "manual__1")
    logger = logging.getLogger("tests.ray_train_worker_root")
    logger.propagate = False
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(message)s"))
    console.addFilter(lambda record: "debug noise" not in record.getMessage())
    logger.handlers[:] = [console]
    logger.setLevel(logging.INFO)
    try:
        logs.info_to_stdout(logger)
        logs.info_to_stdout(logger)
        logger.info("best epoch 1 (f1=50.0000)")
        logger.info("debug noise")
        logger.error("cannot read shard 3")
    finally:
        logger.handlers.clear()
    out, err = capsys.readouterr()
    assert out.count("best epoch 1") == 1 and "INFO tests.ray_train_worker_root: best epoch 1" in out
    assert "debug noise" not in out and "cannot read shard 3" not in out
    assert err == "cannot read shard 3\n"


@pytest.mark.parametrize("mlflow_first", [True, False], ids=["mlflow-imported-before", "mlflow-imported-after"])
def test_mlflows_own_loggers_below_error_go_to_stdout_under_airflow(mlflow_first):
    """MLflow's loggers have a handler of their own (stderr, no propagation): on a worker its info lines and warnings
    ("mlflow.pyfunc: Validating input example ...") were errors in the task log. Whether MLflow is imported before
    configure() or after it, they go to stdout, its errors stay on stderr; a logger sharing MLflow's handler
    (sqlalchemy.engine) keeps its warnings; alembic's migration chatter stays below what is shown."""
    code = textwrap.dedent(f"""
        import logging
        if {mlflow_first}:
            import mlflow
        from bert_core import logs
        logs.configure()
        import mlflow
        logging.getLogger("mlflow.pyfunc").info("Validating input example against model signature")
        logging.getLogger("mlflow.models").warning("model logged without a signature")
        logging.getLogger("sqlalchemy.engine").warning("pool overflow")
        logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")
        logging.getLogger("mlflow.tracking").error("cannot reach the tracking server")
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env[logs.AIRFLOW_RUN_ENV] = "manual__1"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "INFO mlflow.pyfunc: Validating input example against model signature" in done.stdout
    assert "WARNING mlflow.models: model logged without a signature" in done.stdout
    assert "WARNING sqlalchemy.engine: pool overflow" in done.stdout
    assert "Context impl SQLiteImpl" not in done.stdout + done.stderr
    assert "cannot reach the tracking server" in done.stderr and "cannot reach" not in done.stdout
    assert "Validating input example" not in done.stderr and "without a signature" not in done.stderr
