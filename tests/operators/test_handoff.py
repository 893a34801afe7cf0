"""Tasks hand each other URIs when they may run on machines that share no disk (operators.handoff, applied to every
task by @bert_task): a run under a distributed executor needs a shared work dir, said by its first task; under a
remote work dir an XCom or an output manifest naming a local path fails the task that produced it."""

from __future__ import annotations

import json
import types

import pytest

from bert_core.errors import BertPipelineError
from operators import handoff, locations
from operators.airflow_tasks import bert_task
from tests.airflow_home import PIPELINES

WORK = "s3://bert-runs/finetune/r1"


@pytest.fixture()
def s3():
    """A bucket on a real S3 protocol server (moto) on loopback."""
    from bert_core.io import storage
    from tests.multinode_cluster import moto_s3

    with moto_s3():
        storage.s3_client().create_bucket(Bucket="bert-runs")
        yield storage


def _in_task(fn, *args, work_dir=WORK, task_id="finetune", map_index=0):
    """Call a @bert_task function as Airflow runs it: with a task instance context holding the run's params."""
    from airflow.sdk.execution_time.context import set_current_context

    ti = types.SimpleNamespace(dag_id="bert_finetune", task_id=task_id, map_index=map_index)
    with set_current_context({"ti": ti, "params": {"work_dir": work_dir}}):
        return fn.function(*args)


def test_executor_setting_is_read_as_airflow_writes_it():
    assert not handoff.distributed("LocalExecutor") and not handoff.distributed("SequentialExecutor")
    assert handoff.distributed("CeleryExecutor") and handoff.distributed("KubernetesExecutor")
    assert handoff.distributed("airflow.providers.celery.executors.celery_executor.CeleryExecutor")
    assert handoff.distributed("LocalExecutor,my_k8s:airflow.providers.cncf.kubernetes.executors."
                               "kubernetes_executor.KubernetesExecutor")
    assert handoff.executor_names(" LocalExecutor , celery:x.y.CeleryExecutor") == ["LocalExecutor", "CeleryExecutor"]


def test_local_paths_are_found_anywhere_in_a_value_and_shared_ones_pass(monkeypatch, tmp_path):
    value = {"output": "s3://b/x", "phases": [{"output": "/data/run/pretrained"}], "file:///tmp/k": 1,
             "note": "a/relative/name", "model": "bert_2_128_2"}
    assert list(handoff.local_paths(value, "return_value")) == [
        ("return_value['phases'][0]['output']", "/data/run/pretrained"),
        ("return_value (a key)", "file:///tmp/k")]
    roots = handoff.shared_roots()
    assert handoff.is_shared(handoff._as_path(locations.demo_data("sst2")), roots)  # inside the installed package
    assert handoff.is_shared(handoff._as_path(locations.default_model_dir()), roots)  # site-packages
    assert not handoff.is_shared(tmp_path, roots)
    monkeypatch.setenv(handoff.SHARED_PATHS_ENV, f"/mnt/nfs:{tmp_path}")
    assert handoff.is_shared(tmp_path / "run" / "x", handoff.shared_roots())


def test_a_local_path_in_an_xcom_fails_the_task_under_a_remote_work_dir(tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    @bert_task
    def finetune(output: str) -> dict:
        return {"task": "sst-2", "output": output, "metrics": {"accuracy": 0.9}}

    local = str(tmp_path / "finetune-sst-2")
    with pytest.raises(AirflowFailException) as failed:
        _in_task(finetune, local)
    message = str(failed.value)
    assert message.startswith("bert_finetune.finetune[0]: XCom return_value['output'] names the local path")
    assert local in message and WORK in message
    # Under a local work dir (one machine, dag.test) local paths are what the run uses: no check.
    assert _in_task(finetune, local, work_dir=str(tmp_path))["output"] == local
    # The bundled demo data lies in the installed package, the same on every machine.
    assert _in_task(finetune, locations.demo_data("sst2"))
    # Called outside a task run (tests, the CLI): no context, no check.
    assert finetune.function(local)["output"] == local


def test_a_local_path_in_an_output_manifest_fails_the_task(s3, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    @bert_task
    def evaluate(output: str) -> dict:
        return {"evaluation": output, "metrics": {"accuracy": 0.9}}

    cached = str(tmp_path / "cache" / "dev.tsv")  # a download cache: this machine only
    good, bad = f"{WORK}/evaluate-sst-2", f"{WORK}/evaluate-mrpc"
    for uri, read in ((good, f"{WORK}/finetune-sst-2/predictions.tsv"), (bad, cached)):
        s3.write_text(f"{uri}/manifest.json", json.dumps({"step": "evaluate", "config": {}, "outputs": [],
                                                          "inputs": [{"uri": read, "sha256": "ab"}]}))
    assert _in_task(evaluate, good)["evaluation"] == good
    with pytest.raises(AirflowFailException) as failed:
        _in_task(evaluate, bad)
    message = str(failed.value)
    assert message.startswith(f"bert_finetune.finetune[0]: {bad}/manifest.json field ['inputs'][0]['uri'] names the "
                              f"local path {cached}")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(PIPELINES), safe_mode=False)


def test_every_dag_has_a_work_dir_the_checks_read(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert "work_dir" in dag.params, f"{dag_id}: the hand-off checks read the run's work_dir Param"


def test_plan_asks_for_a_shared_work_uri_under_a_distributed_executor(dagbag, s3, monkeypatch, tmp_path):
    """No work_dir under CeleryExecutor: `plan` fails at once, saying what to give, instead of a later task failing
    on a file another worker wrote to its own disk."""
    from airflow.sdk.exceptions import AirflowFailException

    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    dag = dagbag.dags["bert_finetune"]
    plan = dag.get_task("plan").python_callable
    params = {name: dag.params[name] for name in dag.params}
    from airflow.sdk.execution_time.context import set_current_context

    ti = types.SimpleNamespace(dag_id="bert_finetune", task_id="plan", map_index=-1)

    def run_plan(work_dir):
        with set_current_context({"ti": ti, "params": {**params, "work_dir": work_dir}}):
            return plan(params={**params, "work_dir": work_dir}, run_id="r1")

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
    assert run_plan(None)[0]["output"].startswith(str(tmp_path / "home"))  # one machine: the home is fine
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")
    with pytest.raises(AirflowFailException, match=r"^bert_finetune\.plan: no work_dir was given, and Airflow's "
                       r"executor is CeleryExecutor: .* shared work URI \(s3://bucket/prefix\)"):
        run_plan(None)
    with pytest.raises(AirflowFailException, match="is a local directory"):
        run_plan(str(tmp_path / "work"))
    monkeypatch.setenv(handoff.SHARED_PATHS_ENV, str(tmp_path))
    assert run_plan(str(tmp_path / "work"))[0]["output"].startswith(str(tmp_path / "work"))
    monkeypatch.delenv(handoff.SHARED_PATHS_ENV)
    assert run_plan(WORK)[0]["output"] == f"{WORK}/finetune-sst-2"


def test_check_work_dir_message_names_the_task_and_the_remedy():
    with pytest.raises(BertPipelineError, match=r"^bert_nightly_regression\.work_dir: no work_dir was given, and "
                       r"Airflow's executor is KubernetesExecutor"):
        handoff.check_work_dir("", "KubernetesExecutor", "bert_nightly_regression.work_dir")
    handoff.check_work_dir("", "LocalExecutor", "x")
    handoff.check_work_dir("s3://b/p", "CeleryExecutor", "x")
