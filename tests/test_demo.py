"""`bert-pipeline demo` end to end: the bert_demo DAG through Airflow's dag.test(), local Ray, sqlite MLflow, and
its storage root on S3 (a real S3 protocol server on loopback, moto), with the credentials coming from an Airflow
connection, as a deployment would configure them. Run as a user runs it, a command whose output is not a terminal
(the run view's plain lines): what it prints is short and warning-free, everything else is in the run's log."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bert_core.io import manifest
from bert_pipeline.cli import main
from tests.airflow_home import embedded_env

pytestmark = pytest.mark.slow

# Fewer steps/epochs than the demo's defaults: the test checks the wiring, not the numbers. 8 pretraining steps
# leave the tiny BERT at chance on the held-out documents: the registry gate must refuse it and say why.
# Fine-tuning in the task process (finetune_num_workers 0): Ray workers writing to S3 with the connection's
# credentials are already exercised by pretraining (Ray Train, 2 workers); a Ray Train start-up per fine-tuning
# added ~30 s (Ray Train fine-tuning: tests/bert_core/finetune/test_finetune_ray.py, the stack's REST test).
CONF = {"pretrain_num_steps": 8, "finetune_epochs": 1, "squad_epochs": 1, "finetune_num_workers": 0}


SECRET = "demo-s3-secret-7f3a9c"


@pytest.fixture()
def demo_env(monkeypatch, tmp_path):
    home = embedded_env(monkeypatch, tmp_path)
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # Only the Airflow connection knows the endpoint and the keys: the tasks must take them from it.
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({
        "conn_type": "aws", "login": "demo-key-id", "password": SECRET,
        "extra": {"endpoint_url": f"http://{host}:{port}", "region_name": "us-east-1"}}))
    import boto3

    boto3.client("s3", endpoint_url=f"http://{host}:{port}", aws_access_key_id="demo-key-id",
                 aws_secret_access_key=SECRET).create_bucket(Bucket="bert-demo")
    yield home, f"http://{host}:{port}"
    server.stop()


def _run_demo(home: Path, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    """The demo as a user runs it; one that has not finished in `timeout` s is stopped and the test fails with
    what it printed and its run log's tail (pytest's own timeout would kill it with neither: a demo that hung
    once in CI left nothing to read)."""
    with subprocess.Popen([sys.executable, "-m", "bert_pipeline.cli", "demo", "--home", str(home), *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True) as demo:
        try:
            out, err = demo.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(demo.pid, signal.SIGUSR1)  # every thread's stack into the run log (cli.install_stack_dump)
            time.sleep(3)
            os.killpg(demo.pid, signal.SIGKILL)
            out, err = demo.communicate()
            logs = sorted((home / "runs").glob("*/*/run.log"), key=lambda p: p.stat().st_mtime)
            tail = "\n".join(logs[-1].read_text(errors="replace").splitlines()[-250:]) if logs else "(no run log)"
            pytest.fail(f"the demo did not finish in {timeout:g} s\n--- stdout\n{out}\n--- stderr\n{err[-5000:]}\n"
                        f"--- {logs[-1] if logs else 'run log'} (last lines)\n{tail}")
    return subprocess.CompletedProcess(demo.args, demo.returncode, out, err)


def test_demo_end_to_end_on_s3(demo_env, tmp_path, monkeypatch, minilm_dir):
    home, endpoint = demo_env
    work_uri = "s3://bert-demo/runs/1"
    # The demo's own model to fine-tune (MiniLM), on S3 like the work dir: with a remote work dir every task fails
    # that hands on a local path (operators.handoff), a model path included. Not a tiny random BERT: it stays at
    # chance on SST-2, and promotion refuses a model no better than always answering the majority label.
    import boto3

    bucket = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="demo-key-id", aws_secret_access_key=SECRET)
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        bucket.upload_file(str(minilm_dir / name), "bert-demo", f"models/minilm/{name}")
    conf = {**CONF, "model": "s3://bert-demo/models/minilm"}
    done = _run_demo(home, ["--work-dir", work_uri, "--conf", json.dumps(conf)])
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert done.stderr == ""  # everything the components print or log goes to the run's log
    # The terminal (issue 27): a line per task, the summary, where things are; at most ~40 lines, no warning.
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert not [line for line in lines if re.search(r"warn", line, re.IGNORECASE)], out
    assert re.search(r"bert_demo finished in [0-9.]+ (s|min)", out) and "mlflow ui --backend-store-uri sqlite:///" in out
    for task in ("plan", "segment", "make_shards", "make_heldout_shards", "validate_shards", "validate_heldout_shards",
                 "pretrain", "register_and_promote_pretrained", "finetune_sst2", "evaluate_squad", "summary"):
        assert any(line.startswith(f" ✓ {task} ") for line in lines), (task, out)
    assert re.search(r"✓ pretrain .* 8 steps; held-out masked-LM 0\.\d+ \(chance 0\.\d+\)", out), out
    # 8 steps leave the tiny BERT at chance: the summary says so in words, beside the registry's refusal.
    assert "masked-LM prediction did not learn on this tiny corpus:" in out, out
    assert re.search(r"bert-pretrained v1 \(not promoted: .*below the floor", out), out
    log = Path(lines[0].split()[2])  # "bert_demo: log PATH ..."
    assert f"Log: {log}" in out and log.name == "run.log"
    text = log.read_text()
    assert "[DAG TEST] starting task_id=pretrain" in text and "(RayTrainWorker pid=" in text  # Airflow's and Ray's
    assert "this run did not learn: at the end (held-out, step 8)" in text
    assert "PreemptionWatcher" not in text  # not started on a single-machine Ray (bert_core/launch/ray_train.py)
    assert SECRET not in out + text
    assert json.loads((log.parent / "run.json").read_text())["state"] == "success"
    assert log.parent == home / "runs" / "bert_demo" / log.parent.name  # an s3:// work dir: the log stays local

    # Read the results back from the bucket (the test's own credentials; the tasks had the connection's).
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "demo-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    from bert_core.io import storage
    work = storage.local_dir(work_uri)
    assert not (tmp_path / "s3:").exists() and not list(tmp_path.glob("**/runs/1"))  # nothing local

    # Every step left its manifest (ARCHITECTURE §2).
    steps = {"segmented": "segment", "shards": "make-shards", "pretrained": "pretrain",
             "finetune-sst-2": "finetune", "finetune-squad": "finetune", "evaluate-sst-2": "evaluate",
             "evaluate-squad": "evaluate"}
    for directory, step in steps.items():
        assert manifest.read(work / directory)["step"] == step, directory
        assert not manifest.verify_outputs(work / directory)
    assert json.loads((work / "shards" / "validation.json").read_text())["success"]
    pretrained = manifest.read(work / "pretrained")
    assert set(pretrained["metrics"]) >= {"loss", "mlm_accuracy", "nsp_accuracy", "mlm_accuracy_over_chance"}
    assert pretrained["training"]["metrics_on"] == "data_eval"  # scored on the held-out documents
    assert manifest.read(work / "shards-heldout")["config"]["split"] == "heldout"
    assert "accuracy" in manifest.read(work / "finetune-sst-2")["metrics"]
    assert {"exact_match", "f1"} <= set(manifest.read(work / "evaluate-squad")["metrics"])

    # Registered versions with the champion alias, in the embedded sqlite store; decisions recorded.
    from mlflow import MlflowClient

    summary = json.loads((work / "demo_summary.json").read_text())
    assert summary["summary_file"] == f"{work_uri}/demo_summary.json"
    client = MlflowClient(summary["tracking_uri"], registry_uri=summary["tracking_uri"])
    assert summary["tracking_uri"] == f"sqlite:///{home / 'mlflow.db'}"
    for model in summary["models"]:
        if model["name"] == "bert-pretrained":
            assert not model["promoted"] and "below the floor" in model["reasons"][0], model
            version = client.get_model_version(model["name"], model["candidate"])
            assert version.tags["promotion.decision"] == "rejected" and version.tags["metrics_on"] == "held-out"
            continue
        assert model["promoted"], model
        champion = client.get_model_version_by_alias(model["name"], "champion")
        assert str(champion.version) == model["candidate"]
        assert champion.tags["promotion.decision"] == "promoted"
        assert (work / "registry" / f"{model['name']}-v{model['candidate']}.json").is_file()
    assert {m["name"] for m in summary["models"]} == {"bert-pretrained", "bert-sst-2", "bert-squad"}
    assert not (tmp_path / "mlruns").exists()  # artifacts stay under the home

    # Every task recorded its try in the run directory (the report's timeline).
    from pipelines.bert_demo import bert_demo

    records = [json.loads(p.read_text()) for p in (work / "tasks").iterdir()]
    assert {r["task_id"] for r in records} == set(bert_demo().task_ids)
    assert {r["state"] for r in records} == {"success"} and len({r["run_id"] for r in records}) == 1
    # The run's report: in the run directory, printed, and in the DAG run's MLflow run with the records it drew.
    assert f"Report (open it in a browser): {work_uri}/report.html" in out
    report_run = client.search_runs([client.get_experiment_by_name("bert-runs").experiment_id],
                                    f"tags.run_dir = '{work_uri}'")[0]
    assert report_run.data.tags["pipeline_run_id"] == records[0]["run_id"]
    assert {a.path for a in client.list_artifacts(report_run.info.run_id)} == {"report.html", "report_data.json"}
    pretrain_run = manifest.read(work / "pretrained")["mlflow_run_id"]
    assert client.get_run(pretrain_run).data.tags["report_run_id"] == report_run.info.run_id
    # ... drawn again from MLflow, through the pretraining run.
    rebuilt = tmp_path / "rebuilt.html"
    assert main(["report", f"runs:/{pretrain_run}", "--output", str(rebuilt), "--no-mlflow"]) == 0
    check_report_in_a_browser(work / "report.html", tmp_path)
    assert rebuilt.read_text().count('<img src="data:image/png;base64,') == 4


def check_report_in_a_browser(report, tmp_path) -> None:
    """report.html as a person sees it: Chromium renders it, every image loaded, no console error, every section
    there, the registry's refusal of the 8-step pretrained model said in words."""
    from tests.browser import CHROMEDRIVER, CHROMIUM, MISSING, chromium, console_errors

    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip(f"the demo passed; the report's browser check {MISSING}")
    from selenium.webdriver.common.by import By

    driver = chromium(tmp_path / "chromium-profile", window="1300,1000")
    try:
        driver.get(report.as_uri())
        images = driver.find_elements(By.TAG_NAME, "img")
        loaded = driver.execute_script("return Array.from(document.images).map(i => i.complete && i.naturalWidth)")
        sections = [s.get_attribute("id") for s in driver.find_elements(By.TAG_NAME, "section")]
        text = driver.find_element(By.TAG_NAME, "body").text
        errors = console_errors(driver)
    finally:
        driver.quit()
    assert len(images) == 4 and all(width and width > 400 for width in loaded), loaded  # curves, 2 tasks, timeline
    assert sections == ["models", "data", "pretraining", "finetuning", "timeline", "serving"]
    assert not errors, errors
    # What the pretrained model trained on: the bundled corpus's documents, held-out ones apart, validated shards.
    assert re.search(r"225 documents \([\d,]+ sentences\) from \d+ input file\(s\).*: \d+ for training, \d+ "
                     r"\([\d.]+%\) held out for evaluation", text), text
    assert "validate-shards: passed" in text
    assert re.search(r"bert-pretrained v\d+ not promoted", text) and "is below the floor" in text
    assert "mlflow models serve -m models:/bert-sst-2@champion" in text
