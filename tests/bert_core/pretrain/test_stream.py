"""The pretraining data stream: shard discovery, determinism, worker split, bucketing, resume, vocab checks."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from bert_core.errors import BertPipelineError
from bert_core.pretrain.stream import (
    PretrainStream,
    ShardSet,
    StreamConfig,
    bucket_keys,
    check_vocab,
    eval_batches,
    resolve_shards,
    worker_share,
)
from tests.synthetic_shards import write_shards


def _rows(batch) -> list[tuple[int, ...]]:
    """Each instance as its unpadded token ids (unique enough to identify instances here)."""
    ids, mask = batch["input_ids"], batch["attention_mask"]
    return [tuple(ids[i, : int(mask[i].sum())].tolist()) for i in range(len(ids))]


@pytest.fixture
def data(tmp_path):
    return write_shards(tmp_path / "shards", num_shards=3, per_shard=24, max_seq_length=32)


def test_resolve_globs_dirs_and_errors(data, tmp_path):
    assert [p.name for p in resolve_shards(str(data))] == ["part-00000.npz", "part-00001.npz", "part-00002.npz"]
    assert len(resolve_shards(f"{data}/part-0000[01].npz")) == 2
    assert len(resolve_shards(f"{data}/part-00000.npz,{data}/part-00002.npz")) == 2
    with pytest.raises(BertPipelineError, match=r"no shards match .*nothing-\*\.npz"):
        resolve_shards(str(tmp_path / "nothing-*.npz"))


def test_deterministic_per_seed_and_epoch(data):
    shards = ShardSet(str(data))
    cfg = StreamConfig(batch_size=8, seed=3)

    def first(epoch, seed=3):
        stream = PretrainStream(shards, StreamConfig(batch_size=8, seed=seed))
        stream.set_position(epoch, 0)
        return [_rows(b) for b in itertools.islice(stream, 4)]

    assert first(0) == first(0)
    assert first(0) != first(1)
    assert first(0) != first(0, seed=4)
    # One epoch: 72 instances / 8 = 9 batches, every instance exactly once.
    stream = PretrainStream(shards, cfg)
    seen = [r for b in itertools.islice(stream, 9) for r in _rows(b)]
    assert len(seen) == 72 and len(set(seen)) == len(seen)
    assert stream.position()["epoch"] == 0 and stream.batches_in_epoch(0) == 9
    next(stream)
    assert stream.position()["epoch"] == 1


@pytest.mark.parametrize("cfg", [StreamConfig(16, 1), StreamConfig(16, 1, num_buckets=3),
                                 StreamConfig(200, 1, num_buckets=3, use_avg_len=True)])
def test_any_number_of_workers_splits_the_same_global_batches(data, cfg):
    """The global batches do not depend on the worker count; uneven counts split like np.array_split, and
    workers beyond a batch's rows get an empty batch (they still step)."""
    shards = ShardSet(str(data))
    single = [_rows(b) for b in itertools.islice(PretrainStream(shards, cfg), 6)]
    assert PretrainStream(shards, cfg, 0, 3).batches_in_epoch(0) == PretrainStream(shards, cfg).batches_in_epoch(0)
    for world in (2, 3, 5, 20):
        streams = [PretrainStream(shards, cfg, rank=r, world_size=world) for r in range(world)]
        shares = [[_rows(b) for b in itertools.islice(s, 6)] for s in streams]
        for step, expected in enumerate(single):
            split = [shares[r][step] for r in range(world)]
            assert [row for share in split for row in share] == expected, (world, step)
            assert [len(s) for s in split] == [len(a) for a in np.array_split(np.arange(len(expected)), world)]


def test_worker_share_is_contiguous_and_covers_every_row():
    for rows in range(0, 12):
        for world in range(1, 6):
            shares = [worker_share(rows, r, world) for r in range(world)]
            assert [list(range(rows))[s] for s in shares] == [a.tolist() for a in np.array_split(np.arange(rows), world)]


def test_batches_are_trimmed_to_their_longest_sequence(data):
    for batch in itertools.islice(PretrainStream(ShardSet(str(data)), StreamConfig(4, num_buckets=4)), 10):
        lengths = batch["attention_mask"].sum(1)
        assert batch["input_ids"].shape[1] == int(lengths.max())
        assert batch["masked_lm_weights"][:, -1].sum() > 0  # predictions trimmed to the last real one
        assert int(batch["masked_lm_positions"].max()) < int(lengths.max())


def test_buckets_and_token_budget(data):
    shards = ShardSet(str(data))
    keys = bucket_keys(32, 4)
    assert keys.tolist() == [8, 16, 24, 32]
    stream = PretrainStream(shards, StreamConfig(batch_size=96, num_buckets=4, use_avg_len=True))
    sizes = set()
    for batch in itertools.islice(stream, stream.batches_in_epoch(0)):
        lengths = batch["attention_mask"].sum(1)
        key = int(keys[np.searchsorted(keys, int(lengths.max()))])
        assert int(lengths.min()) > key - 8  # all from one bucket
        assert len(lengths) * key <= 96  # tokens (padded to the bucket key) within the budget
        sizes.add(len(lengths))
    assert len(sizes) > 1  # shorter sequences -> more of them per batch


def test_resume_position_gives_the_same_batches(data):
    shards = ShardSet(str(data))
    for world in (1, 2, 4):
        cfg = StreamConfig(batch_size=6, seed=5, num_buckets=3)  # remainders carry across shards
        reference = PretrainStream(shards, cfg, rank=world - 1, world_size=world)
        expected = [_rows(b) for b in itertools.islice(reference, 25)]  # crosses an epoch boundary
        for cut in (1, 4, 9, 13, 20):
            first = PretrainStream(shards, cfg, rank=world - 1, world_size=world)
            got = [_rows(b) for b in itertools.islice(first, cut)]
            position = first.position()
            resumed = PretrainStream(shards, cfg, rank=world - 1, world_size=world)
            resumed.set_position(position["epoch"], position["batches"])
            got += [_rows(b) for b in itertools.islice(resumed, 25 - cut)]
            assert got == expected, f"world={world} cut={cut}"


def test_one_shard_in_memory_at_a_time(data, monkeypatch):
    shards = ShardSet(str(data))
    loads = []
    original = ShardSet.load
    monkeypatch.setattr(ShardSet, "load", lambda self, i, v=None: loads.append(i) or original(self, i, v))
    stream = PretrainStream(shards, StreamConfig(batch_size=5, num_buckets=2))
    list(itertools.islice(stream, stream.batches_in_epoch(0)))
    assert sorted(loads) == [0, 1, 2]  # each shard read once per epoch, carried rows kept in the buffer


def test_vocab_checks_name_the_shard(tmp_path):
    data = write_shards(tmp_path / "big", num_shards=1, manifest=False, vocab_size=60)
    with pytest.raises(BertPipelineError, match=r"part-00000\.npz: token id \d+ is outside .*vocab_size=40"):
        check_vocab(ShardSet(str(data)), 40)
    check_vocab(ShardSet(str(data)), 60)
    recorded = write_shards(tmp_path / "recorded", num_shards=1, vocab_size=40, manifest_vocab_size=30522)
    with pytest.raises(BertPipelineError, match=r"manifest\.json: shards were made with a vocabulary of 30522"):
        check_vocab(ShardSet(str(recorded)), 40)
    # A later shard with out-of-range ids fails when the stream reaches it, naming it.
    mixed = write_shards(tmp_path / "mixed", num_shards=2, manifest=False, vocab_size=40)
    write_shards(tmp_path / "tmp", num_shards=1, manifest=False, vocab_size=60)
    (tmp_path / "tmp" / "part-00000.npz").rename(mixed / "part-00001.npz")
    stream = PretrainStream(ShardSet(str(mixed)), StreamConfig(batch_size=4), vocab_size=40)
    with pytest.raises(BertPipelineError, match=r"part-00001\.npz: token id"):
        list(itertools.islice(stream, 20))


def test_not_a_shard(tmp_path):
    (tmp_path / "part-00000.npz").write_bytes(b"not a zip")
    with pytest.raises(BertPipelineError, match=r"part-00000\.npz: not a"):
        PretrainStream(ShardSet(str(tmp_path)), StreamConfig(batch_size=4)).batches_in_epoch(0)


def test_eval_batches_cover_everything_once(data):
    shards = ShardSet(str(data))
    single = [r for b in eval_batches(shards, 7) for r in _rows(b)]
    split = [r for rank in (0, 1) for b in eval_batches(shards, 7, rank, 2) for r in _rows(b)]
    assert len(single) == 72 and sorted(single) == sorted(split)
    assert len(list(eval_batches(shards, 7, max_batches=2))) == 2


def test_manifest_sha256_is_used(data):
    manifest = json.loads((data / "manifest.json").read_text())
    manifest["outputs"] = [{"path": "part-00000.npz", "sha256": "ab" * 32}]
    (data / "manifest.json").write_text(json.dumps(manifest))
    hashes = ShardSet(str(data)).sha256()
    assert hashes[str(data / "part-00000.npz")] == "ab" * 32
    assert len(hashes[str(data / "part-00001.npz")]) == 64
