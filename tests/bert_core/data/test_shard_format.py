from __future__ import annotations

import time
import zipfile

import numpy as np
import pytest

from bert_core.data import shard_format as shards
from bert_core.errors import BertPipelineError


def make_arrays(n: int = 3, t: int = 8, p: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(0, 100, (n, t)).astype(np.int32),
        "segment_ids": np.zeros((n, t), np.int8),
        "valid_lengths": np.full(n, t, np.int32),
        "masked_lm_positions": np.ones((n, p), np.int32),
        "masked_lm_ids": np.ones((n, p), np.int32),
        "masked_lm_weights": np.ones((n, p), np.float32),
        "next_sentence_labels": np.zeros(n, np.int8),
    }


def test_roundtrip_keys_dtypes_and_np_load(tmp_path):
    arrays = make_arrays()
    path = shards.write_shard(tmp_path / shards.shard_name(0), arrays)
    assert path.name == "part-00000.npz"
    back = shards.read_shard(path)
    assert list(back) == list(shards.KEYS)
    for key, (dtype, dims) in shards.SCHEMA.items():
        assert back[key].dtype == dtype and back[key].ndim == len(dims)
        assert np.array_equal(back[key], arrays[key])
    with np.load(path) as data:  # plain numpy reads it
        assert sorted(data.files) == sorted(shards.KEYS)
    assert shards.list_shards(tmp_path) == [path]
    assert shards.num_instances(back) == 3


def test_same_arrays_same_bytes_at_any_time(tmp_path, monkeypatch):
    shards.write_shard(tmp_path / "a.npz", make_arrays())
    later = time.time() + 86_400
    monkeypatch.setattr(time, "time", lambda: later)  # what np.savez would stamp into the zip
    shards.write_shard(tmp_path / "b.npz", make_arrays())
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a.pop("segment_ids"), r"missing keys \['segment_ids'\]"),
        (lambda a: a.update(extra=np.zeros(3)), r"unexpected keys \['extra'\]"),
        (lambda a: a.update(input_ids=a["input_ids"].astype(np.int64)), "input_ids has dtype int64, expected int32"),
        (lambda a: a.update(valid_lengths=np.zeros(4, np.int32)), "valid_lengths has N=4"),
        (lambda a: a.update(masked_lm_weights=np.ones((3, 5), np.float32)), "masked_lm_weights has P=5"),
    ],
)
def test_schema_violations_name_the_shard(tmp_path, change, message):
    arrays = make_arrays()
    change(arrays)
    with pytest.raises(BertPipelineError, match=message):
        shards.write_shard(tmp_path / "bad.npz", arrays)
    np.savez(tmp_path / "part-00007.npz", **arrays)
    with pytest.raises(BertPipelineError, match=r"part-00007\.npz: not a valid shard"):
        shards.read_shard(tmp_path / "part-00007.npz")


def test_unreadable_shard(tmp_path):
    (tmp_path / "part-00000.npz").write_bytes(b"not a zip")
    with pytest.raises(BertPipelineError, match=r"part-00000\.npz: not a readable \.npz shard"):
        shards.read_shard(tmp_path / "part-00000.npz")
