"""Export: exported graphs equal the PyTorch model; predictions through ONNX Runtime equal PyTorch's."""

import json
import random
import threading

import numpy as np
import pytest
import torch

from bert_core.deploy.export import ExportConfig, export
from bert_core.deploy.runtime import ExportedModel, _groups_balance, _physical_cores
from bert_core.errors import BertPipelineError
from bert_core.finetune.config import SquadOptions
from bert_core.finetune.tasks import features as feats
from bert_core.finetune.tasks.squad import make_features, postprocess
from bert_core.model.modeling import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bert_core.model.tokenization import BertTokenizer
from bert_core.tasks.squad import read_squad
from bert_pipeline.cli import main
from tests.paths import FIXTURES
from tests.tiny_bert import write_tiny_bert

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
    result = export(ExportConfig(task=task, output=str(out), model=str(tmp_path / "model"), max_seq_length=32,
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
    assert meta["batch_size"] == "dynamic" and meta["max_seq_length"] == 32
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
    model.bert.requires_grad_(False)  # frozen: no backward through the encoder
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
    assert main(["export", "--task", "classification", "--model", str(model_dir), "--max-seq-length", "16",
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
    from bert_core.tasks.glue import read_examples

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

    # An export.json written before the rename (`seq_length`, as registered models carry it) still runs.
    meta_file = tmp_path / "exp" / "export.json"
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**{k: v for k, v in meta.items() if k != "max_seq_length"}, "seq_length": 16}))
    assert ExportedModel(tmp_path / "exp").meta["max_seq_length"] == 16
    assert main(["predict", "--export", str(tmp_path / "exp"), str(dev), "--task", "SST-2",
                 "--output", str(tmp_path / "old.tsv")]) == 0
    assert (tmp_path / "old.tsv").read_text() == (tmp_path / "fp32.tsv").read_text()


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


def _pytorch_squad(qa, model_dir, data, squad: SquadOptions):
    """What eager PyTorch predicts for SQuAD file `data` at length 64 with `squad`'s settings."""
    tok = BertTokenizer.from_model_dir(model_dir)
    _, examples = read_squad(data)
    features = make_features(examples, tok, 64, squad.doc_stride, 64)
    arrays = feats.pad_squad_features(features, 64)
    with torch.no_grad():
        out = qa(*(torch.from_numpy(arrays[k]) for k in ("input_ids", "token_type_ids", "attention_mask")))
    return postprocess(examples, features, out.start_logits.numpy(), out.end_logits.numpy(), squad)


def test_squad_predictions_from_export_equal_pytorch(minilm_dir, tmp_path):
    data = FIXTURES / "squad" / "data-v2.0.json"
    qa = BertForQuestionAnswering.from_pretrained(str(minilm_dir)).eval()
    qa.save_pretrained(str(tmp_path / "qa"))
    assert main(["export", "--task", "question_answering", "--model", str(tmp_path / "qa"), "--max-seq-length", "64",
                 "--dynamic-batch", "--eval-data", str(data), "--output", str(tmp_path / "exp")]) == 0
    assert main(["predict", "--export", str(tmp_path / "exp"), str(data), "--version-2", "--doc-stride", "24",
                 "--output", str(tmp_path / "pred")]) == 0
    expected = _pytorch_squad(qa, tmp_path / "qa", data, SquadOptions(version_2=True, doc_stride=24))
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


def test_an_export_predicts_with_its_models_squad_settings(minilm_dir, tmp_path):
    """A fine-tuned SQuAD 2.0 model's settings (its task.json) travel in export.json: `predict --export` without
    flags answers "" and writes null odds as the model was scored (it predicted as 1.1 with the default stride),
    and the export's own evaluation uses them too; a flag given another value still wins."""
    from dataclasses import asdict

    from bert_core.finetune.task_card import TaskCard, write_card

    data = FIXTURES / "squad" / "data-v2.0.json"
    qa = BertForQuestionAnswering.from_pretrained(str(minilm_dir)).eval()
    qa.save_pretrained(str(tmp_path / "qa"))
    settings = SquadOptions(version_2=True, doc_stride=24, null_score_diff_threshold=-1.0)
    write_card(tmp_path / "qa", TaskCard("squad", "squad", 64, asdict(settings)))
    assert main(["export", "--task", "question_answering", "--model", str(tmp_path / "qa"), "--max-seq-length", "64",
                 "--eval-data", str(data), "--output", str(tmp_path / "exp")]) == 0
    meta = json.loads((tmp_path / "exp" / "export.json").read_text())
    assert meta["squad"] == asdict(settings)
    assert main(["predict", "--export", str(tmp_path / "exp"), str(data), "--output", str(tmp_path / "pred")]) == 0
    expected = _pytorch_squad(qa, tmp_path / "qa", data, settings)
    assert json.loads((tmp_path / "pred" / "predictions.json").read_text()) == expected.predictions
    assert (tmp_path / "pred" / "null_odds.json").is_file()
    from bert_core.metrics.squad import evaluate_squad_file

    official = evaluate_squad_file(data, tmp_path / "pred" / "predictions.json",
                                   na_prob_file=tmp_path / "pred" / "null_odds.json")
    assert meta["evaluation"]["fp32"]["exact"] == official["exact"]
    # A flag given wins over the export's record, also where it gives the default value (128, 0.0).
    assert main(["predict", "--export", str(tmp_path / "exp"), str(data), "--output", str(tmp_path / "pred2"),
                 "--doc-stride", "128", "--null-score-diff-threshold", "0"]) == 0
    expected = _pytorch_squad(qa, tmp_path / "qa", data, SquadOptions(version_2=True))
    assert json.loads((tmp_path / "pred2" / "predictions.json").read_text()) == expected.predictions


def test_pt2_export_runs_with_torch_alone(minilm_dir, tmp_path):
    result = export(ExportConfig(task="regression", output=str(tmp_path / "exp"), model=str(minilm_dir),
                                 max_seq_length=16, batch_size=2, format="pt2"))
    assert result["metrics"]["max_abs_diff"] < 1e-4
    program = torch.export.load(str(tmp_path / "exp" / "model.pt2")).module()
    ids, types, mask = _inputs(30522, batch=2, seq=16)
    assert program(ids, types, mask).shape == (2, 1)


def test_refuses_random_weights_unless_asked(tmp_path, capsys):
    with pytest.raises(BertPipelineError, match="randomly initialised, untrained model.*--random-weights"):
        export(ExportConfig(task="classification", output=str(tmp_path / "x")))
    assert not (tmp_path / "x").exists()
    assert main(["export", "--task", "classification", "--random-weights", "--model-config", "bert_2_64_2",
                 "--max-seq-length", "8", "--output", str(tmp_path / "rand")]) == 0
    assert json.loads((tmp_path / "rand" / "export.json").read_text())["random_weights"] is True
    assert main(["predict", "--export", str(tmp_path / "rand"), "x.tsv", "--task", "sst-2",
                 "--output", str(tmp_path / "p.tsv")]) == 2  # no vocab.txt: a clear error
    assert "has no vocab.txt" in capsys.readouterr().err


def _tiny_task_model(tmp_path, cls=BertForSequenceClassification, **overrides):
    """A tiny random BERT (2 layers, hidden 32) with a task head, saved so both sides use the same head."""
    model = cls.from_pretrained(str(write_tiny_bert(tmp_path / "tiny")), **overrides).eval()
    model.save_pretrained(str(tmp_path / "model"), vocab_file=str(tmp_path / "tiny" / "vocab.txt"))
    return model, tmp_path / "model"


def _ragged(vocab, batch, seq, seed=0):
    """[batch, seq] inputs with rows of different real lengths (padding at the end, as a tokenizer pads)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (batch, seq), generator=g)
    lengths = torch.randint(2, seq + 1, (batch,), generator=g)
    lengths[0] = seq
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    types = torch.zeros_like(ids)
    types[:, seq // 2:] = 1
    return ids * mask, types * mask, mask


def _op_types(path):
    import onnx

    return [node.op_type for node in onnx.load(str(path)).graph.node]


@pytest.mark.parametrize("optimize", [True, False])
def test_dynamic_batch_and_seq_export_runs_any_shape_and_equals_pytorch(optimize, tmp_path):
    model, model_dir = _tiny_task_model(tmp_path, num_labels=3)
    out = tmp_path / "export"
    result = export(ExportConfig(task="classification", output=str(out), model=str(model_dir), max_seq_length=64,
                                 dynamic_batch=True, dynamic_seq=True, optimize=optimize))
    assert result["metrics"]["max_abs_diff"] < 1e-5
    meta = json.loads((out / "export.json").read_text())
    assert meta["dynamic_seq"] is True and meta["batch_size"] == "dynamic" and meta["max_seq_length"] == 64
    assert meta["inputs"]["input_ids"]["shape"] == ["batch", "seq"]
    assert (meta["optimization"] is not None) == optimize
    import onnxruntime as ort

    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [d.shape for d in session.get_inputs()][0][1] == "seq"  # the graph's own axis is symbolic
    runner = ExportedModel(out)
    for batch, seq in ((1, 2), (1, 9), (5, 17), (32, 64)):
        ids, types, mask = _ragged(model.config.vocab_size, batch, seq, seed=seq)
        # The graph itself runs at this shape (run() does not pad a dynamic export).
        (direct,) = session.run(None, {"input_ids": ids.numpy(), "token_type_ids": types.numpy(),
                                       "attention_mask": mask.numpy()})
        (got,) = runner.run(ids.numpy(), types.numpy(), mask.numpy())
        with torch.no_grad():
            ref = model(ids, types, mask).logits.numpy()  # the model's own (packed) path
        assert got.shape == direct.shape == (batch, 3)
        assert np.abs(got - ref).max() < 1e-5 and np.abs(direct - ref).max() < 1e-5, (batch, seq)
    with pytest.raises(BertPipelineError, match="sequence length 65 is over this export's max_seq_length 64"):
        runner.run(*(np.ones((1, 65), dtype=np.int64) for _ in range(3)))
    # A padded batch runs in groups of rows of similar length, each cut to its longest row: the graph
    # computes about the real tokens only, and the outputs are those of the batch run as given.
    lengths = torch.tensor([64, 5, 5, 40, 6, 41])
    ids, types, _ = _ragged(model.config.vocab_size, 6, 64)
    mask = (torch.arange(64)[None, :] < lengths[:, None]).long()
    shapes = []
    forward = runner._forward
    runner._forward = lambda parts, quantized, single_thread=False: (
        shapes.append(parts[0].shape) or forward(parts, quantized, single_thread))
    (grouped,) = runner.run(ids.numpy(), types.numpy(), mask.numpy())
    assert sum(rows for rows, _ in shapes) == 6 and len(shapes) > 1
    assert sum(rows * width for rows, width in shapes) <= 1.25 * int(lengths.sum())  # not 6 x 64
    (as_given,) = runner.run(ids.numpy(), types.numpy(), mask.numpy(), group_by_length=False)
    assert shapes[-1] == (6, 64) and np.abs(grouped - as_given).max() < 1e-5
    # Idle threads that sleep instead of spin-waiting: the same answers, the setting reaches the session.
    quiet = ExportedModel(out, threads=2, spin=False)
    (slept,) = quiet.run(ids.numpy(), types.numpy(), mask.numpy())
    assert np.abs(slept - grouped).max() < 1e-5
    options = quiet._session(False).get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.intra_op_num_threads == 2
    assert runner._session(False).get_session_options().intra_op_num_threads == runner.workers == _physical_cores()
    # Groups that balance run concurrently, one per thread, on a single-threaded session: the same answers.
    lengths = torch.tensor([64, 62, 60, 58, 5, 5, 6, 6, 30, 31, 30, 32, 30, 31, 30, 32])
    ids, types, _ = _ragged(model.config.vocab_size, len(lengths), 64, seed=1)
    mask = (torch.arange(64)[None, :] < lengths[:, None]).long()
    calls = []
    forward = quiet._forward
    quiet._forward = lambda parts, q, single_thread=False: (
        calls.append((threading.current_thread().name, single_thread)) or forward(parts, q, single_thread))
    (concurrent,) = quiet.run(ids.numpy(), types.numpy(), mask.numpy())
    assert len(calls) == 4 and all(name.startswith("export-group") and single for name, single in calls)
    assert quiet._session(False, single_thread=True).get_session_options().intra_op_num_threads == 1
    (sequential,) = runner.run(ids.numpy(), types.numpy(), mask.numpy(), group_by_length=False)
    assert np.abs(concurrent - sequential).max() < 1e-5
    # One thread, or groups that would leave a thread idle most of the time: one after another, all threads.
    calls.clear()
    quiet.run(*(a[:6].numpy() for a in (ids, types, mask)))  # groups of 4 x ~62 and 2 x ~6 tokens
    assert len(calls) == 2 and not any(single for _, single in calls)


def test_default_threads_are_the_physical_cores_the_process_may_run_on(monkeypatch):
    import os

    import psutil

    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 8 if logical else 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # `taskset -c 0,1`
    assert _physical_cores() == 2
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert _physical_cores() == 4  # hyperthreads are not cores
    with pytest.raises(BertPipelineError, match="threads: expected a number of threads >= 1"):
        ExportedModel("any-dir", threads=0)


def test_length_groups_run_concurrently_only_when_they_keep_every_thread_busy():
    assert _groups_balance([100, 100], workers=2) and _groups_balance([60, 50, 40, 30, 20], workers=2)
    assert not _groups_balance([300, 20], workers=2)  # one thread would do almost everything
    assert not _groups_balance([100, 100], workers=1) and not _groups_balance([100], workers=2)
    assert not _groups_balance([100, 100, 100, 100], workers=16)  # 12 of 16 cores idle: all threads per group
    assert _groups_balance([100] * 16, workers=16)


def test_optimized_graph_is_fused_and_equals_pytorch_for_any_mask(tmp_path):
    model, model_dir = _tiny_task_model(tmp_path, cls=BertForQuestionAnswering)
    layers = model.config.num_hidden_layers
    out = tmp_path / "export"
    result = export(ExportConfig(task="question_answering", output=str(out), model=str(model_dir), max_seq_length=32,
                                 dynamic_batch=True, dynamic_seq=True, quantize="int8"))
    ops = _op_types(out / "model.onnx")
    # One fused kernel per layer for attention and GELU, two SkipLayerNormalization per layer; none of
    # the unfused pieces left.
    assert ops.count("Attention") == layers and ops.count("BiasGelu") == layers
    assert ops.count("SkipLayerNormalization") == 2 * layers
    assert "Softmax" not in ops and "Erf" not in ops and "Gelu" not in ops
    meta = json.loads((out / "export.json").read_text())
    fused = meta["optimization"]["fused_operators"]
    assert fused["Attention"] == layers and fused["SkipLayerNormalization"] == 2 * layers
    assert fused["BiasGelu"] == layers
    # INT8 quantises the fused graph: quantised attention and integer matmuls; parity recorded for both.
    int8_ops = _op_types(out / "model.int8.onnx")
    assert int8_ops.count("QAttention") == layers and "MatMulInteger" in int8_ops
    assert result["metrics"]["max_abs_diff"] < 1e-5 and result["metrics"]["int8_max_abs_diff"] > 0
    assert result["metrics"]["int8_max_abs_diff"] < 0.1
    # The raw 2D mask is kept: a mask with holes (not only end padding) gives the model's outputs too.
    ids, types, mask = _ragged(model.config.vocab_size, 4, 20)
    mask[2, 5:8] = 0
    start, end = ExportedModel(out).run(ids.numpy(), types.numpy(), mask.numpy())
    with torch.no_grad():
        ref = model(ids, types, mask)
    assert start.shape == end.shape == (4, 20)
    valid = mask.bool().numpy()  # (the model's packed path leaves padded positions' outputs at the bias)
    assert np.abs(start - ref.start_logits.numpy())[valid].max() < 1e-5
    assert np.abs(end - ref.end_logits.numpy())[valid].max() < 1e-5
    # --no-optimize: the model's own static graph, nothing fused.
    export(ExportConfig(task="question_answering", output=str(tmp_path / "plain"), model=str(model_dir),
                        max_seq_length=32, dynamic_batch=True, optimize=False))
    plain = _op_types(tmp_path / "plain" / "model.onnx")
    assert not {"Attention", "SkipLayerNormalization", "BiasGelu"} & set(plain)
    assert json.loads((tmp_path / "plain" / "export.json").read_text())["optimization"] is None


def test_token_classification_export(tmp_path):
    model, model_dir = _tiny_task_model(tmp_path, cls=BertForTokenClassification, num_labels=5)
    assert main(["export", "--task", "token_classification", "--model", str(model_dir), "--max-seq-length", "24",
                 "--dynamic-batch", "--dynamic-seq", "--output", str(tmp_path / "ner")]) == 0
    meta = json.loads((tmp_path / "ner" / "export.json").read_text())
    assert meta["task"] == "token_classification" and meta["outputs"] == ["logits"]
    assert meta["output_shapes"] == {"logits": ["batch", "seq", 5]} and meta["labels"] == ["0", "1", "2", "3", "4"]
    assert meta["optimization"]["fused_operators"]["Attention"] == model.config.num_hidden_layers
    # A static export too: run() pads a shorter batch to its length and cuts the logits back.
    assert main(["export", "--task", "token_classification", "--model", str(model_dir), "--max-seq-length", "24",
                 "--batch-size", "2", "--output", str(tmp_path / "ner-static")]) == 0
    ids, types, mask = _ragged(model.config.vocab_size, 3, 11)
    with torch.no_grad():
        ref = model(ids, types, mask).logits.numpy()
    valid = mask.bool().numpy()
    for export_dir in ("ner", "ner-static"):
        (got,) = ExportedModel(tmp_path / export_dir).run(ids.numpy(), types.numpy(), mask.numpy())
        assert got.shape == (3, 11, 5), export_dir
        assert np.abs(got[valid] - ref[valid]).max() < 1e-5, export_dir
    with pytest.raises(BertPipelineError, match="token-classification export is checked against PyTorch only"):
        export(ExportConfig(task="token_classification", output=str(tmp_path / "x"), model=str(model_dir),
                            eval_data=str(tmp_path / "dev.tsv"), eval_task="SST-2"))


def test_static_export_runs_shorter_sequences(tmp_path):
    """A static-shape export keeps working for callers that pad each batch to its own longest row."""
    model, model_dir = _tiny_task_model(tmp_path, num_labels=2)
    export(ExportConfig(task="classification", output=str(tmp_path / "exp"), model=str(model_dir), max_seq_length=16,
                        batch_size=4))
    meta = json.loads((tmp_path / "exp" / "export.json").read_text())
    assert meta["dynamic_seq"] is False and meta["inputs"]["input_ids"]["shape"] == ["batch", 16]
    runner = ExportedModel(tmp_path / "exp")
    for batch, seq in ((1, 5), (6, 16), (9, 12)):
        ids, types, mask = _ragged(model.config.vocab_size, batch, seq, seed=batch)
        (got,) = runner.run(ids.numpy(), types.numpy(), mask.numpy())
        with torch.no_grad():
            ref = model(ids, types, mask).logits.numpy()
        assert got.shape == (batch, 2) and np.abs(got - ref).max() < 1e-5, (batch, seq)


def test_servable_int8_evaluation_names_what_is_missing(tmp_path):
    from bert_core.deploy.int8_gate import servable_int8_evaluation

    with pytest.raises(BertPipelineError, match="not an export directory"):
        servable_int8_evaluation(tmp_path)
    (tmp_path / "export.json").write_text("[1, 2")
    with pytest.raises(BertPipelineError, match="export.json: not an export's export.json"):
        servable_int8_evaluation(tmp_path)
    fp32_only = {"task": "sst-2", "main_metric": "accuracy", "data": "dev.tsv", "fp32": {"accuracy": 0.9}}
    (tmp_path / "export.json").write_text(json.dumps({"evaluation": fp32_only}))
    with pytest.raises(BertPipelineError, match="no INT8 evaluation"):
        servable_int8_evaluation(tmp_path)
    # 0.9 -> 0.895 is half a point on accuracy (allowed); 0.88 is two (refused). SQuAD's F1 is in points already.
    for int8, ok in ((0.895, True), (0.88, False)):
        (tmp_path / "export.json").write_text(json.dumps({"evaluation": {**fp32_only, "int8": {"accuracy": int8}}}))
        if ok:
            assert servable_int8_evaluation(tmp_path)["int8"] == {"accuracy": int8}
        else:
            with pytest.raises(BertPipelineError, match=r"2\.00 points under the fp32 graph's 0\.9000"):
                servable_int8_evaluation(tmp_path)
    squad = {"task": "squad", "main_metric": "f1", "data": "dev.json", "fp32": {"f1": 80.0}, "int8": {"f1": 79.5}}
    (tmp_path / "export.json").write_text(json.dumps({"evaluation": squad}))
    assert servable_int8_evaluation(tmp_path)["int8"]["f1"] == 79.5
