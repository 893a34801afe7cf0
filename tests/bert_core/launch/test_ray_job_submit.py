"""`ray job submit --working-dir . -- bert-pipeline pretrain ...` against a real local `ray start --head`."""

import subprocess
from pathlib import Path

import pytest

from tests.synthetic_shards import tiny_model_config, write_shards

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[3]


def test_ray_job_submit_pretrain(ray_head, tmp_path):
    shards = write_shards(tmp_path / "shards", num_shards=1, per_shard=32)
    config = tiny_model_config(tmp_path / "tiny.json")
    env = dict(ray_head.env, BERT_PIPELINE_HOME=str(tmp_path / "home"))
    job = subprocess.run(
        [ray_head.ray, "job", "submit", "--address", ray_head.dashboard_url, "--working-dir", str(REPO), "--",
         "bert-pipeline", "pretrain", "--data", f"{shards}/part-*.npz", "--model", str(config),
         "--output", str(tmp_path / "model"), "--batch-size", "8", "--num-steps", "4", "--no-tracking",
         "--no-progress"],
        env=env, capture_output=True, text=True, timeout=420, cwd=REPO)
    assert job.returncode == 0, (job.stdout + job.stderr)[-4000:]
    assert "succeeded" in job.stdout.lower()
    assert (tmp_path / "model" / "model.safetensors").is_file()
    assert (tmp_path / "model" / "manifest.json").is_file()
