"""Export: exported graphs equal the PyTorch model; predictions through ONNX Runtime equal PyTorch's."""

import json
import random

import numpy as np
import pytest
import torch

from bert_core.deploy.export import ExportConfig, ExportedModel, export
from bert_core.errors import BertPipelineError
from bert_core.finetune.tasks import features as feats
from bert_core.finetune.tasks.squad import make_features, postprocess, read_squad
from bert_core.model.modeling import BertForQuestionAnswering, BertForSequenceClassification
from bert_core.model.tokenization import BertTokenizer
from bert_pipeline.cli import main
from tests.paths import FIXTURES

pytestmark = pytest.mark.slow


def _inputs(vocab, batch=4, seq=32):
    ids = torch.randint(1000, vocab, (batch, seq))
    mask = torch.ones_like(ids)
    mask[1, seq // 2:] = 0
    mask[-1, 5:] = 0
    types = torch.zeros_like(ids)
    types[:, 10:] = 1
    return ids, types, mask


@pytest.mark.parametrize("task", ["classification", "regression", "question_answering"])
def test_onnx_export_equals_pytorch(task, minilm_dir, tmp_path):
    cls = BertForQuestionAnswering if task == "question_answering" else BertForSequenceClassification
    overrides = {} if task == "question_answering" else {"num_labels": 1 if task == "regression" else 3}
    model = cls.from_pretrained(str(minilm_dir), **overrides)
    model.save_pretrained(str(tmp_path / "model"))  # fixes the (new) head's weights for both sides
    out = tmp_path / "export"
    result = export(ExportConfig(task=task, output=str(out), model=str(tmp_path / "model"), seq_length=32,
                                 dynamic_batch=True))
    assert result["metrics"]["max_abs_diff"] < 1e-4
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "export.json", "manifest.json", "model.onnx",
                                                      "vocab.txt"]
    ids, types, mask = _inputs(model.config.vocab_size)
    got = ExportedModel(out).run(ids.numpy(), types.numpy(), mask.numpy())
    with torch.no_grad():
        ref = model.eval()(ids, types, mask)
    if task == "question_answering":
        valid = mask.bool().numpy()
        for mine, theirs in zip(got, (ref.start_logits, ref.end_logits)):
            assert np.abs(mine[valid] - theirs.numpy()[valid]).max() < 1e-4
    else:
        assert got[0].shape == tuple(ref.logits.shape)
        assert np.abs(got[0] - ref.logits.numpy()).max() < 1e-4
    meta = json.loads((out / "export.json").read_text())
    assert meta["batch_size"] == "dynamic" and meta["seq_length"] == 32
    assert meta["labels"] == (["0", "1", "2"] if task == "classification" else None)


def _trained_classifier(minilm_dir, tmp_path):
    """A MiniLM encoder with a classifier head trained (head only) on a toy sentiment task."""
    pos, neg = ["wonderful", "great", "lovely", "superb", "delightful"], ["awful", "terrible", "dreadful", "bad", "poor"]
    nouns = ["film", "meal", "concert", "hotel", "book", "game", "trip", "show"]
    rng = random.Random(0)

    def rows(n):
        out = []
        for _ in range(n):
            label = rng.randint(0, 1)
            out.append((f"the {rng.choice(nouns)} was {rng.choice(pos if label else neg)} .", str(label)))
        return out

    model = BertForSequenceClassification.from_pretrained(str(minilm_dir), num_labels=2)
    tok = BertTokenizer.from_model_dir(minilm_dir)
    train = rows(64)
    enc = feats.pad([e.ids for e in tok.encode_batch([t for t, _ in train])],
                    [e.segment_ids for e in tok.encode_batch([t for t, _ in train])], 16)
    labels = torch.tensor([int(y) for _, y in train])
    opt = torch.optim.Adam(model.classifier.parameters(), lr=5e-2)
    model.eval()  # no dropout: the head learns a fixed function of frozen features
    for _ in range(60):
        out = model(torch.from_numpy(enc["input_ids"]), torch.from_numpy(enc["token_type_ids"]),
                    torch.from_numpy(enc["attention_mask"]), labels=labels)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.save_pretrained(str(tmp_path / "clf"))
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows(40)))
    return tmp_path / "clf", dev


def test_predict_glue_with_fp32_and_int8(minilm_dir, tmp_path, capsys):
    model_dir, dev = _trained_classifier(minilm_dir, tmp_path)
    assert main(["export", "--task", "classification", "--model", str(model_dir), "--seq-length", "16",
                 "--batch-size", "8", "--quantize", "int8", "--eval-data", str(dev), "--eval-task", "SST-2",
                 "--output", str(tmp_path / "exp")]) == 0
    printed = capsys.readouterr().out
    assert main(["predict", "--export", str(tmp_path / "exp"), str(dev), "--task", "SST-2",
                 "--output", str(tmp_path / "fp32.tsv")]) == 0
    assert main(["predict", "--export", str(tmp_path / "exp"), str(dev), "--task", "SST-2", "--quantized",
                 "--output", str(tmp_path / "int8.tsv")]) == 0
    from bert_core.metrics.glue import evaluate_glue_files

    fp32 = evaluate_glue_files("sst-2", dev, tmp_path / "fp32.tsv")["accuracy"]
    int8 = evaluate_glue_files("sst-2", dev, tmp_path / "int8.tsv")["accuracy"]
    # PyTorch's own predictions equal the fp32 export's.
    model = BertForSequenceClassification.from_pretrained(str(model_dir))
    from bert_core.finetune.tasks.glue import read_examples

    arrays = feats.encode_examples(BertTokenizer.from_model_dir(model_dir), read_examples("sst-2", dev), 16)
    with torch.no_grad():
        logits = model(*(torch.from_numpy(arrays[k]) for k in ("input_ids", "token_type_ids", "attention_mask"))).logits
    torch_preds = [str(i) for i in logits.argmax(-1).tolist()]
    exported = [line.split("\t")[1] for line in (tmp_path / "fp32.tsv").read_text().splitlines()[1:]]
    assert exported == torch_preds
    assert fp32 >= 0.9, "the toy head should have learned the task"
    assert abs(fp32 - int8) <= 0.05  # stated tolerance for INT8 dynamic quantisation

    # The export itself reported both accuracies and their difference: in export.json, the manifest
    # and on stdout.
    evaluation = json.loads((tmp_path / "exp" / "export.json").read_text())["evaluation"]
    assert evaluation["task"] == "sst-2" and evaluation["examples"] == 40 and evaluation["main_metric"] == "accuracy"
    assert evaluation["fp32"]["accuracy"] == fp32 and evaluation["int8"]["accuracy"] == int8
    assert evaluation["int8_minus_fp32"]["accuracy"] == pytest.approx(int8 - fp32)
    recorded = json.loads((tmp_path / "exp" / "manifest.json").read_text())
    assert recorded["evaluation"] == evaluation
    assert recorded["metrics"]["int8_minus_fp32_accuracy"] == pytest.approx(int8 - fp32)
    assert recorded["inputs"] == [{"uri": str(dev), "sha256": recorded["inputs"][0]["sha256"]}]
    assert json.loads(printed[: printed.rindex("}") + 1])["evaluation"] == evaluation
    assert f"fp32 accuracy {fp32:.4f}, int8 accuracy {int8:.4f} (int8 - fp32: {int8 - fp32:+.4f})" in printed


def test_eval_data_mistakes_are_clear_errors(tmp_path):
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\nfine words .\t1\n")
    cases = [  # every case fails before any work
        (dict(task="classification", eval_data=str(dev)), "name its task with --eval-task"),
        (dict(task="classification", eval_data=str(dev), eval_task="STS-B"),
         "STS-B is a regression task, but this is a classification export"),
        (dict(task="classification", eval_data=str(tmp_path / "nope.tsv"), eval_task="SST-2"), "nope.tsv: no such file"),
        (dict(task="classification", eval_task="SST-2"), "--eval-task needs --eval-data"),
        (dict(task="question_answering", eval_data=str(dev), eval_task="MRPC"), "scored on SQuAD data"),
    ]
    for fields, message in cases:
        with pytest.raises(BertPipelineError, match=message):
            export(ExportConfig(output=str(tmp_path / "out"), random_weights=True, **fields))
        assert not (tmp_path / "out").exists()
    from bert_core.deploy.export import _check_labels

    _check_labels("sst-2", ["1", "0"])
    with pytest.raises(BertPipelineError, match=r"labels \['0', '1', '2'\] are not those of xnli"):
        _check_labels("xnli", ["0", "1", "2"])


def test_squad_predictions_from_export_equal_pytorch(minilm_dir, tmp_path):
    data = FIXTURES / "squad" / "data-v2.0.json"
    qa = BertForQuestionAnswering.from_pretrained(str(minilm_dir)).eval()
    qa.save_pretrained(str(tmp_path / "qa"))
    assert main(["export", "--task", "question_answering", "--model", str(tmp_path / "qa"), "--seq-length", "64",
                 "--dynamic-batch", "--eval-data", str(data), "--output", str(tmp_path / "exp")]) == 0
    assert main(["predict", "--export", str(tmp_path / "exp"), str(data), "--version-2", "--doc-stride", "24",
                 "--output", str(tmp_path / "pred")]) == 0
    tok = BertTokenizer.from_model_dir(tmp_path / "qa")
    _, examples = read_squad(data)
    features = make_features(examples, tok, 64, 24, 64)
    arrays = feats.pad_squad_features(features, 64)
    with torch.no_grad():
        out = qa(*(torch.from_numpy(arrays[k]) for k in ("input_ids", "token_type_ids", "attention_mask")))
    expected = postprocess(examples, features, out.start_logits.tolist(), out.end_logits.tolist(), version_2=True)
    assert json.loads((tmp_path / "pred" / "predictions.json").read_text()) == expected.predictions
    null_odds = json.loads((tmp_path / "pred" / "null_odds.json").read_text())
    assert null_odds.keys() == expected.null_odds.keys()
    assert max(abs(null_odds[k] - expected.null_odds[k]) for k in null_odds) < 1e-3
    # --eval-data: the export scored its own predictions (SQuAD 2.0 found in the file) officially.
    from bert_core.metrics.squad import evaluate_squad_file

    evaluation = json.loads((tmp_path / "exp" / "export.json").read_text())["evaluation"]
    official = evaluate_squad_file(data, tmp_path / "pred" / "predictions.json",
                                   na_prob_file=tmp_path / "pred" / "null_odds.json")
    assert evaluation["task"] == "squad" and evaluation["main_metric"] == "f1" and evaluation["int8"] is None
    assert evaluation["fp32"]["exact"] == official["exact"] and evaluation["fp32"]["f1"] == official["f1"]


def test_pt2_export_runs_with_torch_alone(minilm_dir, tmp_path):
    result = export(ExportConfig(task="regression", output=str(tmp_path / "exp"), model=str(minilm_dir),
                                 seq_length=16, batch_size=2, format="pt2"))
    assert result["metrics"]["max_abs_diff"] < 1e-4
    program = torch.export.load(str(tmp_path / "exp" / "model.pt2")).module()
    ids, types, mask = _inputs(30522, batch=2, seq=16)
    assert program(ids, types, mask).shape == (2, 1)


def test_refuses_random_weights_unless_asked(tmp_path, capsys):
    with pytest.raises(BertPipelineError, match="randomly initialised, untrained model.*--random-weights"):
        export(ExportConfig(task="classification", output=str(tmp_path / "x")))
    assert not (tmp_path / "x").exists()
    assert main(["export", "--task", "classification", "--random-weights", "--model-config", "bert_2_64_2",
                 "--seq-length", "8", "--output", str(tmp_path / "rand")]) == 0
    assert json.loads((tmp_path / "rand" / "export.json").read_text())["random_weights"] is True
    assert main(["predict", "--export", str(tmp_path / "rand"), "x.tsv", "--task", "sst-2",
                 "--output", str(tmp_path / "p.tsv")]) == 2  # no vocab.txt: a clear error
    assert "has no vocab.txt" in capsys.readouterr().err
