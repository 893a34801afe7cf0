"""`ray job submit --working-dir . -- bert-pipeline pretrain ...` against a real local `ray start --head`."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from synthetic_shards import tiny_model_config, write_shards

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_job_submit_pretrain(tmp_path):
    bin_dir = Path(sys.executable).parent
    ray = shutil.which("ray", path=str(bin_dir)) or str(bin_dir / "ray")
    env = dict(os.environ, RAY_AUTH_MODE="disabled", BERT_PIPELINE_HOME=str(tmp_path / "home"),
               PATH=f"{bin_dir}:{os.environ['PATH']}", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    port, gcs = _free_port(), _free_port()
    shards = write_shards(tmp_path / "shards", num_shards=1, per_shard=32)
    config = tiny_model_config(tmp_path / "tiny.json")
    # Ray's unix socket paths must stay under 108 bytes: a short temp dir, not pytest's deep one.
    ray_tmp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    start = subprocess.run([ray, "start", "--head", "--num-cpus", "2", "--port", str(gcs),
                            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(port),
                            "--temp-dir", str(ray_tmp)], env=env, capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stderr[-2000:]
    try:
        job = subprocess.run(
            [ray, "job", "submit", "--address", f"http://127.0.0.1:{port}", "--working-dir", str(REPO), "--",
             "bert-pipeline", "pretrain", "--data", f"{shards}/part-*.npz", "--model", str(config),
             "--output", str(tmp_path / "model"), "--batch-size", "8", "--num-steps", "4", "--no-tracking",
             "--no-progress"],
            env=env, capture_output=True, text=True, timeout=420, cwd=REPO)
        assert job.returncode == 0, (job.stdout + job.stderr)[-4000:]
        assert "succeeded" in job.stdout.lower()
        assert (tmp_path / "model" / "model.safetensors").is_file()
        assert (tmp_path / "model" / "manifest.json").is_file()
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(ray_tmp, ignore_errors=True)
