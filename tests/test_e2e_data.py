"""Raw text -> segment -> make-shards -> validate-shards, through the command line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from bert_core.data import shard_format as shards
from bert_core.io import manifest
from bert_pipeline.cli import main
from tests.corpus_text import documents, write_raw

VOCAB = str(Path(__file__).parent / "fixtures" / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt")


def test_text_to_validated_shards(tmp_path, monkeypatch):
    from bert_core.data import segment
    monkeypatch.setattr(segment, "_installed_punkt_dir", lambda: None)  # train Punkt on the input
    write_raw(tmp_path / "books.txt", documents(150, seed=31, min_sentences=3, max_sentences=20))
    records = [json.dumps({"text": " ".join(doc)}) for doc in documents(80, seed=32, min_sentences=2)]
    (tmp_path / "web.jsonl.gz").write_bytes(gzip.compress(("\n".join(records) + "\n").encode()))

    assert main(["segment", str(tmp_path / "books.txt"), str(tmp_path / "web.jsonl.gz"),
                 "--output", str(tmp_path / "segmented")]) == 0
    assert sorted(p.name for p in (tmp_path / "segmented").iterdir()) == ["books.txt", "manifest.json", "web.txt"]

    shard_args = ["make-shards", str(tmp_path / "segmented"), "--output", str(tmp_path / "shards"), "--vocab", VOCAB,
                  "--max-seq-length", "64", "--max-predictions-per-seq", "10", "--dupe-factor", "2",
                  "--instances-per-shard", "500", "--workers", "2", "--no-progress"]
    assert main(shard_args) == 0
    made = manifest.read(tmp_path / "shards")
    assert made["totals"]["documents"] == 230
    assert [i["uri"].rsplit("/", 1)[-1] for i in made["inputs"]][:2] == ["books.txt", "web.txt"]
    assert len(shards.list_shards(tmp_path / "shards")) == len(made["shards"]) >= 2
    assert main(shard_args) == 0  # idempotent
    assert manifest.read(tmp_path / "shards")["finished_at"] == made["finished_at"]

    assert main(["validate-shards", str(tmp_path / "shards")]) == 0
    validation = json.loads((tmp_path / "shards" / "validation.json").read_text())
    assert validation["success"] and validation["statistics"]["instances"] == made["totals"]["instances"]
