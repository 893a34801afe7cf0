"""validate-shards passes clean shards and names the expectation and shard of each kind of corruption."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bert_core.data import shard_format as shards
from bert_core.data.instances import ShardConfig
from bert_core.data.make_shards import make_shards
from bert_core.data.validate_shards import validate_shards
from bert_core.io import manifest
from bert_pipeline.cli import main
from tests.corpus_text import documents, write_segmented
from tests.paths import FIXTURES

VOCAB = str(FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt")
MASK_ID = 103


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    write_segmented(root / "in.txt", documents(300, seed=12, min_sentences=3, max_sentences=15))
    config = ShardConfig(dupe_factor=2, max_seq_length=64, max_predictions_per_seq=10, instances_per_shard=400,
                         shuffle_buffer=400, chunk_documents=100)
    make_shards([str(root / "in.txt")], str(root / "out"), VOCAB, config)
    return root / "out"


def tampered(clean: Path, tmp_path: Path, change: Callable[[dict[str, np.ndarray]], None],
             shard: str = "part-00001.npz", update_manifest: bool = True) -> Path:
    """A copy of the shards with one shard changed (and, by default, its manifest entry updated to
    match, as a buggy producer would have written it)."""
    out = tmp_path / "shards"
    shutil.copytree(clean, out)
    arrays = shards.read_shard(out / shard)
    change(arrays)
    np.savez(out / shard, **arrays)
    if update_manifest:
        data = manifest.read(out)
        digest = manifest.sha256_file(out / shard)
        for entry in data["shards"] + data["outputs"]:
            if entry["path"] == shard:
                entry["sha256"] = digest
        manifest.write(data, out)
    return out


def failed_checks(result: dict) -> dict[str, list[str]]:
    return {f["check"]: [x["shard"] for x in f["failures"]] for f in result["failed"]}


def test_clean_shards_pass_and_validation_json_is_written(clean):
    result = validate_shards(str(clean))
    assert result["success"], result["failed"]
    assert result["shards"] == len(shards.list_shards(clean)) >= 3
    stats = result["statistics"]
    assert abs(stats["shown_mask_fraction"] - 0.8) < 0.03 and abs(stats["masked_fraction"] - 0.15) < 0.01
    written = json.loads((clean / "validation.json").read_text())
    assert written["success"] and written["step"] == "validate-shards"
    expectation_types = {c["expectation"] for c in written["checks"]}
    assert {"expect_column_values_to_be_in_set", "expect_column_values_to_be_between",
            "expect_column_pair_values_to_be_equal"} <= expectation_types
    assert manifest.verify_outputs(clean) == []  # validation.json does not disturb the shards' manifest


def first_row_where(arrays, condition) -> int:
    return int(np.flatnonzero(condition(arrays))[0])


CORRUPTIONS = {
    "wrong [CLS]": (lambda a: a["input_ids"].__setitem__((3, 0), 2000), "[CLS] at position 0", 3),
    "mask outside valid length": (
        lambda a: a["masked_lm_positions"].__setitem__(
            (r := first_row_where(a, lambda x: x["valid_lengths"] < 60), 0), a["valid_lengths"][r] + 2),
        "masked positions inside the valid length, never position 0", None),
    "duplicate positions": (lambda a: a["masked_lm_positions"].__setitem__((5, 1), a["masked_lm_positions"][5, 0]),
                            "masked positions sorted and unique", 5),
    "segment ids": (lambda a: a["segment_ids"].__setitem__((7, 1), 1),
                    "segment ids 0 through the first [SEP], 1 after, 0 in padding", 7),
    "id outside vocab": (lambda a: a["input_ids"].__setitem__((9, 2), 40000), "ids inside the vocabulary", 9),
    "extra [SEP]": (lambda a: a["input_ids"].__setitem__(
        (11, int(np.setdiff1d(np.arange(2, 6), a["masked_lm_positions"][11])[0])), 102), "exactly two [SEP]", 11),
    "[MASK] not predicted": (lambda a: a["input_ids"].__setitem__(
        (13, int(np.setdiff1d(np.arange(1, 4), a["masked_lm_positions"][13])[0])), MASK_ID),
        "[MASK] only at predicted positions", 13),
    "wrong dtype": (lambda a: a.__setitem__("segment_ids", a["segment_ids"].astype(np.int64)),
                    "dtypes of the schema", None),
    "missing key": (lambda a: a.pop("next_sentence_labels"), "every key of the schema present", None),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_each_corruption_is_named_with_its_shard(clean, tmp_path, name):
    change, check, row = CORRUPTIONS[name]
    result = validate_shards(str(tampered(clean, tmp_path, change)))
    assert not result["success"]
    failed = failed_checks(result)
    assert failed.get(check) == ["part-00001.npz"], result["failed"]
    if row is not None:
        failure = next(f for f in result["failed"] if f["check"] == check)["failures"][0]
        assert row in failure["examples"]
    message = next(f for f in result["failed"] if f["check"] == check)["message"]
    assert "part-00001.npz" in message and check in message


def test_hash_mismatch_and_missing_shard(clean, tmp_path):
    out = tampered(clean, tmp_path, lambda a: a["input_ids"].__setitem__((0, 5), 2001), update_manifest=False)
    (out / "part-00002.npz").unlink()
    failed = failed_checks(validate_shards(str(out)))
    assert failed["shard sha256 as recorded in manifest.json"] == ["part-00001.npz", "part-00002.npz"]
    assert failed["every shard listed in manifest.json is present"] == ["part-00002.npz"]


def test_statistics_catch_a_wrong_mask_split(clean, tmp_path):
    def unmask(arrays):
        rows, cols = np.nonzero(arrays["masked_lm_weights"])
        positions = arrays["masked_lm_positions"][rows, cols]
        arrays["input_ids"][rows, positions] = arrays["masked_lm_ids"][rows, cols]

    failed = failed_checks(validate_shards(str(tampered(clean, tmp_path, unmask))))
    assert failed["80% of predictions shown as [MASK]"] == ["part-00001.npz", "(all shards)"]
    assert failed["10% of predictions shown unchanged"] == ["part-00001.npz", "(all shards)"]


def test_cli_exit_codes(clean, tmp_path, capsys):
    assert main(["validate-shards", str(clean), "--output", str(tmp_path / "v.json")]) == 0
    assert json.loads((tmp_path / "v.json").read_text())["success"]
    bad = tampered(clean, tmp_path, CORRUPTIONS["wrong [CLS]"][0])
    assert main(["validate-shards", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "expect_column_values_to_be_in_set on cls_ok [[CLS] at position 0] failed in part-00001.npz" in err
    assert main(["validate-shards", str(tmp_path / "nowhere")]) == 2


def test_no_shard_passes_only_when_the_manifest_records_an_empty_side(tmp_path):
    """A make-shards output without shards is valid only when its manifest says that none of the inputs'
    documents was on its side of the held-out split (make_shards' empty_side_ok); a manifest that lists no
    shard without saying so, or that lists shards that are gone, still fails."""
    from bert_core.data.instances import is_heldout

    held = [d for d in documents(100, seed=5, min_sentences=3) if is_heldout(d, 0.1)][:1]
    assert held
    write_segmented(tmp_path / "one.txt", held)
    config = ShardConfig(max_seq_length=64, max_predictions_per_seq=10, holdout_fraction=0.1, split="train")
    make_shards([str(tmp_path / "one.txt")], str(tmp_path / "out"), VOCAB, config, empty_side_ok=True)
    result = validate_shards(str(tmp_path / "out"))
    assert result["success"] and result["shards"] == 0 and result["failed"] == []
    assert json.loads((tmp_path / "out" / "validation.json").read_text())["success"]
    recorded = json.loads((tmp_path / "out" / "manifest.json").read_text())
    del recorded["empty_side"]
    (tmp_path / "out" / "manifest.json").write_text(json.dumps(recorded))
    result = validate_shards(str(tmp_path / "out"))
    assert not result["success"] and [f["expectation"] for f in result["failed"]] == ["shards present"]
