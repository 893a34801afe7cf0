"""The DAGs on a production-shaped deployment (issue 25), end to end: `bert-pipeline stack up --profile production`
(PostgreSQL for Airflow's metadata and the MLflow server's store, Redis, Airflow's components with the
CeleryExecutor and two Celery workers that share no directory, MLflow's artifacts and registered models in S3)
pointed at a real multi-node Ray cluster (a head and two 1-CPU worker nodes, tests/multinode_cluster.py), every
run's work dir, inputs and data on S3 (the moto server on loopback).

Through the REST API, one run of each DAG:
- bert_pretraining, two phases, `num_workers` 1:2 (elastic): make-shards mapped over the input files on both
  workers at once; during the last phase, after its second checkpoint, the raylet of a worker node that runs a
  training worker is SIGKILLed: the pretrain task does not fail (no Airflow retry), the run shrinks to the other
  node, resumes from its checkpoint on S3 and finishes; the model is registered and promoted;
- bert_finetune of MiniLM on two tasks, one of them (sst-2) with a search: the two fine-tunings run on both
  workers at once; the best trial is registered, promotion loads each registered model from the S3-backed
  registry and checks it answers as it was scored;
- bert_nightly_regression over those champions;
then `mlflow models serve` of the sst-2 champion, with no S3 credentials: the server downloads it through the
MLflow server, which alone reads S3.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bert_core.io import manifest, storage
from bert_pipeline.stack import airflow_celery
from bert_pipeline.stack.profiles import PROFILES, Options
from evaluation.airflow_rest import AirflowApi
from tests import multinode_cluster, stack_fixture
from tests.model_server import ModelServer, post_json

MISSING = PROFILES["production"].missing(Options())
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(MISSING), reason="the production profile needs: "
                       + "; ".join(f"{m.what} ({m.install})" for m in MISSING)),
]

WORK, ARTIFACTS = "s3://work", "s3://mlflow-artifacts"
WORKERS = ("celery-worker-1", "celery-worker-2")
RUN_TIMEOUT_S = 600
PRETRAIN_STEPS = 60  # the last phase's: long enough to lose a node after its second checkpoint (every 10 steps)


@pytest.fixture(scope="module")
def production():
    """The stack and the Ray cluster it uses; this process is a Ray driver of the cluster (to find and kill a
    node) and an S3 client of moto."""
    with multinode_cluster.moto_s3(), multinode_cluster.joined_cluster(workers=()) as cluster:
        for uri in (WORK, ARTIFACTS):
            storage.s3_client().create_bucket(Bucket=uri.removeprefix("s3://"))
        stack_up = stack_fixture.running_stack("production", ("--artifacts-destination", f"{ARTIFACTS}/mlflow"),
                                               ray_cluster=cluster.address)
        # The worker nodes join while the stack starts (it needs only the head's address): a minute less.
        with ThreadPoolExecutor(1) as pool:
            started = pool.submit(stack_up.__enter__)
            try:
                for name in ("node_a", "node_b"):
                    cluster.add_worker(name)
            except BaseException:
                if started.exception() is None:  # (waits for it) the stack came up: stop it
                    stack_up.__exit__(None, None, None)
                raise
            stack = started.result()
        try:
            yield stack, cluster
        finally:
            stack_up.__exit__(None, None, None)


def test_status_and_up_again_on_the_production_stack(production):
    stack, _ = production
    status = stack.cli("status", timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    services = ["postgres", "redis", "mlflow", *airflow_celery.COMPONENTS, *WORKERS]
    assert [line.split()[0] for line in status.stdout.splitlines()[:len(services)]] == services
    assert all("healthy" in line for line in status.stdout.splitlines()[:len(services)])
    again = stack.cli("up", "--profile", "production", timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("already running") == len(services) and "starting" not in again.stdout
    state = json.loads((stack.logs / "state.json").read_text())
    assert state["profile"] == "production" and state["options"]["ray_address"] == stack.ray_cluster
    # The workers' own homes, work dirs and temp dirs: nothing of one is the other's.
    dirs = [state["services"][w]["dirs"] for w in WORKERS]
    assert not set(dirs[0].values()) & set(dirs[1].values())


def _upload_inputs() -> None:
    """The corpus and the fine-tuning and nightly data on S3: no task reads a file another machine made. (The
    model to fine-tune is bert_finetune's default, MiniLM, a file of the installed package on every worker.)"""
    from bert_core.demo_data import DEMO_DATA

    for name in ("corpus", "sst2", "squad"):
        storage.upload_dir(DEMO_DATA / name, f"{WORK}/data/{name}")


def _node_loss_after_checkpoints(cluster, run_state: str, result: dict) -> threading.Thread:
    """In a thread: once the Ray run's second checkpoint is on S3 (so the first is surely Ray Train's to resume
    from), SIGKILL the raylet of a worker node that runs a training worker (not the one running Ray Train's
    controller, which stands for the driver's side)."""

    def act() -> None:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            if len({name.split("/")[0] for name in storage.list_files(run_state) if name.startswith("step-")}) >= 2:
                nodes = sorted(cluster.nodes_running("ray::RayTrainWorker")
                               - cluster.nodes_running("ray::TrainController") - {"head"})
                if nodes:
                    result["node"] = nodes[0]
                    cluster.kill_raylet(nodes[0])
                    result["at"] = time.time()
                    return
            time.sleep(0.5)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def interval(task_instance: dict) -> tuple[dt.datetime, dt.datetime]:
    """(start, end) of a finished task instance."""
    return (dt.datetime.fromisoformat(task_instance["start_date"]),
            dt.datetime.fromisoformat(task_instance["end_date"]))


def overlap(a: dict, b: dict) -> bool:
    """Whether two finished task instances ran at the same time for a while."""
    (start_a, end_a), (start_b, end_b) = interval(a), interval(b)
    return start_a < end_b and start_b < end_a


def _by_task(task_instances: list[dict]) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for ti in task_instances:
        found.setdefault(ti["task_id"], []).append(ti)
    return found


def _ran_together_on_both_workers(tis: list[dict]) -> bool:
    return any(a["hostname"] != b["hostname"] and overlap(a, b) for a in tis for b in tis if a is not b)


def _when_and_where(tis: list[dict]) -> str:
    return "\n".join(f"{t['task_id']}[{t.get('map_index')}] on {t['hostname']}: {t['queued_when']} queued, "
                     f"{t['start_date']} - {t['end_date']}" for t in tis)


def _has_its_report(api, client, dag_id: str, run_id: str, work: str, mlflow_url: str) -> None:
    """A run triggered over REST built its own report.html (its `report` task, on a worker): on S3 in its work
    dir, and in the MLflow experiment bert-runs, whose page the task's log names."""
    (task,) = _by_task(api.task_instances(dag_id, run_id))["report"]
    assert task["state"] == "success" and task["hostname"] in WORKERS, task
    html = storage.read_text(f"{work}/report.html")
    assert "<img" in html and run_id in html
    (logged,) = client.search_runs([client.get_experiment_by_name("bert-runs").experiment_id],
                                   filter_string=f"tags.run_dir = '{work}'")
    assert logged.data.tags["pipeline_run_id"] == run_id and logged.data.tags["dag_id"] == dag_id
    assert {a.path for a in client.list_artifacts(logged.info.run_id)} == {"report.html", "report_data.json"}
    page = f"{mlflow_url}/#/experiments/{logged.info.experiment_id}/runs/{logged.info.run_id}"
    assert page in api.task_log(dag_id, run_id, "report")


def test_the_dags_end_to_end_on_the_production_stack(production, tmp_path):
    import mlflow

    stack, cluster = production
    api = AirflowApi(stack.airflow_url, *stack.airflow_credentials())
    client = mlflow.MlflowClient(stack.mlflow_url, registry_uri=stack.mlflow_url)
    _upload_inputs()
    api.wait_for_dags(["bert_pretraining", "bert_finetune", "bert_nightly_regression"])

    # --- bert_pretraining: two phases (BERT's short-then-long sequences), a node lost in the last one.
    work = f"{WORK}/pretraining"
    last = f"{work}/pretrained/phase2"
    run_state = f"{work}/pretrained/ray_results/pretrain-{hashlib.sha256(last.encode()).hexdigest()[:12]}"
    killed: dict = {}
    killer = _node_loss_after_checkpoints(cluster, run_state, killed)
    run_id = api.trigger("bert_pretraining", {
        "inputs": [f"{WORK}/data/corpus"], "model": "bert_2_64_2", "max_seq_length": 64, "dupe_factor": 1,
        "batch_size": 8, "num_workers": "1:2", "ckpt_interval": 10, "max_failures": 2, "work_dir": work,
        "phases": [{"max_seq_length": 32, "max_predictions_per_seq": 5, "num_steps": 3},
                   {"num_steps": PRETRAIN_STEPS}]})
    took = {"start": time.monotonic()}
    run = api.wait_for_run("bert_pretraining", run_id, RUN_TIMEOUT_S)
    took["bert_pretraining"] = time.monotonic()
    killer.join(timeout=5)
    assert run["state"] == "success", api.failed_tasks("bert_pretraining", run_id)
    every_task = api.task_instances("bert_pretraining", run_id)
    tis = _by_task(every_task)
    (pretrain,) = tis["pretrain"]
    # The node went while the pretrain task ran, and the task did not fail: no Airflow retry.
    assert killed, "the last phase had no second checkpoint on S3, so no node was killed"
    assert pretrain["try_number"] == 1 and pretrain["state"] == "success"
    started, ended = interval(pretrain)
    assert started.timestamp() < killed["at"] < ended.timestamp()
    final = manifest.read(last)
    assert final["training"]["world_size"] == 1 and final["training"]["resumed_from"] is not None
    resizes = [v for k, v in client.get_run(final["mlflow_run_id"]).data.tags.items() if k.startswith("resize.")]
    assert any("world size 2 -> 1" in line for line in resizes), resizes
    # make-shards mapped over the two input files x two phases.
    shards = tis["make_shards"]
    assert len(shards) == 4
    # Tasks on both workers at once, not necessarily make-shards' own: a fresh clone's run of 2026-11-29 had all four
    # of them on one worker. Any two of the run's: its mapped tasks (four make-shards, two held-out, four
    # validations) take 2-9 s each on two workers of concurrency 1, and on a loaded 2-core CI machine a task's
    # process can take longer to start than its neighbour takes to run: CI once saw the six shard tasks alone
    # alternate between the workers without overlapping.
    assert _ran_together_on_both_workers(every_task), _when_and_where(every_task)
    for phase, seq in (("phase1", 32), ("phase2", 64)):
        for part in ("part-a", "part-b"):
            where = f"{work}/shards/{phase}/{part}"
            assert json.loads(storage.read_text(f"{where}/validation.json"))["success"]
            assert manifest.read(where)["config"]["max_seq_length"] == seq
        assert manifest.read(f"{work}/shards-heldout/{phase}")["config"]["max_seq_length"] == seq
    assert final["config"]["pretrained"] == f"{work}/pretrained/phase1"  # the second phase from the first's weights
    (pretrained,) = [v for v in client.search_model_versions("name='bert-pretrained'") if v.tags["output"] == last]
    _has_its_report(api, client, "bert_pretraining", run_id, work, stack.mlflow_url)

    # --- bert_finetune: two tasks at once on the two workers, sst-2 with a search of two learning rates.
    cluster.add_worker("node_c")  # the lost node's replacement joins (a spot node coming back)
    finetune = f"{WORK}/finetune"
    run_id = api.trigger("bert_finetune", {
        "tasks": {"sst-2": f"{WORK}/data/sst2", "squad": f"{WORK}/data/squad"},
        "preset": "gluonnlp", "search": {"sst-2": {"lr": [1e-4, 2e-5]}}, "work_dir": finetune,
        "overrides": {"sst-2": {"epochs": 1, "max_seq_length": 32},
                      "squad": {"epochs": 1, "batch_size": 8, "max_seq_length": 64, "doc_stride": 32}}})
    run = api.wait_for_run("bert_finetune", run_id, RUN_TIMEOUT_S)
    took["bert_finetune"] = time.monotonic()
    assert run["state"] == "success", api.failed_tasks("bert_finetune", run_id)
    tis = _by_task(api.task_instances("bert_finetune", run_id))
    assert {t["hostname"] for t in tis["finetune"]} == set(WORKERS), _when_and_where(tis["finetune"])
    assert _ran_together_on_both_workers(tis["finetune"]), _when_and_where(tis["finetune"])
    summary = json.loads(storage.read_text(f"{finetune}/registry/summary.json"))
    assert summary["tracking_uri"] == stack.mlflow_url
    reports = {m["name"]: m for m in summary["models"]}
    assert set(reports) == {"bert-sst-2", "bert-squad"}
    search = reports["bert-sst-2"]["search"]
    assert sorted(search["trials"]) == ["lr=0.0001", "lr=2e-05"] and "search" not in reports["bert-squad"]
    # A model a user would keep: MiniLM on the demo's SST-2, one epoch: 0.975 with lr 1e-4 (measured alone).
    assert reports["bert-sst-2"]["candidate_metrics"]["accuracy"] >= 0.8, reports["bert-sst-2"]
    for name, report in reports.items():
        # Promotion loaded the version from the registry (artifacts through the MLflow server, from S3) and it
        # answered the scored dev examples as they were scored.
        assert report["promoted"], report["reasons"]
        assert report["serving_check"]["examples"] > 0 and not report["serving_check"]["problems"]
        version = client.get_model_version(name, report["candidate"])
        assert version.source.startswith(("models:/", "mlflow-artifacts:/")), version.source
        assert client.get_model_version_by_alias(name, "champion").version == report["candidate"]
    # In the plan's task order, which is the conf's: PostgreSQL keeps a run's conf as JSONB, whose keys come back
    # in its own order (shorter first, then bytewise), not the order the user wrote them in.
    assert [(m["name"], m["gates"]) for m in summary["models"]] == [("bert-squad", ["f1", "exact_match"]),
                                                                    ("bert-sst-2", ["accuracy"])]
    for name, report in reports.items():
        assert storage.exists(f"{finetune}/registry/{name}-v{report['candidate']}.json")
    # The best trial is the model evaluated and registered, a child run of the search's parent run.
    best = manifest.read(f"{finetune}/finetune-sst-2/{search['best']}")
    version = client.get_model_version("bert-sst-2", reports["bert-sst-2"]["candidate"])
    assert version.run_id == best["mlflow_run_id"]
    assert manifest.read(f"{finetune}/evaluate-sst-2")["metrics"] == best["metrics"]
    parent = json.loads(storage.read_text(f"{finetune}/finetune-sst-2/search.json"))["parent_run_id"]
    assert client.get_run(version.run_id).data.tags["mlflow.parentRunId"] == parent
    # Settings: the gluonnlp preset's per task, then the overrides.
    squad = manifest.read(f"{finetune}/finetune-squad")["config"]
    assert (best["config"]["batch_size"], best["config"]["optimizer"]) == (16, "bertadam")  # gluonnlp's SST-2
    assert (squad["batch_size"], squad["optimizer"], squad["max_seq_length"]) == (8, "adamw", 64)
    # The registered models' files are in the S3 artifact store, not on this machine.
    stored = storage.list_files(f"{ARTIFACTS}/mlflow")
    assert sum(name.endswith("MLmodel") for name in stored) >= 3  # two trials and squad (+ bert-pretrained)

    _has_its_report(api, client, "bert_finetune", run_id, finetune, stack.mlflow_url)

    # --- bert_nightly_regression over the champions, its report on S3.
    nightly = f"{WORK}/nightly"
    run_id = api.trigger("bert_nightly_regression", {
        "work_dir": nightly, "data": {"sst-2": f"{WORK}/data/sst2", "squad": f"{WORK}/data/squad"},
        "throughput_configs": ["bert_2_64_2"], "throughput_steps": 1, "throughput_batch_size": 2,
        "throughput_max_seq_length": 32,
        # The pretraining figures at a smoke size; the time-to-accuracy run makes its shards on the Celery worker
        # although RAY_ADDRESS names the cluster (inline: a prefork task may start no processes).
        "pretrain_step_configs": ["bert_2_64_2"], "pretrain_step_steps": 1, "pretrain_step_batch_size": 2,
        "pretrain_step_max_seq_length": 16, "pretrain_step_max_predictions": 3, "time_to_accuracy_tolerance": 1.0,
        "convergence_config": "bert_2_64_2", "convergence_steps": 4, "convergence_batch_size": 4,
        "convergence_max_seq_length": 32, "convergence_max_predictions": 5, "convergence_dupe_factor": 1,
        "convergence_eval_every": 2, "convergence_eval_batches": 2, "convergence_peer_lrs": [3e-3]})
    run = api.wait_for_run("bert_nightly_regression", run_id, RUN_TIMEOUT_S)
    took["bert_nightly_regression"] = time.monotonic()
    assert run["state"] == "success", api.failed_tasks("bert_nightly_regression", run_id)
    results = json.loads(storage.read_text(f"{nightly}/report/results.json"))
    assert results["status"] == "passed" and set(results["champions"]) == {"bert-sst-2", "bert-squad"}
    assert {t["hostname"] for t in api.task_instances("bert_nightly_regression", run_id)} == set(WORKERS)
    # Only this run: it took the due nightly's logical date, so unpausing the DAG added no run of its defaults.
    assert api.get("/api/v2/dags/bert_nightly_regression/dagRuns")["total_entries"] == 1

    # --- The sst-2 champion served from the registry by a process with no S3 credentials.
    env = {k: v for k, v in stack_fixture.service_env().items() if not k.startswith("AWS_")}
    env.update(MLFLOW_TRACKING_URI=stack.mlflow_url, OMP_NUM_THREADS="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    with ModelServer("models:/bert-sst-2@champion", env, tmp_path / "serve.log") as server:
        status, body = post_json(f"{server.url}/invocations",
                                 {"dataframe_records": [{"text": "the concert was wonderful ."}]})
    assert status == 200, body
    assert [set(p) for p in body["predictions"]] == [{"label", "probabilities"}]
    # Nothing of the runs was written to a worker's own disk: every output went to the work URI.
    for worker in WORKERS:
        local = stack.home / "workers" / worker / "home" / ".bert-pipeline"
        assert not any((local / kind).exists() for kind in ("pretraining", "finetune", "nightly")), worker
    assert pretrained.tags.get("metrics_on") == "held-out"
    took["serve"] = time.monotonic()
    marks = list(took.items())
    print("seconds per step: " + ", ".join(f"{name} {at - marks[i][1]:.0f}" for i, (name, at) in
                                           enumerate(marks[1:])))
