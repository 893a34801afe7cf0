"""make-shards' units as Ray tasks (bert_core.launch.ray_shards): the same bytes as in-process."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bert_core.data import make_shards as sharding
from bert_core.data import shard_format as shards
from bert_core.data.instances import ShardConfig
from bert_core.io import manifest
from bert_core.launch import ray_shards
from tests.corpus_text import documents, write_segmented
from tests.paths import FIXTURES

VOCAB = str(FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt")
SMALL = ShardConfig(dupe_factor=2, chunk_documents=40, instances_per_shard=300, shuffle_buffer=500)


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    write_segmented(root / "a.txt", documents(130, seed=1))
    write_segmented(root / "b.txt", documents(70, seed=2))
    return root


def digests(out: Path) -> list[str]:
    return [manifest.sha256_file(p) for p in shards.list_shards(out)]


@pytest.mark.slow
def test_ray_tasks_give_the_same_bytes(corpus, tmp_path, monkeypatch, caplog):
    import ray
    sharding.make_shards([str(corpus)], str(tmp_path / "inline"), VOCAB, SMALL)
    # address="local": a fresh local instance, even when another Ray cluster runs on this machine.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        # No backend given: RAY_ADDRESS alone sends the units to the cluster as Ray tasks.
        monkeypatch.setenv("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
        with caplog.at_level(logging.INFO, logger="bert_core.data.make_shards"):
            ray_shards.make_shards([str(corpus)], str(tmp_path / "ray"), VOCAB, SMALL, workers=2)
    finally:
        ray.shutdown()
    assert "backend ray" in caplog.text
    assert digests(tmp_path / "ray") == digests(tmp_path / "inline")


