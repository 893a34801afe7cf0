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


def test_ray_driver_commands_always_exit_0(ray_head, tmp_path):
    """Stress test for the exit crash of issue 15 on the Ray side: Ray starts a native stats thread while a
    driver disconnects (docs/architecture.md, "Ending a process"), so every run of a command that joined a
    cluster ends with that thread alive. Fresh `bert-pipeline make-shards` processes send their units to the
    cluster as Ray tasks, again and again; every one must exit 0 and write the same shards."""
    import sys

    from bert_core.data import shard_format as shards
    from bert_core.io import manifest
    from tests.corpus_text import documents, write_segmented
    from tests.paths import FIXTURES

    corpus = tmp_path / "corpus.txt"
    write_segmented(corpus, documents(60, seed=3))
    script = Path(sys.executable).parent / "bert-pipeline"
    # RAY_ADDRESS in the GCS form: the command joins the cluster as a driver (not a job).
    env = {**ray_head.env, "RAY_ADDRESS": ray_head.gcs_address, "PYTHONFAULTHANDLER": "1",
           "BERT_PIPELINE_HOME": str(tmp_path / "home")}
    outputs = set()
    for i in range(5):
        out = tmp_path / f"shards-{i}"
        done = subprocess.run(
            [str(script), "make-shards", str(corpus), "--output", str(out), "--workers", "2", "--vocab",
             str(FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt"), "--dupe-factor", "1",
             "--chunk-documents", "20", "--no-progress"],
            env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"run {i}: exit {done.returncode}\n{done.stderr[-3000:]}"
        assert "backend ray" in done.stderr, done.stderr[-2000:]
        outputs.add(tuple(manifest.sha256_file(p) for p in shards.list_shards(out)))
    assert len(outputs) == 1 and outputs.pop()
