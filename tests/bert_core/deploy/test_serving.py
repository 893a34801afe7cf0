"""Text in, answers out: the task predictor of every task kind against what its evaluation scored, the
MLflow pyfunc built on it, and bad requests."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from bert_core.deploy.serving import MAX_CHARS, InvalidRequest, TaskPredictor
from bert_core.finetune import task_card
from bert_core.finetune.step import FinetuneConfig, finetune
from bert_core.finetune.tasks import outputs
from bert_core.finetune.tasks.outputs import same_answer
from tests import toy_tasks
from tests.tiny_bert import write_tiny_bert

TINY = dict(epochs=1, lr=1e-3, batch_size=16, tracking=False, doc_stride=16, eval_batch_size=5)
LENGTH = {"squad": 64}  # max_seq_length per task; others: 32
# SST-2's model learns (dev accuracy 1.0 from its 13th epoch of 4 updates): promotion refuses a model at chance.
LEARNS = {"sst-2": dict(epochs=16, batch_size=8)}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """One tiny fine-tuned model per task kind (plumbing, not learning, but for SST-2's: seconds each)."""
    root = tmp_path_factory.mktemp("serving")
    tiny = write_tiny_bert(root / "tiny")
    data = {"sst-2": toy_tasks.write_sst2(root / "sst2", n_train=32, n_dev=12),
            "sts-b": toy_tasks.write_stsb(root / "stsb", n_train=32, n_dev=12),
            "squad": toy_tasks.write_squad(root / "squad2", n_train=12, n_dev=6, version_2=True),
            "ner": toy_tasks.write_ner(root / "ner-data", n_train=24, n_dev=10)}
    out = {"pretrained": tiny}
    for task, data_dir in data.items():
        finetune(FinetuneConfig(task=task, data_dir=str(data_dir), model=str(tiny), output=str(root / f"out-{task}"),
                                version_2=task == "squad", max_seq_length=LENGTH.get(task, 32),
                                **{**TINY, **LEARNS.get(task, {})}))
        out[task] = root / f"out-{task}"
    return out


@pytest.mark.parametrize("task", ["sst-2", "sts-b", "squad", "ner"])
def test_fresh_predictions_equal_what_evaluation_scored(models, task):
    """The card and check examples travel in model/; answering the checks' raw text from scratch (tokenize,
    window, batch by length, decode) gives the answers evaluation scored, at every batch size."""
    model_dir = models[task] / "model"
    card = task_card.read_card(model_dir)
    assert card.task == task and card.max_seq_length == LENGTH.get(task, 32)
    assert card.squad["doc_stride"] == TINY["doc_stride"]
    checks = task_card.read_checks(model_dir)
    assert len(checks) == 8  # CHECK_EXAMPLES
    for batch_size in (1, 3, 32):
        predictor = TaskPredictor.from_model_dir(models[task], batch_size=batch_size)
        answers = predictor([c["input"] for c in checks])
        assert [same_answer(c["expected"], a) for c, a in zip(checks, answers)] == [None] * len(checks)


def test_squad_answers_agree_in_finetuning_export_and_serving(models, tmp_path):
    """One SQuAD post-processing behind its three callers: fine-tuning's dev predictions, export's batch predict
    (a length-grouped ONNX graph, which leaves padding logits 0) and the served model (eager, each batch padded
    to its longest row) answer the dev questions alike, with the model's own SquadOptions."""
    from bert_core.deploy.batch_predict import predict_file
    from bert_core.deploy.export import ExportConfig, export
    from bert_core.deploy.runtime import ExportedModel
    from bert_core.tasks.squad import read_squad

    model_dir = models["squad"] / "model"
    dev = models["squad"].parent / "squad2" / "dev-v2.0.json"
    scored = json.loads((models["squad"] / "predictions.json").read_text())
    card = task_card.read_card(model_dir)
    export(ExportConfig(task="question_answering", model=str(model_dir), output=str(tmp_path / "exp"),
                        max_seq_length=card.max_seq_length, dynamic_batch=True, dynamic_seq=True))
    predict_file(ExportedModel(tmp_path / "exp"), dev, tmp_path / "pred", squad=card.squad_options())
    _, examples = read_squad(dev)
    served = TaskPredictor.from_model_dir(models["squad"], batch_size=4)(
        [{"question": e.question, "context": e.context} for e in examples])
    assert len(scored) == len(examples) == 18  # 6 contexts, 3 questions each
    assert json.loads((tmp_path / "pred" / "predictions.json").read_text()) == scored
    assert {e.qas_id: a["answer"] for e, a in zip(examples, served)} == scored


def test_an_export_predicts_and_evaluates_at_its_models_length(models, tmp_path):
    """An export's graph may accept longer inputs than its model was fine-tuned at; `predict --export` and the
    export's --eval-data evaluation cut at the model's own length (its task.json), as serving does, so the
    metrics registered with an export are the served model's (a model of length 64 was evaluated at 128)."""
    from bert_core.deploy.batch_predict import predict_file
    from bert_core.deploy.export import ExportConfig, export
    from bert_core.deploy.runtime import ExportedModel

    model_dir = models["sst-2"] / "model"
    assert task_card.read_card(model_dir).max_seq_length == 32
    # Longer than 32 tokens, the sentiment word past the 32nd: cut at 32 it is not seen.
    rows = [(f"the film was {' '.join(['long'] * 40)} and {word} .", label)
            for word, label in (("lovely", 1), ("dull", 0), ("superb", 1), ("awful", 0))]
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    export(ExportConfig(task="classification", model=str(model_dir), output=str(tmp_path / "exp"),
                        max_seq_length=64, dynamic_batch=True, dynamic_seq=True))
    exported = ExportedModel(tmp_path / "exp")
    assert exported.meta["max_seq_length"] == 64 and exported.meta["model_max_seq_length"] == 32
    widths = []
    run = exported.run
    exported.run = lambda ids, *rest, **kw: widths.append(ids.shape[1]) or run(ids, *rest, **kw)
    predict_file(exported, tmp_path / "dev.tsv", tmp_path / "pred.tsv", task="SST-2")
    assert widths and max(widths) == 32
    predicted = [line.split("\t")[1] for line in (tmp_path / "pred.tsv").read_text().splitlines()[1:]]
    served = TaskPredictor.from_model_dir(models["sst-2"])([{"text": s} for s, _ in rows])
    assert predicted == [a["label"] for a in served]


def test_answers_per_kind(models):
    sst2 = TaskPredictor.from_model_dir(models["sst-2"])
    (answer,) = sst2(["the concert was wonderful ."])
    assert answer["label"] in ("0", "1") and sum(answer["probabilities"].values()) == pytest.approx(1.0)
    assert answer["label"] == max(answer["probabilities"], key=answer["probabilities"].get)

    (score,) = TaskPredictor.from_model_dir(models["sts-b"])([{"text": "a cat sat .", "text_pair": "a cat sat ."}])
    assert set(score) == {"score"} and np.isfinite(score["score"])

    context = "Hana lives in Quito and works as a tailor near the old harbour. "
    squad = TaskPredictor.from_model_dir(models["squad"])
    requests = [{"question": "Where does Hana live?", "context": context},
                {"question": "What is the job of Hana?", "context": context * 20}]  # many doc-stride windows
    for request, a in zip(requests, squad(requests)):
        assert set(a) == {"answer", "start", "end", "score"} and 0 <= a["score"] <= 1
        if a["answer"] == "":  # SQuAD 2.0's no-answer
            assert a["start"] == a["end"] == -1
        else:
            assert request["context"][a["start"]:a["end"]] == a["answer"]

    text = "Kemal  visited\tRiga with Ana Novak ."
    (ner,) = TaskPredictor.from_model_dir(models["ner"])([{"text": text}])
    for entity in ner["entities"]:
        assert text[entity["start"]:entity["end"]] == entity["text"] and entity["type"] in ("PER", "LOC")

    embedder = TaskPredictor.from_model_dir(models["pretrained"])
    embedding = embedder(["one sentence", "and another one"])
    assert [len(e["embedding"]) for e in embedding] == [32, 32]
    embedder.batch_size = 1  # as operators.registry.served_predictor sets it on a loaded pyfunc's predictor
    assert embedder.embedder.batch_size == 1
    one_by_one = embedder(["one sentence", "and another one"])
    assert np.allclose([e["embedding"] for e in one_by_one], [e["embedding"] for e in embedding], atol=1e-5)


def test_entities_from_iob2_tags():
    text = "Ana Silva visited Oslo ."
    spans = outputs.word_spans(text)
    tags = ["B-PER", "I-PER", "O", "I-LOC", "O"]  # an I- that starts an entity counts, as conlleval reads it
    assert outputs.entities(text, spans, tags)["entities"] == [
        {"type": "PER", "text": "Ana Silva", "start": 0, "end": 9},
        {"type": "LOC", "text": "Oslo", "start": 18, "end": 22}]


def test_long_input_is_truncated_for_classification(models):
    predictor = TaskPredictor.from_model_dir(models["sst-2"])
    long = " ".join(["wonderful"] * 10_000)
    (answer,) = predictor([{"text": long}])
    (short,) = predictor([{"text": " ".join(["wonderful"] * 40)}])  # the same first max_seq_length tokens
    assert answer == short


@pytest.mark.parametrize("request_, message", [
    ([{"txt": "x"}], "row 0: field 'text' is missing (fields: txt)"),
    ([{"text": "fine"}, {"text": "   "}], "row 1: field 'text' is empty"),
    ([{"text": 3}], "row 0: field 'text' must be a string, got int"),
    ([{"text": "x" * (MAX_CHARS + 1)}], f"has {MAX_CHARS + 1:,} characters"),
    ([{"text": "one"}, {"text": "one", "text_pair": "two"}],
     "row 1: field 'text_pair': this sst-2 model reads one text per example: remove it"),
    ([7], "row 0: expected an object with named fields or a string, got int"),
])
def test_bad_requests_name_the_row_and_field(models, request_, message):
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace(")", r"\)")):
        TaskPredictor.from_model_dir(models["sst-2"])(request_)


@pytest.mark.parametrize("text, where", [
    ('{"text": "fine"}\n\n{"txt": "x"}\n', "requests.jsonl:3: field 'text' is missing (fields: txt)"),
    ('[{"text": "fine"}, {"text": ""}]', "requests.jsonl: item 2: field 'text' is empty"),
])
def test_predict_names_the_line_of_a_bad_request(models, tmp_path, capsys, text, where):
    from bert_pipeline.cli import main

    (tmp_path / "requests.jsonl").write_text(text)
    assert main(["predict", "--model", str(models["sst-2"]), str(tmp_path / "requests.jsonl"),
                 "--output", str(tmp_path / "answers.jsonl")]) != 0
    # Not "row 1" (the model's 0-based row, blank lines skipped) for the file's third line.
    assert where in capsys.readouterr().err


def test_squad_needs_both_fields(models):
    with pytest.raises(InvalidRequest, match="row 0: field 'context' is missing"):
        TaskPredictor.from_model_dir(models["squad"])([{"question": "Where?"}])


@pytest.mark.parametrize("kind, request_, field", [
    ("squad", {"question": "Where?", "context": "\u200b"}, "context"),  # was an unexpected error: no window
    ("squad", {"question": "\x00\x01", "context": "Hana lives in Quito."}, "question"),
    ("sst-2", {"text": "\u200b\u200b"}, "text"),
    ("ner", {"text": "\ufeff"}, "text"),
    ("pretrained", {"text": "\u200b"}, "text"),
])
def test_a_field_the_tokenizer_reads_nothing_from_is_refused_like_an_empty_one(models, kind, request_, field):
    ok = {"squad": {"question": "Where?", "context": "Hana lives in Quito."}}.get(kind, {"text": "fine"})
    with pytest.raises(InvalidRequest, match=f"row 1: field '{field}' has no text the model can read"):
        TaskPredictor.from_model_dir(models[kind])([ok, request_])
    # Punctuation alone is text the model reads.
    (answer,) = TaskPredictor.from_model_dir(models[kind])([{k: "?" for k in request_}])
    assert answer


def test_mlflow_pyfunc_signature_example_and_errors(models, tmp_path, monkeypatch):
    """The logged model is the task pyfunc: signature with the task's fields, an input example, raw text in;
    a bad request is MLflow's INVALID_PARAMETER_VALUE (HTTP 400 behind the server) with our message."""
    import mlflow
    import pandas as pd
    from mlflow.exceptions import MlflowException

    from bert_core.deploy.mlflow_model import check_served, pyfunc_spec
    from bert_core.io.tracking import MlflowTracker

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker = MlflowTracker("bert-finetune/squad", pyfunc=pyfunc_spec)
    tracker.log_model_dir(models["squad"] / "model")
    tracker.end()
    model = mlflow.pyfunc.load_model(f"runs:/{tracker.run_id}/model", dst_path=str(tmp_path / "downloaded"))
    inputs = model.metadata.get_input_schema()
    assert inputs.input_names() == ["question", "context"]
    assert set(model.metadata.get_output_schema().input_names()) == {"answer", "start", "end", "score"}
    info = mlflow.models.get_model_info(f"runs:/{tracker.run_id}/model")
    assert info.saved_input_example_info is not None

    checks = task_card.read_checks(models["squad"] / "model")
    frame = pd.DataFrame([c["input"] for c in checks])  # what the scoring server hands the pyfunc
    for check, answer in zip(checks, model.predict(frame)):
        assert same_answer(check["expected"], answer) is None
    assert check_served(model) == (len(checks), [])
    with pytest.raises(MlflowException) as error:
        model.predict(pd.DataFrame([{"question": "Where?", "context": " "}]))
    assert error.value.error_code == "INVALID_PARAMETER_VALUE" and "field 'context' is empty" in error.value.message

    # A tampered check (an answer evaluation never gave) is reported, naming the field that differs.
    model_dir = Path(model.unwrap_python_model().model_dir)
    tampered = json.loads((model_dir / task_card.CHECKS).read_text())
    tampered[0]["expected"]["start"] += 1
    (model_dir / task_card.CHECKS).write_text(json.dumps(tampered))
    examples, problems = check_served(model)
    assert examples == len(checks) and problems and problems[0].startswith("check example 0: start: expected")


def test_an_export_shorter_than_the_model_is_served_at_is_refused(models, tmp_path):
    from bert_core.deploy.export import ExportConfig, export
    from bert_core.errors import BertPipelineError

    export(ExportConfig(task="classification", model=str(models["sst-2"] / "model"), output=str(tmp_path / "short"),
                        dynamic_batch=True, dynamic_seq=True, max_seq_length=16))
    # The card says 32: a 20-token request failed (as a 400 without our message behind a server) once served.
    with pytest.raises(BertPipelineError, match="export it again with --max-seq-length 32 or more"):
        TaskPredictor.from_model_dir(models["sst-2"], export_dir=tmp_path / "short")


def test_a_registered_export_serves_its_onnx_graph(models, tmp_path, monkeypatch, capsys):
    """`bert-pipeline export --register NAME --promote`: the version serves the export's graph on ONNX Runtime
    (dynamic batch and length), and promotion's served-artifact check passes on its scored examples."""
    import mlflow

    from bert_core.deploy.mlflow_model import check_served
    from bert_core.deploy.serving import _ExportRunner
    from bert_pipeline.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main(["export", "--task", "classification", "--model", str(models["sst-2"] / "model"), "--output",
                 str(tmp_path / "onnx"), "--dynamic-batch", "--dynamic-seq", "--max-seq-length", "32",
                 "--register", "bert-sst-2", "--promote"]) == 0
    report = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    assert report["registry"]["serving_check"] == {"examples": 8, "problems": []}
    assert report["registry"]["candidate_metrics"] == json.loads(
        (models["sst-2"] / "manifest.json").read_text())["metrics"]
    model = mlflow.pyfunc.load_model("models:/bert-sst-2@champion")
    assert isinstance(model.unwrap_python_model().predictor.runner, _ExportRunner)
    assert check_served(model) == (8, [])
    eager = TaskPredictor.from_model_dir(models["sst-2"])
    requests = [{"text": "the garden was lovely ."}, {"text": " ".join(["superb"] * 300)}]
    assert [same_answer(a, b, 1e-4) for a, b in zip(eager(requests), model.predict(requests))] == [None, None]


def test_a_registered_export_can_serve_its_int8_graph(models, tmp_path, monkeypatch, capsys):
    """`export --quantize int8 --eval-data ... --register NAME --serve-int8 --promote`: the version runs the INT8
    graph, is registered with the INT8 graph's evaluation, and promotion checks it against the INT8 graph's own
    answers (which differ from the fp32 ones). Too large an INT8 loss refuses the registration."""
    import mlflow

    from bert_core.deploy import int8_gate
    from bert_core.deploy.mlflow_model import check_served
    from bert_pipeline.cli import main

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)  # an earlier test in this process may have set another
    model = str(models["sst-2"] / "model")
    dev = str(models["sst-2"].parent / "sst2" / "dev.tsv")
    base = ["export", "--task", "classification", "--model", model, "--dynamic-batch", "--dynamic-seq",
            "--max-seq-length", "32", "--register", "bert-sst-2", "--serve-int8"]
    assert main([*base, "--output", str(tmp_path / "fp32-only")]) == 2
    assert "--serve-int8 needs --register NAME, --quantize int8 and --eval-data" in capsys.readouterr().err
    assert not (tmp_path / "fp32-only").exists()
    quantized = ["--quantize", "int8", "--eval-data", dev, "--eval-task", "SST-2"]
    # The bar, set so that even no loss is too much: refused, and nothing registered.
    monkeypatch.setattr(int8_gate, "INT8_MAX_DROP_POINTS", -1.0)
    assert main([*base, *quantized, "--output", str(tmp_path / "refused")]) == 2
    assert re.search(r"points under the fp32 graph's .* nothing was registered", capsys.readouterr().err)
    assert not mlflow.MlflowClient(uri, registry_uri=uri).search_model_versions("name='bert-sst-2'")
    # The bar is the registry's, not only the command's: the Python API refuses the same graph, before logging.
    from bert_core.errors import BertPipelineError
    from operators import registry

    with pytest.raises(BertPipelineError, match="points under the fp32 graph's .* serve the fp32 graph instead"):
        registry.register_model_dir(model, "bert-sst-2", export_dir=tmp_path / "refused", quantized=True)
    assert not mlflow.MlflowClient(uri).search_runs([e.experiment_id for e in mlflow.MlflowClient(uri).search_experiments()])
    # This tiny model on 12 dev rows: one flipped label is 8 points; the bar is not what is tested here.
    monkeypatch.setattr(int8_gate, "INT8_MAX_DROP_POINTS", 100.0)
    capsys.readouterr()
    assert main([*base, *quantized, "--output", str(tmp_path / "int8"), "--promote"]) == 0
    report = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")
    assert report["registry"]["promoted"] and report["registry"]["serving_check"] == {"examples": 8, "problems": []}
    assert report["registry"]["candidate_metrics"] == report["evaluation"]["int8"]
    served = mlflow.pyfunc.load_model("models:/bert-sst-2@champion", dst_path=str(tmp_path))
    assert served.unwrap_python_model().predictor.runner.quantized
    assert check_served(served) == (8, [])
    requests = [{"text": "the garden was lovely ."}, {"text": "the film was dull and far too long ."}]
    int8 = TaskPredictor.from_model_dir(model, export_dir=tmp_path / "int8", quantized=True)
    fp32 = TaskPredictor.from_model_dir(model, export_dir=tmp_path / "int8")
    answers = served.predict(requests)
    assert [same_answer(a, b, 1e-6) for a, b in zip(int8(requests), answers)] == [None, None]
    assert any(same_answer(a, b, 1e-6) for a, b in zip(fp32(requests), answers))  # it is not the fp32 graph
    # `bert-pipeline predict --model models:/...` answers as the server does: the INT8 graph, not the weights.
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    assert main(["predict", "--model", "models:/bert-sst-2@champion", str(tmp_path / "requests.jsonl"),
                 "--output", str(tmp_path / "answers.jsonl")]) == 0
    assert [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()] == answers

    # The INT8 graph's answers do not depend on the thread count: on two threads its length groups run side by side
    # and give exactly what one thread gives running them one after another (a group is never split: INT8
    # quantises each group's activations as a whole, and promotion compared answers made on another machine).
    import threading

    from bert_core.deploy.runtime import ExportedModel

    lengths = np.array([32, 31, 30, 29, 5, 5, 6, 6, 15, 16, 15, 16, 15, 16, 15, 16])
    ids = np.random.default_rng(0).integers(1000, 2000, size=(len(lengths), 32))
    mask = (np.arange(32)[None, :] < lengths[:, None]).astype(np.int64)
    ids, types = ids * mask, np.zeros_like(ids)
    two, one = ExportedModel(tmp_path / "int8", threads=2), ExportedModel(tmp_path / "int8", threads=1)
    names = []
    forward = two._forward
    two._forward = lambda parts, q, single_thread=False: (
        names.append(threading.current_thread().name) or forward(parts, q, single_thread))
    (side_by_side,) = two.run(ids, types, mask, quantized=True)
    (in_turn,) = one.run(ids, types, mask, quantized=True)
    assert len(names) > 1 and all(name.startswith("export-group") for name in names), names
    assert np.array_equal(side_by_side, in_turn)
    (fp32_answers,) = one.run(ids, types, mask)
    assert not np.array_equal(in_turn, fp32_answers)  # the INT8 graph ran


def test_a_registered_export_is_promoted_only_above_chance_and_under_its_tasks_name(models, tmp_path, monkeypatch,
                                                                                     capsys):
    """`export --register NAME --promote` gates the version as the DAG's promotion does: a first model at chance
    (here one epoch, which answers every dev sentence alike) is registered, tagged with its dev file's sha256,
    and not promoted; another task's name is refused before anything is logged; a name of no task takes its
    model's task's gates."""
    import mlflow

    from bert_core.io.manifest import sha256_file
    from bert_pipeline.cli import main
    from operators import registry

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    data = models["sst-2"].parent / "sst2"
    finetune(FinetuneConfig(task="sst-2", data_dir=str(data), model=str(models["pretrained"]),
                            output=str(tmp_path / "at-chance"), max_seq_length=32, **TINY))
    assert json.loads((tmp_path / "at-chance" / "manifest.json").read_text())["metrics"] == {"accuracy": 0.5}

    def export(model: Path, name: str, output: str) -> int:
        return main(["export", "--task", "classification", "--model", str(model / "model"), "--output",
                     str(tmp_path / output), "--dynamic-batch", "--dynamic-seq", "--max-seq-length", "32",
                     "--register", name, "--promote"])

    assert export(tmp_path / "at-chance", "bert-sst-2", "chance") == 0
    report = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")["registry"]
    assert report["promoted"] is False and report["chance"] == {"accuracy": 0.5}
    assert any("no better than chance 0.5" in reason for reason in report["reasons"]), report["reasons"]
    version = client.get_model_version("bert-sst-2", report["candidate"])
    assert version.tags[registry.DEV_DATA_TAG] == sha256_file(data / "dev.tsv")
    assert not client.get_registered_model("bert-sst-2").aliases

    assert export(models["sst-2"], "bert-sts-b", "elsewhere") == 2
    assert ("--register bert-sts-b: that is the registry's name for other models than this one, fine-tuned for "
            "sst-2 (its task.json); register it as bert-sst-2") in capsys.readouterr().err
    assert not client.search_model_versions("name='bert-sts-b'")
    # A SQuAD 2.0 model belongs to bert-squad2, not to the SQuAD 1.1 models' bert-squad.
    assert main(["export", "--task", "question_answering", "--model", str(models["squad"] / "model"), "--output",
                 str(tmp_path / "squad"), "--register", "bert-squad"]) == 2
    assert "fine-tuned for squad 2.0 (its task.json); register it as bert-squad2" in capsys.readouterr().err
    assert not (tmp_path / "squad").exists()

    assert export(models["sst-2"], "sentiment-candidates", "own-name") == 0
    report = json.loads(capsys.readouterr().out.split("\n}\n")[0] + "\n}")["registry"]
    assert report["promoted"] and report["gates"] == ["accuracy"], report


def test_cli_processes_that_load_torch_and_onnx_runtime_always_exit_0(models, tmp_path):
    """Stress test for the exit crash of issue 15 (a native thread racing interpreter teardown after all work was
    done): fresh `bert-pipeline` processes that hold torch's, the tokenizer's and ONNX Runtime's thread pools
    export a model and answer requests with its graph, again and again; every one must exit 0."""
    import os
    import shutil
    import subprocess
    import sys

    script = Path(sys.executable).parent / "bert-pipeline"
    command = [str(script)] if script.exists() else [shutil.which("bert-pipeline") or "bert-pipeline"]
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}  # a crash prints every thread's stack
    model = str(models["sst-2"] / "model")
    done = subprocess.run([*command, "export", "--task", "classification", "--model", model, "--output",
                           str(tmp_path / "onnx"), "--dynamic-batch", "--dynamic-seq", "--max-seq-length", "32"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("a lovely garden .", "dull , dull , dull")))
    answers = set()
    for i in range(4):
        out = tmp_path / f"answers-{i}.jsonl"
        done = subprocess.run([*command, "predict", "--model", model, "--export", str(tmp_path / "onnx"),
                               str(requests), "--output", str(out)], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, f"run {i}: exit {done.returncode}\n{done.stderr[-3000:]}"
        answers.add(out.read_text())
    assert len(answers) == 1 and len(answers.pop().splitlines()) == 2


def test_an_s3_model_is_registered_with_its_fine_tuning_runs_metrics(models, tmp_path, monkeypatch, capsys):
    """`export --model s3://.../model --register NAME --promote` without --eval-data: the metrics and the dev file
    are the fine-tuning output's on S3 (the model's cached copy has nothing beside it), as for a local model."""
    from bert_core.io import storage
    from bert_core.io.manifest import sha256_file
    from bert_pipeline.cli import main
    from operators import registry
    from tests import multinode_cluster

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("BERT_PIPELINE_CACHE", str(tmp_path / "cache"))
    # moto keeps its buckets in the process, for the other tests of this worker too: a bucket of this test's own,
    # removed after
    bucket = "export-register-s3"
    with multinode_cluster.moto_s3():
        client = storage.s3_client()
        client.create_bucket(Bucket=bucket)
        try:
            storage.upload_dir(models["sst-2"], f"s3://{bucket}/sst2-run")
            assert main(["export", "--task", "classification", "--model", f"s3://{bucket}/sst2-run/model",
                         "--output", str(tmp_path / "onnx"), "--dynamic-batch", "--dynamic-seq", "--max-seq-length",
                         "32", "--register", "bert-sst-2", "--promote"]) == 0
        finally:
            for key in storage.list_files(f"s3://{bucket}"):
                client.delete_object(Bucket=bucket, Key=key)
            client.delete_bucket(Bucket=bucket)
    out = capsys.readouterr().out  # after moto's "Starting a new Thread ..." line
    report = json.loads(out[out.index("{"):].split("\n}\n")[0] + "\n}")["registry"]
    assert report["candidate_metrics"] == json.loads((models["sst-2"] / "manifest.json").read_text())["metrics"]
    assert report["promoted"] and report["chance"] == {"accuracy": 0.5}, report
    import mlflow

    version = mlflow.MlflowClient().get_model_version("bert-sst-2", report["candidate"])
    assert version.tags[registry.DEV_DATA_TAG] == sha256_file(models["sst-2"].parent / "sst2" / "dev.tsv")
