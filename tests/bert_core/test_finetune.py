"""Fine-tuning end to end on tiny data with the real MiniLM weights: one test per task family, each
showing that training moves the dev metric above chance; plus outputs, idempotence and bad input."""

import json

import pytest
import toy_tasks

from bert_core.cli import main
from bert_core.errors import BertPipelineError
from bert_core.finetune import FinetuneConfig, finetune
from evaluation.scoring import score_predictions

pytestmark = pytest.mark.slow

FAST = dict(batch_size=16, lr=1e-4, warmup_ratio=0.1, tracking=False)


def test_classification_sst2(minilm_dir, tmp_path):
    data = toy_tasks.write_sst2(tmp_path / "sst2")
    cfg = FinetuneConfig(task="SST-2", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=2, max_len=24, **FAST)
    result = finetune(cfg, score_predictions)
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
    assert finetune(cfg, score_predictions)["finished_at"] == result["finished_at"]


def test_regression_stsb(minilm_dir, tmp_path):
    data = toy_tasks.write_stsb(tmp_path / "stsb", n_train=96, n_dev=32)
    cfg = FinetuneConfig(task="sts-b", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=3, max_len=32, **FAST)
    metrics = finetune(cfg, score_predictions)["metrics"]
    assert metrics["pearson"] > 0.7 and metrics["spearman"] > 0.5  # chance is 0


def test_question_answering_squad(minilm_dir, tmp_path):
    data = toy_tasks.write_squad(tmp_path / "squad")
    cfg = FinetuneConfig(task="squad", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=3, max_seq_length=48, doc_stride=16, max_query_length=16, **FAST)
    metrics = finetune(cfg, score_predictions)["metrics"]
    assert metrics["f1"] > 60 and metrics["exact_match"] > 40
    predictions = json.loads((tmp_path / "out" / "predictions.json").read_text())
    assert len(predictions) == 32 and (tmp_path / "out" / "nbest_predictions.json").is_file()


def test_question_answering_squad_v2_reports_threshold(minilm_dir, tmp_path):
    data = toy_tasks.write_squad(tmp_path / "squad2", n_train=48, n_dev=10, version_2=True)
    cfg = FinetuneConfig(task="squad", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=2, max_seq_length=48, doc_stride=16, max_query_length=16, version_2=True, **FAST)
    metrics = finetune(cfg, score_predictions)["metrics"]
    assert {"exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(metrics)
    assert (tmp_path / "out" / "null_odds.json").is_file()


def test_ner_conll(minilm_dir, tmp_path):
    data = toy_tasks.write_ner(tmp_path / "ner")
    cfg = FinetuneConfig(task="ner", data_dir=str(data), model=str(minilm_dir), output=str(tmp_path / "out"),
                         epochs=3, max_len=24, **FAST)
    metrics = finetune(cfg, score_predictions)["metrics"]
    assert metrics["f1"] > 0.6  # entity-level F1; chance is ~0
    labels = json.loads((tmp_path / "out" / "model" / "config.json").read_text())["id2label"]
    assert set(labels.values()) == {"O", "B-PER", "I-PER", "B-LOC"}  # IOB1 input normalised to IOB2


def test_cli_and_bad_input(minilm_dir, tmp_path, capsys):
    data = toy_tasks.write_sst2(tmp_path / "sst2", n_train=16, n_dev=8)
    base = ["finetune", "sst-2", "--data-dir", str(data), "--model", str(minilm_dir), "--no-tracking",
            "--epochs", "1", "--max-len", "16", "--batch-size", "8"]
    assert main(base + ["--output", str(tmp_path / "out")]) == 0
    assert '"accuracy"' in capsys.readouterr().out
    # An existing output with a different config is not overwritten.
    assert main(base + ["--output", str(tmp_path / "out"), "--lr", "3e-5"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["finetune", "sst3", "--data-dir", str(data), "--model", str(minilm_dir),
                 "--output", str(tmp_path / "x")]) == 2
    assert "valid tasks: cola, sst-2" in capsys.readouterr().err
    with pytest.raises(BertPipelineError, match=r"no train file for mrpc \(looked for train.tsv\)"):
        finetune(FinetuneConfig(task="mrpc", data_dir=str(tmp_path), model=str(minilm_dir),
                                output=str(tmp_path / "y"), tracking=False), score_predictions)
    (data / "train.tsv").write_text("sentence\tlabel\ngood\t1\nodd\t7\n")
    with pytest.raises(BertPipelineError, match=r"train.tsv, line 3: label '7' is not a SST-2 label"):
        finetune(FinetuneConfig(task="sst-2", data_dir=str(data), model=str(minilm_dir),
                                output=str(tmp_path / "z"), tracking=False), score_predictions)
    assert not (tmp_path / "y").exists() and not (tmp_path / "z").exists()
