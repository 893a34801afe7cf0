"""Fine-tuning end to end on tiny data with the real MiniLM weights: one test per task family, each
showing that training moves the dev metric above chance; plus outputs, idempotence and bad input."""

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from bert_core.errors import BertPipelineError
from bert_core.finetune.step import FINETUNE, FinetuneConfig, finetune, predict
from bert_core.finetune.tasks import features
from bert_core.io.manifest import sha256_file
from bert_core.launch.run import run_step
from bert_core.metrics.scoring import score_predictions
from bert_core.model.modeling import BertForSequenceClassification
from bert_core.model.tokenization import BertTokenizer
from bert_core.model.weights import read_state_dict
from bert_core.tasks import glue
from bert_core.train.precision import Precision
from bert_pipeline.cli import main
from tests import toy_tasks
from tests.paths import FIXTURES
from tests.tiny_bert import write_tiny_bert

pytestmark = pytest.mark.slow

FAST = dict(batch_size=16, lr=1e-4, warmup_ratio=0.1, tracking=False)
XNLI = FIXTURES / "xnli"


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """For tests of the plumbing, not of learning: a 2-layer random BERT, dropout off (deterministic)."""
    return write_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def _rows(path: Path) -> list[str]:
    return path.read_text().splitlines()[1:]


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return read_state_dict(model_dir / "model.safetensors")


def test_classification_sst2(minilm_dir, tmp_path):
    data = toy_tasks.write_sst2(tmp_path / "sst2")
    cfg = FinetuneConfig(task="SST-2", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=2, max_seq_length=24, **FAST)
    result = finetune(cfg)
    assert result["metrics"]["accuracy"] >= 0.9  # chance is 0.5
    out = tmp_path / "out"
    assert {"model", "dev_predictions.tsv", "test_predictions.tsv", "metrics.json", "manifest.json"} <= {
        p.name for p in out.iterdir()}
    # The manifest's metrics are what the official scorer says about the written predictions.
    assert score_predictions("sst-2", data / "dev.tsv", out / "dev_predictions.tsv") == result["metrics"]
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["id2label"] == {"0": "0", "1": "1"} and config["num_labels"] == 2
    assert len((out / "test_predictions.tsv").read_text().splitlines()) == 9
    history = json.loads((out / "metrics.json").read_text())
    assert len(history["epochs"]) == 2 and history["best_epoch"] in (1, 2)
    # Same config and inputs again: a no-op that returns the recorded manifest.
    assert finetune(cfg)["finished_at"] == result["finished_at"]


def test_regression_stsb(minilm_dir, tmp_path):
    data = toy_tasks.write_stsb(tmp_path / "stsb", n_train=96, n_dev=32)
    cfg = FinetuneConfig(task="sts-b", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=3, max_seq_length=32, **FAST)
    metrics = finetune(cfg)["metrics"]
    assert metrics["pearson"] > 0.7 and metrics["spearman"] > 0.5  # chance is 0


def test_question_answering_squad(minilm_dir, tmp_path):
    data = toy_tasks.write_squad(tmp_path / "squad")
    cfg = FinetuneConfig(task="squad", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=3, max_seq_length=48, doc_stride=16, max_query_length=16, **FAST)
    metrics = finetune(cfg)["metrics"]
    assert metrics["f1"] > 60 and metrics["exact_match"] > 40
    predictions = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert len(predictions) == 32 and (tmp_path / "out" / "nbest_predictions.json").is_file()


def test_question_answering_squad_v2_reports_threshold(minilm_dir, tmp_path):
    data = toy_tasks.write_squad(tmp_path / "squad2", n_train=48, n_dev=10, version_2=True)
    cfg = FinetuneConfig(task="squad", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=2, max_seq_length=48, doc_stride=16, max_query_length=16, version_2=True, **FAST)
    metrics = finetune(cfg)["metrics"]
    assert {"exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(metrics)
    assert (tmp_path / "out" / "null_odds.json").is_file()


def test_ner_conll(minilm_dir, tmp_path):
    data = toy_tasks.write_ner(tmp_path / "ner")
    cfg = FinetuneConfig(task="ner", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=3, max_seq_length=24, **FAST)
    metrics = finetune(cfg)["metrics"]
    assert metrics["f1"] > 0.6  # entity-level F1; chance is ~0
    labels = json.loads((tmp_path / "out" / "model" / "config.json").read_text())["id2label"]
    assert set(labels.values()) == {"O", "B-PER", "I-PER", "B-LOC"}  # IOB1 input normalised to IOB2


def test_cli_and_bad_input(minilm_dir, tmp_path, capsys):
    data = toy_tasks.write_sst2(tmp_path / "sst2", n_train=16, n_dev=8)
    base = ["finetune", "sst-2", "--data-dir", str(data), "--model", str(minilm_dir), "--no-tracking",
            "--epochs", "1", "--max-seq-length", "16", "--batch-size", "8"]
    assert main(base + ["--output", str(tmp_path / "out")]) == 0
    said = capsys.readouterr()
    assert '"accuracy"' in said.out
    assert "epoch 1/1" not in said.err  # the epoch bar is for a terminal: in a log file each redraw is a line
    # An existing output with a different config is not overwritten.
    assert main(base + ["--output", str(tmp_path / "out"), "--lr", "3e-5"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["finetune", "sst3", "--data-dir", str(data), "--model", str(minilm_dir),
                 "--output", str(tmp_path / "x")]) == 2
    assert "valid tasks: cola, sst-2" in capsys.readouterr().err
    with pytest.raises(BertPipelineError, match=r"no train file for mrpc \(looked for train.tsv\)"):
        finetune(FinetuneConfig(task="mrpc", data_dir=str(tmp_path), model=str(minilm_dir),
                                output=str(tmp_path / "y"), tracking=False))
    (data / "train.tsv").write_text("sentence\tlabel\ngood\t1\nodd\t7\n")
    with pytest.raises(BertPipelineError, match=r"train.tsv, line 3: label '7' is not a SST-2 label"):
        finetune(FinetuneConfig(task="sst-2", data_dir=str(data), model=str(minilm_dir),
                                output=str(tmp_path / "z"), tracking=False))
    assert not (tmp_path / "y").exists() and not (tmp_path / "z").exists()
    # Tracking on: the MLflow run is the launcher's to open (fine-tuning does not import deploy's task pyfunc).
    with pytest.raises(BertPipelineError, match=r"needs the MLflow run to log into: run it with .*run_step"):
        finetune(FinetuneConfig(task="sst-2", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "w")))
    assert not (tmp_path / "w").exists()


def test_the_best_epoch_is_kept_not_the_last(tiny_bert, tmp_path, monkeypatch):
    """The scorer below reports the real metrics except for a scripted pearson: undefined (NaN, as for
    constant predictions) at epoch 1, best at epoch 2. Epoch 2's metrics, predictions and weights must be
    the output's, not the last epoch's, nor the first's."""
    data = toy_tasks.write_stsb(tmp_path / "stsb", n_train=24, n_dev=12)
    scripted = [float("nan"), 0.9, 0.5]
    predictions_seen: list[str] = []

    def scorer(task, gold, predictions, na_prob_file=None, language=None):
        predictions_seen.append(Path(predictions).read_text())
        real = score_predictions(task, gold, predictions, na_prob_file, language=language)
        return {**real, "pearson": scripted[len(predictions_seen) - 1]}

    monkeypatch.setattr("bert_core.finetune.step.score_predictions", scorer)
    cfg = FinetuneConfig(task="sts-b", data_dir=str(data), model=str(tiny_bert), output=str(tmp_path / "out"),
                         epochs=3, batch_size=8, lr=1e-3, max_seq_length=32, tracking=False)
    result = finetune(cfg)
    out = tmp_path / "out"
    assert result["best_epoch"] == 2 and result["metrics"]["pearson"] == 0.9
    history = json.loads((out / "metrics.json").read_text())
    assert history["best_epoch"] == 2 and history["dev"] == result["metrics"]
    assert [e["pearson"] for e in history["epochs"]][1:] == scripted[1:]
    assert len(predictions_seen) == 3 and len(set(predictions_seen)) == 3
    assert (out / "dev_predictions.tsv").read_text() == predictions_seen[1]
    # The saved weights are epoch 2's: they predict epoch 2's dev scores again, not another epoch's.
    tokenizer = BertTokenizer.from_model_dir(out / "model")
    arrays = features.encode_examples(tokenizer, glue.read_examples("sts-b", data / "dev.tsv"), 32)
    model = BertForSequenceClassification.from_pretrained(str(out / "model"))
    again = predict(model, arrays, ("logits",), 64, Precision("float32", torch.device("cpu")),
                    torch.device("cpu"))["logits"][:, 0]
    epoch_scores = [np.array([float(r.split("\t")[1]) for r in text.splitlines()[1:]]) for text in predictions_seen]
    np.testing.assert_allclose(again, epoch_scores[1], rtol=1e-5, atol=1e-6)
    for other in (epoch_scores[0], epoch_scores[2]):
        assert not np.allclose(again, other, rtol=1e-5, atol=1e-6)


def test_ner_micro_batches_are_weighted_by_labelled_tokens(tiny_bert, tmp_path):
    """Batch 8 in one micro-batch or in two of 4 (accumulation; the same split as across 2 workers) is the
    same update: NER's loss averages over labelled word pieces, which differ between the halves."""
    data = toy_tasks.write_ner(tmp_path / "ner", n_train=16, n_dev=6)
    base = dict(task="ner", data_dir=str(data), model=str(tiny_bert), epochs=1, lr=1e-3, max_seq_length=24,
                tracking=False, dtype="float32")  # two runs compared number by number: float32, on any CPU
    whole = finetune(FinetuneConfig(**base, output=str(tmp_path / "whole"), batch_size=8))
    split = finetune(FinetuneConfig(**base, output=str(tmp_path / "split"), batch_size=4, accumulate=2))
    losses = [json.loads((tmp_path / name / "metrics.json").read_text())["epochs"][0]["train_loss"]
              for name in ("whole", "split")]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    a, b = _weights(tmp_path / "whole" / "model"), _weights(tmp_path / "split" / "model")
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6)
    assert split["metrics"] == whole["metrics"]


def test_mlflow_run_holds_params_epoch_metrics_and_prediction_files(tiny_bert, tmp_path, monkeypatch):
    import mlflow

    home = tmp_path / "home"
    monkeypatch.setenv("BERT_PIPELINE_HOME", str(home))
    # Set (empty: the embedded store) so that the value MLflow exports when a run starts is undone after.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "")
    monkeypatch.chdir(tmp_path)  # where MLflow's default artifact root (./mlruns) would land
    sst2 = toy_tasks.write_sst2(tmp_path / "sst2", n_train=24, n_dev=10)
    squad = toy_tasks.write_squad(tmp_path / "squad", n_train=8, n_dev=4, version_2=True)
    common = dict(model=str(tiny_bert), batch_size=8, lr=1e-3)
    # The launcher opens the MLflow run (and logs the model as the task pyfunc), as the CLI and the DAGs run it.
    glue_result = run_step(FINETUNE, FinetuneConfig(task="SST-2", data_dir=str(sst2), output=str(tmp_path / "sst2-out"),
                                                    epochs=2, max_seq_length=24, **common))
    squad_result = run_step(FINETUNE, FinetuneConfig(task="squad", data_dir=str(squad),
                                                     output=str(tmp_path / "squad-out"),
                                           epochs=1, version_2=True, max_seq_length=48, doc_stride=16,
                                           max_query_length=16, **common))
    client = mlflow.MlflowClient(f"sqlite:///{home / 'mlflow.db'}")

    def the_run(experiment: str):
        found = client.get_experiment_by_name(experiment)
        assert found is not None, experiment
        runs = client.search_runs([found.experiment_id])
        assert len(runs) == 1
        return runs[0]

    def artifacts(run_id: str, path: str | None = None) -> set[str]:
        return {a.path for a in client.list_artifacts(run_id, path)}

    run = the_run("bert-finetune/sst-2")
    out = tmp_path / "sst2-out"
    assert run.info.run_id == glue_result["mlflow_run_id"] and run.info.status == "FINISHED"
    assert run.data.params["lr"] == "0.001" and run.data.params["epochs"] == "2"
    assert run.data.params["world_size"] == "1"
    # The default precision, resolved for this machine, and why: in the params and the manifest.
    from bert_core.train.precision import resolve_precision

    auto = resolve_precision("auto", "cpu")
    assert (run.data.params["dtype"], run.data.params["precision"]) == ("auto", auto.dtype)
    assert run.data.params["precision_reason"] == auto.reason
    assert glue_result["precision"] == {"dtype": auto.dtype, "requested": "auto", "reason": auto.reason}
    assert run.data.tags["data_sha256"] == sha256_file(sst2 / "train.tsv") and "git_sha" in run.data.tags
    epochs = json.loads((out / "metrics.json").read_text())["epochs"]
    for key in ("train_loss", "accuracy"):
        history = client.get_metric_history(run.info.run_id, key)
        assert [(m.step, m.value) for m in history] == [(e["epoch"], pytest.approx(e[key])) for e in epochs]
    best = client.get_metric_history(run.info.run_id, "best/accuracy")
    assert [(m.step, m.value) for m in best] == [(glue_result["best_epoch"], glue_result["metrics"]["accuracy"])]
    assert {"manifest.json", "metrics.json", "predictions"} <= artifacts(run.info.run_id)
    assert artifacts(run.info.run_id, "predictions") == {"predictions/dev_predictions.tsv",
                                                         "predictions/test_predictions.tsv", "predictions/scored.json"}
    local = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="predictions",
                                                     tracking_uri=f"sqlite:///{home / 'mlflow.db'}",
                                                     dst_path=str(tmp_path / "downloaded")))
    for name in ("dev_predictions.tsv", "test_predictions.tsv"):
        assert (local / name).read_text() == (out / name).read_text()
    assert mlflow.search_logged_models(experiment_ids=[run.info.experiment_id], output_format="list")

    run = the_run("bert-finetune/squad")
    assert run.info.run_id == squad_result["mlflow_run_id"]
    assert run.data.metrics["best/f1"] == squad_result["metrics"]["f1"]
    assert artifacts(run.info.run_id, "predictions") == {
        "predictions/predictions.json", "predictions/nbest_predictions.json", "predictions/null_odds.json",
        "predictions/scored.json"}


def test_xnli_original_release_trains_on_xnli_mt_files(tiny_bert, tmp_path, capsys):
    """XNLI-1.0 (xnli.dev.tsv / xnli.test.tsv, every language in one file, no training data) trains on
    XNLI-MT-1.0's multinli.train.<language>.tsv: inside the data dir as Google's run_classifier.py
    expects, or given with --train-file (e.g. English for the zero-shot setting)."""
    original = XNLI / "XNLI-1.0"
    base = dict(task="xnli", model=str(tiny_bert), epochs=1, batch_size=8, lr=1e-3, max_seq_length=32, tracking=False)
    with pytest.raises(BertPipelineError, match=r"no train file for xnli \(looked for train.tsv or "
                       r"multinli/multinli.train.zh.tsv or multinli.train.zh.tsv\); the original XNLI-1.0 release "
                       r"has no training data: .*or pass --train-file"):
        finetune(FinetuneConfig(**base, data_dir=str(original), output=str(tmp_path / "x")))
    with pytest.raises(BertPipelineError, match=r"--train-file .*nope.tsv: no such file"):
        finetune(FinetuneConfig(**base, data_dir=str(original), output=str(tmp_path / "x"),
                                train_file=str(tmp_path / "nope.tsv")))
    assert not (tmp_path / "x").exists()

    data = tmp_path / "xnli"  # Google's layout: XNLI-MT's multinli/ next to the xnli.*.tsv files
    shutil.copytree(original, data)
    shutil.copytree(XNLI / "XNLI-MT-1.0" / "multinli", data / "multinli")
    result = finetune(FinetuneConfig(**base, data_dir=str(data), output=str(tmp_path / "zh")))
    out = tmp_path / "zh"
    zh_dev = glue.read_examples("xnli", data / "xnli.dev.tsv", language="zh")
    assert len(_rows(out / "dev_predictions.tsv")) == len(zh_dev) == 6
    assert len(_rows(out / "test_predictions.tsv")) == 4
    assert {i["uri"] for i in result["inputs"]} >= {str(data / "multinli" / "multinli.train.zh.tsv"),
                                                    str(data / "xnli.dev.tsv"), str(data / "xnli.test.tsv")}
    assert str(data / "multinli" / "multinli.train.en.tsv") not in {i["uri"] for i in result["inputs"]}
    assert result["metrics"] == score_predictions("xnli", data / "xnli.dev.tsv", out / "dev_predictions.tsv",
                                                  language="zh")

    english = XNLI / "XNLI-MT-1.0" / "multinli" / "multinli.train.en.tsv"
    assert main(["finetune", "xnli", "--data-dir", str(original), "--model", str(tiny_bert), "--output",
                 str(tmp_path / "fr"), "--train-file", str(english), "--language", "fr", "--epochs", "1",
                 "--batch-size", "8", "--max-seq-length", "32", "--no-tracking"]) == 0
    printed = json.loads(capsys.readouterr().out)
    out = tmp_path / "fr"
    fr = [e.text_a for e in glue.read_examples("xnli", original / "xnli.dev.tsv", language="fr")]
    assert len(_rows(out / "dev_predictions.tsv")) == len(fr) == 6 and fr[0].startswith("Le bac")
    recorded = json.loads((out / "manifest.json").read_text())
    assert str(english) in {i["uri"] for i in recorded["inputs"]}
    assert printed["metrics"] == recorded["metrics"] == score_predictions(
        "xnli", original / "xnli.dev.tsv", out / "dev_predictions.tsv", language="fr")


def test_in_process_finetune_refuses_several_workers(tmp_path):
    """finetune() runs here; several workers are the launcher's (run_step), not silently one."""
    cfg = FinetuneConfig(task="sst-2", data_dir=str(tmp_path), model="tiny", output=str(tmp_path / "out"),
                         num_workers=2, tracking=False)
    with pytest.raises(BertPipelineError, match=r"run_step\(FINETUNE, cfg\)"):
        finetune(cfg)


def test_predicted_token_outputs_never_answer_from_padding(tmp_path):
    """QA logits at padded positions are -1e4 (like the positions cut off past the batch's longest row), so
    SQuAD's n-best is never filled by padding; real positions equal a forward of the row alone."""
    from bert_core.model.modeling import BertForQuestionAnswering

    model = BertForQuestionAnswering.from_pretrained(str(write_tiny_bert(tmp_path / "tiny", seed=3))).eval()
    with torch.no_grad():  # a bias far above any real logit: padding would win every n-best slot
        model.qa_outputs.bias.fill_(50.0)
    ids = np.zeros((2, 16), dtype=np.int64)
    ids[0, :12], ids[1, :5] = np.arange(5, 17), np.arange(5, 10)
    arrays = {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": (ids > 0).astype(np.int64)}
    out = predict(model, arrays, ("start_logits", "end_logits"), 8, Precision("float32", torch.device("cpu")),
                  torch.device("cpu"))
    for name in ("start_logits", "end_logits"):
        assert out[name].shape == (2, 16)
        assert (out[name][1, 5:] == -1e4).all() and (out[name][0, 12:] == -1e4).all()
        alone = predict(model, {k: v[1:] for k, v in arrays.items()}, (name,), 8,
                        Precision("float32", torch.device("cpu")), torch.device("cpu"))[name]
        np.testing.assert_allclose(out[name][1, :5], alone[0, :5], atol=1e-5)
        assert (out[name][1, :5] > -1e3).all()


def test_a_finished_run_on_s3_is_found_up_to_date_from_another_machine(tiny_bert, tmp_path, monkeypatch, caplog):
    """Data, model and output on S3; the same run again with another local cache (another Celery worker, another
    HOME) finds the output up to date instead of refusing it as another result: the manifest names the inputs by
    their s3:// URIs, not by their cached copies' paths."""
    from bert_core.io import storage
    from tests import multinode_cluster

    with multinode_cluster.moto_s3():
        storage.s3_client().create_bucket(Bucket="ftrun")
        storage.upload_dir(toy_tasks.write_sst2(tmp_path / "sst2", n_train=16, n_dev=8), "s3://ftrun/data")
        storage.upload_dir(tiny_bert, "s3://ftrun/tiny")
        cfg = FinetuneConfig(task="sst-2", data_dir="s3://ftrun/data", model="s3://ftrun/tiny",
                             output="s3://ftrun/out", epochs=1, max_seq_length=16, **FAST)
        monkeypatch.setenv("BERT_PIPELINE_CACHE", str(tmp_path / "worker-1-cache"))
        with caplog.at_level(logging.INFO):
            first = finetune(cfg)
        # The log names the model by its URI, not by this machine's cached copy of it.
        assert "worker(s)) from s3://ftrun/tiny\n" in caplog.text + "\n", caplog.text
        assert "s3://ftrun/tiny: newly initialised" in caplog.text and "worker-1-cache" not in caplog.text
        uris = {i["uri"] for i in first["inputs"]}
        assert {"s3://ftrun/data/train.tsv", "s3://ftrun/data/dev.tsv", "s3://ftrun/tiny/model.safetensors"} <= uris
        assert all(uri.startswith("s3://ftrun/") for uri in uris), uris
        monkeypatch.setenv("BERT_PIPELINE_CACHE", str(tmp_path / "worker-2-cache"))
        again = finetune(cfg)
    assert (again["started_at"], again["finished_at"]) == (first["started_at"], first["finished_at"])



def test_without_a_terminal_the_log_says_where_the_epoch_is(minilm_dir, tmp_path, monkeypatch, caplog):
    """The epoch bar is drawn on a terminal only; without one (`ray job submit`, nohup, a task log) a line every
    PROGRESS_LINE_S says the update, the loss and the speed, as pretraining does (an MRPC epoch on 2 CPU cores was
    over ten silent minutes)."""
    from bert_core.finetune import step as finetune_step

    data = toy_tasks.write_sst2(tmp_path / "sst2", n_train=16, n_dev=8)
    monkeypatch.setattr(finetune_step, "PROGRESS_LINE_S", 0.0)
    cfg = FinetuneConfig(task="sst-2", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=1, max_seq_length=16, batch_size=8, tracking=False)
    with caplog.at_level("INFO", logger="bert_core.finetune.step"):
        finetune(cfg)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().endswith("examples/s")]
    assert [line.split(",")[0] for line in lines] == ["epoch 1/1: update 1 of 2", "epoch 1/1: update 2 of 2"], lines
    assert "loss" in lines[-1] and "lr" in lines[-1]


def test_a_broken_row_is_an_error_before_the_mlflow_run_opens(minilm_dir, tmp_path, monkeypatch):
    """Every file of the run (train, dev, test) is read where the run is planned: a broken line in any of them
    names the file and the line before run_step opens the MLflow run (a FAILED run was left behind for a bad
    dev or train row) or a worker starts, and nothing is written."""
    data = toy_tasks.write_sst2(tmp_path / "sst2", n_train=16, n_dev=8)
    monkeypatch.setattr("bert_core.launch.run.build_tracker",
                        lambda *a, **k: pytest.fail("an MLflow run was opened for broken input"))
    cfg = FinetuneConfig(task="sst-2", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=1, max_seq_length=16, batch_size=8, tracking=True)
    for name in ("train.tsv", "dev.tsv"):
        good = (data / name).read_text()
        lines = good.splitlines(keepends=True)
        lines[3] = lines[3].replace("\t", " ")
        (data / name).write_text("".join(lines))
        with pytest.raises(BertPipelineError, match=rf"{name}, line 4: 1 tab-separated column"):
            run_step(FINETUNE, cfg)
        (data / name).write_text(good)
    assert not (tmp_path / "out").exists()
