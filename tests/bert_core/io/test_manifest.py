import json

import pytest

from bert_core.errors import BertPipelineError
from bert_core.io import manifest


def test_build_write_read_and_up_to_date(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "in.txt").write_text("input")
    inputs = {str(tmp_path / "in.txt"): manifest.sha256_file(tmp_path / "in.txt")}
    m = manifest.build("segment", {"language": "en"}, inputs, tmp_path, ["a.txt"], manifest.now(),
                       metrics={"loss": 1})
    manifest.write(m, tmp_path)
    data = manifest.read(tmp_path)
    assert data["outputs"] == [{"path": "a.txt", "sha256": manifest.sha256_file(tmp_path / "a.txt")}]
    assert data["metrics"] == {"loss": 1.0} and data["step"] == "segment"
    assert manifest.is_up_to_date(tmp_path, "segment", {"language": "en"}, inputs)
    assert not manifest.is_up_to_date(tmp_path, "segment", {"language": "zh"}, inputs)
    assert not manifest.is_up_to_date(tmp_path, "segment", {"language": "en"}, {"other": "x"})
    (tmp_path / "a.txt").write_text("tampered")
    assert manifest.verify_outputs(tmp_path) == ["a.txt: sha256 differs from the manifest"]
    assert not manifest.is_up_to_date(tmp_path, "segment", {"language": "en"}, inputs)


def test_read_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no manifest"):
        manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"step": "x"}))
    with pytest.raises(BertPipelineError, match="lacks the field 'config'"):
        manifest.read(tmp_path)


def test_inputs_read_through_the_s3_cache_are_recorded_by_their_uri(tmp_path, monkeypatch):
    """A step reads an s3:// input through its local cached copy (storage.local_dir); the manifest names the s3://
    object, which a task on another machine can read, not this machine's cache (ARCHITECTURE §2: inputs are URIs),
    and the up-to-date check matches the same inputs given either way."""
    from bert_core.io import storage
    from tests.multinode_cluster import moto_s3

    monkeypatch.setenv("BERT_PIPELINE_CACHE", str(tmp_path / "cache"))
    with moto_s3():
        storage.s3_client().create_bucket(Bucket="data")
        storage.write_text("s3://data/glue/SST-2/train.tsv", "sentence\tlabel\nfine\t1\n")
        cached = storage.local_dir("s3://data/glue/SST-2") / "train.tsv"
    assert cached.is_file() and str(tmp_path / "cache") in str(cached)
    assert storage.source_uri(cached) == "s3://data/glue/SST-2/train.tsv"
    assert storage.source_uri(tmp_path / "in.txt") == str(tmp_path / "in.txt")  # not a cached copy
    (tmp_path / "out").mkdir()
    inputs = {str(cached): manifest.sha256_file(cached)}
    manifest.write(manifest.build("finetune", {}, inputs, tmp_path / "out", [], manifest.now()), tmp_path / "out")
    assert manifest.read(tmp_path / "out")["inputs"] == [{"uri": "s3://data/glue/SST-2/train.tsv",
                                                          "sha256": inputs[str(cached)]}]
    assert manifest.is_up_to_date(tmp_path / "out", "finetune", {}, inputs)
