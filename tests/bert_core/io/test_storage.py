"""The local cache of s3:// prefixes (storage.local_dir) filled by several readers at once, as the Ray Train workers
of one node do with the same shards: each download goes to a name of its own, so none trips over another's."""

from __future__ import annotations

import threading

import pytest

from bert_core.io import storage
from tests import multinode_cluster


@pytest.fixture
def s3(monkeypatch, tmp_path):
    monkeypatch.setenv("BERT_PIPELINE_CACHE", str(tmp_path / "cache"))
    with multinode_cluster.moto_s3():
        storage.s3_client().create_bucket(Bucket="cache")
        yield


def test_readers_at_once_fill_the_cache_without_tripping_over_each_other(s3, tmp_path):
    files = {f"part-{i}.npz": bytes([i]) * 200_000 for i in range(3)} | {"manifest.json": b'{"step": "x"}'}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        storage.upload_file(tmp_path / name, f"s3://cache/shards/{name}")
    errors, dirs = [], []
    start = threading.Barrier(8)

    def read() -> None:
        start.wait()
        try:
            dirs.append(storage.local_dir("s3://cache/shards"))
        except Exception as exc:  # noqa: BLE001 - the test reports any
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    (local,) = set(dirs)
    assert {p.name: p.read_bytes() for p in local.iterdir() if not p.name.startswith(".")} == files
    assert sorted(p.name for p in local.iterdir() if p.name.startswith(".")) == [".etags.json", storage.SOURCE_FILE]  # no temp file left


def test_an_atomic_output_directory_gets_the_umask_mode(tmp_path):
    """mkdtemp's 0700 used to survive the rename: every step's output was readable by its owner only."""
    import os

    mask = os.umask(0o022)
    try:
        with storage.atomic_output_dir(str(tmp_path / "out")) as tmp:
            (tmp / "manifest.json").write_text("{}")
    finally:
        os.umask(mask)
    assert (tmp_path / "out").stat().st_mode & 0o777 == 0o755


def test_saved_weights_get_the_umask_mode(tmp_path):
    """safetensors wrote model.safetensors 0600 whatever the umask (config.json beside it was 0644)."""
    import os

    import torch

    from bert_core.model.config import BertConfig
    from bert_core.model.weights import save_state_dict

    config = BertConfig(vocab_size=8, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                        intermediate_size=8)
    mask = os.umask(0o022)
    try:
        save_state_dict({"w": torch.zeros(2)}, config, tmp_path)
    finally:
        os.umask(mask)
    assert {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()} == {
        "model.safetensors": 0o644, "config.json": 0o644}


def test_a_missing_bucket_is_an_error_naming_the_uri_and_the_bucket(s3, tmp_path):
    """boto3 said only "An error occurred (NoSuchBucket) when calling the GetObject operation"; a DAG's plan task
    retried it three times (90 s). Now a BertPipelineError, which an Airflow task does not retry."""
    from bert_core.errors import BertPipelineError

    (tmp_path / "f.txt").write_text("x")
    calls = {"read_text": lambda: storage.read_text("s3://nobucket/run/manifest.json"),
             "write_text": lambda: storage.write_text("s3://nobucket/run/plan.json", "{}"),
             "exists": lambda: storage.exists("s3://nobucket/run"),
             "list_files": lambda: storage.list_files("s3://nobucket/run"),
             "local_dir": lambda: storage.local_dir("s3://nobucket/run"),
             "upload_file": lambda: storage.upload_file(tmp_path / "f.txt", "s3://nobucket/run/f.txt"),
             "download_file": lambda: storage.download_file("s3://nobucket/run/f.txt", tmp_path / "g.txt")}
    for name, call in calls.items():
        with pytest.raises(BertPipelineError, match=r"s3://nobucket/run\S*: the S3 bucket 'nobucket' does not exist "
                                                    r"on http://"):
            call()
            pytest.fail(f"{name}: no error")
    # A missing object in a bucket that exists stays what it was.
    with pytest.raises(FileNotFoundError):
        storage.read_text("s3://cache/nothing.json")
    import botocore.exceptions

    with pytest.raises(botocore.exceptions.ClientError, match="404"):
        storage.download_file("s3://cache/nothing.json", tmp_path / "g.txt")
