"""Re-scoring a model directory on pinned dev data: fine-tuning's own scores, the files written, the data pinned."""

from __future__ import annotations

import hashlib
import json

from evaluation.rescore import dev_files_sha256, rescore
from tests import toy_tasks
from tests.tiny_bert import write_tiny_bert


def test_rescore_writes_predictions_and_pins_the_dev_file(tmp_path):
    model = write_tiny_bert(tmp_path / "tiny")
    data = toy_tasks.write_sst2(tmp_path / "sst2", n_train=8, n_dev=12)
    out = tmp_path / "scored"
    result = rescore(model, "SST-2", str(data), str(out), {"max_seq_length": 32})
    assert set(result) == {"metrics", "data_sha256"}
    assert 0 <= result["metrics"]["accuracy"] <= 1
    assert json.loads((out / "metrics.json").read_text()) == result["metrics"]
    assert result["data_sha256"] == {"dev.tsv": hashlib.sha256((data / "dev.tsv").read_bytes()).hexdigest()}

    # Another dev file is another pin: the nightly does not compare nights across it.
    (data / "dev.tsv").write_text((data / "dev.tsv").read_text() + "a new sentence\t1\n")
    assert dev_files_sha256("sst-2", str(data)) != result["data_sha256"]


def test_squad_pins_the_dev_file_of_the_models_version(tmp_path):
    """A SQuAD 2.0 model's pinned data has dev-v2.0.json: the nightly pinned as if every SQuAD model were 1.1,
    so re-scoring a 2.0 champion failed with 'no dev-v1.1 file for squad' before it was scored."""
    data = tmp_path / "squad"
    data.mkdir()
    for name in ("dev-v1.1.json", "dev-v2.0.json"):
        (data / name).write_text(json.dumps({"version": name[5:8], "data": []}), encoding="utf-8")
    digest = {n: hashlib.sha256((data / n).read_bytes()).hexdigest() for n in ("dev-v1.1.json", "dev-v2.0.json")}
    assert dev_files_sha256("squad", str(data)) == {"dev-v1.1.json": digest["dev-v1.1.json"]}
    assert dev_files_sha256("squad", str(data), version_2=True) == {"dev-v2.0.json": digest["dev-v2.0.json"]}
    (data / "dev-v1.1.json").unlink()
    assert dev_files_sha256("squad", str(data), version_2=True) == {"dev-v2.0.json": digest["dev-v2.0.json"]}


def test_ner_is_rescored_with_the_models_own_tags_on_dev_data_alone(tmp_path):
    """A NER model's tags come from its config's id2label: the nightly's pinned data need not hold the training file
    (re-scoring asked for train.txt to derive the tags again), and the head's order is the model's."""
    import torch

    from bert_core.model.modeling import BertForTokenClassification
    from tests.tiny_bert import VOCAB

    tags = {0: "O", 1: "I-PER", 2: "B-LOC", 3: "B-PER"}  # not the sorted order a training file would give
    model = BertForTokenClassification.from_pretrained(str(write_tiny_bert(tmp_path / "tiny")), num_labels=4,
                                                       id2label=tags)
    with torch.no_grad():  # every word piece answers B-PER
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 5.0]))
    model.save_pretrained(str(tmp_path / "ner-model"), vocab_file=str(VOCAB))
    data = toy_tasks.write_ner(tmp_path / "ner", n_train=2, n_dev=3)
    (data / "train.txt").unlink()

    result = rescore(tmp_path / "ner-model", "ner", str(data), str(tmp_path / "scored"), {"max_seq_length": 32})
    assert set(result["data_sha256"]) == {"dev.txt"}
    predicted = {line.split()[-1] for line in (tmp_path / "scored" / "dev_predictions.txt").read_text().splitlines()
                 if line.strip()}
    assert predicted == {"B-PER"}
    assert 0 < result["metrics"]["precision"] < 1
