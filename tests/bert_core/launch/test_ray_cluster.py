"""Joining Ray: RAY_ADDRESS as a job server URL is refused up front, saying what to do instead; a head that is not
there fails in seconds; a local instance's workers find their own cluster (Ray's state API), not a stale one."""

from __future__ import annotations

import pytest

from bert_core.errors import BertPipelineError
from bert_core.launch import ray_cluster
from bert_pipeline.cli import main
from tests import toy_tasks
from tests.corpus_text import documents, write_segmented

JOB_SERVER = "http://127.0.0.1:8265"
VOCAB = "tests/fixtures/vocab/uncased_L-12_H-768_A-12.vocab.txt"


@pytest.mark.parametrize(("value", "expected"), [("", None), ("10.0.0.5:6379", "10.0.0.5:6379"),
                                                   ("ray://head:10001", "ray://head:10001"), ("auto", "auto")])
def test_cluster_addresses_pass(monkeypatch, value, expected):
    monkeypatch.setenv("RAY_ADDRESS", value)
    assert ray_cluster.cluster_address() == expected


@pytest.mark.parametrize("url", [JOB_SERVER, "https://ray.example.org"])
def test_a_job_server_url_is_refused_with_what_to_do(monkeypatch, url):
    monkeypatch.setenv("RAY_ADDRESS", url)
    with pytest.raises(BertPipelineError, match="job server") as info:
        ray_cluster.cluster_address()
    assert f"ray job submit --address {url}" in str(info.value) and "host:6379" in str(info.value)


def _refused(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "job server" in err[0] and "ray job submit" in err[0], err
    return err[0]


def test_cli_steps_refuse_a_job_server_url_before_any_work(monkeypatch, tmp_path, capsys, minilm_dir):
    monkeypatch.setenv("RAY_ADDRESS", JOB_SERVER)
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    write_segmented(tmp_path / "seg.txt", documents(6, seed=3))
    assert main(["make-shards", str(tmp_path / "seg.txt"), "--output", str(tmp_path / "shards"), "--vocab", VOCAB,
                 "--no-progress"]) == 2
    _refused(capsys)
    assert not (tmp_path / "shards").exists()

    assert main(["pretrain", "--data", str(tmp_path / "none-*.npz"), "--model", "bert_12_768_12",
                 "--output", str(tmp_path / "model"), "--num-steps", "2", "--num-workers", "2"]) == 2
    _refused(capsys)

    data = toy_tasks.write_sst2(tmp_path / "sst2")
    assert main(["finetune", "SST-2", "--data-dir", str(data), "--model", str(minilm_dir), "--output",
                 str(tmp_path / "ft"), "--num-workers", "2"]) == 2
    _refused(capsys)
    assert not (tmp_path / "ft").exists() and not (tmp_path / "model").exists()
    # Tracking was on (the embedded store under BERT_PIPELINE_HOME): refused before any MLflow run was opened.
    assert not (tmp_path / "home" / "mlflow.db").exists()


def test_joining_a_head_that_is_not_there_fails_in_seconds_naming_it():
    """Ray itself retries an absent head 20 times at ~40 s each; a driver gives up after HEAD_WAIT_S with a
    retryable error (Airflow's retries then wait for a head that is restarting)."""
    import os
    import subprocess
    import sys
    import time

    from bert_core.launch.ports import free_ports

    address = f"127.0.0.1:{free_ports()[0]}"
    program = ("from bert_core.launch import ray_cluster\nray_cluster.HEAD_WAIT_S = 2\n"
               "try:\n    ray_cluster.connect()\nexcept ConnectionError as exc:\n    print(exc)\n")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_ADDRESS": address})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"RAY_ADDRESS={address}: no Ray head answers there (Connection refused); " \
                                  "is the cluster up?"
    assert time.monotonic() - began < 60


LOCAL_INSTANCE_PROBE = """
import json, os, sys
import ray
from bert_core.launch import ray_cluster

ray_cluster.connect(local_cpus=1)

@ray.remote(num_cpus=0)
class Probe:
    def ready(self):
        return True

@ray.remote(num_cpus=0)
def state_api_from_a_worker():
    # What Ray Train's placement-group cleaner does from its worker: ask the state API whether an actor is alive.
    from ray.util.state import list_actors
    found = list_actors(filters=[("class_name", "=", "Probe")], timeout=30)
    return os.environ.get("RAY_API_SERVER_ADDRESS"), [a.state for a in found]

probe = Probe.remote()
ray.get(probe.ready.remote())
server, states = ray.get(state_api_from_a_worker.remote(), timeout=90)
print(json.dumps({"server": server, "states": states, "dashboard": ray.get_runtime_context().gcs_address and
                  ray._private.worker._global_node.webui_url,
                  "driver_env": os.environ.get("RAY_API_SERVER_ADDRESS")}))
"""


def test_a_local_instance_s_workers_find_their_own_cluster_past_a_stale_address_file():
    """Ray's state API, which Ray Train's placement-group cleaner calls from a worker, looks for "its" cluster
    around the machine: RAY_ADDRESS, else the last cluster file in Ray's temp dir, else the GCS processes it
    sees. A stale file (a cluster long gone) made every local run's cleaner ask a dead address (a 12 s hang and a
    traceback at the end of each run), and another Ray on the machine could have answered for this one. The local
    instance connect() starts names its own dashboard to its workers (RAY_API_SERVER_ADDRESS)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from bert_core.launch.ports import free_ports

    # A short temp dir: Ray's socket paths under it must fit in 107 bytes.
    with tempfile.TemporaryDirectory(prefix="rt", dir="/tmp") as temp:
        os.makedirs(f"{temp}/ray")
        with open(f"{temp}/ray/ray_current_cluster", "w") as f:
            f.write(f"127.0.0.1:{free_ports()[0]}")  # nothing listens there
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_API_SERVER"))}
        done = subprocess.run([sys.executable, "-c", LOCAL_INSTANCE_PROBE], capture_output=True, text=True,
                              timeout=240, env={**env, "RAY_TMPDIR": temp, "AIRFLOW_CTX_DAG_RUN_ID": "manual__1"})
    assert done.returncode == 0, done.stderr[-3000:]
    # For an Airflow task (which records stderr as errors) Ray's own info lines go to stdout.
    assert "Started a local Ray instance" in done.stdout and "Started a local Ray instance" not in done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["states"] == ["ALIVE"]
    assert seen["server"].removeprefix("http://") == seen["dashboard"].removeprefix("http://")
    assert seen["driver_env"] is None  # the driver's own environment is left as it was
