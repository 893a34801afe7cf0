"""Score an already fine-tuned model directory on a task's dev data, exactly as fine-tuning scores its epochs.

The nightly regression suite uses it to re-measure registered models on pinned data: same features, same
prediction files, same official scorers as `bert-pipeline finetune`, because it runs fine-tuning's own
evaluation code (`bert_core.finetune.step.evaluate_sets`) on a model loaded from disk.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from bert_core.errors import BertPipelineError
from bert_core.finetune.config import DEPRECATED_MAX_LEN, FinetuneConfig, renamed_settings
from bert_core.finetune.step import evaluate_sets
from bert_core.finetune.tasks.adapters import ADAPTERS
from bert_core.io import storage
from bert_core.model.config import BertConfig
from bert_core.model.tokenization import BertTokenizer
from bert_core.tasks import catalog
from bert_core.train.precision import Precision

# The settings that decide how dev examples become features; the rest of a fine-tuning config does not matter here.
FEATURE_FIELDS = ("max_seq_length", "doc_stride", "max_query_length", "n_best_size", "max_answer_length", "version_2",
                  "null_score_diff_threshold", "language", "eval_batch_size")


def evaluate_model(model_dir: str | Path, task: str, data_dir: str,
                   settings: dict[str, Any] | None = None, out_dir: str | Path | None = None,
                   device: str | None = None) -> dict[str, float]:
    """Dev metrics of `model_dir` (a fine-tuned model directory) on `task`'s dev file(s) in `data_dir`.

    `settings` are fine-tuning config fields (e.g. the model's own `max_seq_length`, from its finetune manifest);
    unknown keys are an error. Prediction files go to `out_dir` when given (kept), else a temp dir.
    """
    info = catalog.get(task)
    settings = dict(settings or {})
    unknown = set(settings) - set(FEATURE_FIELDS)
    if unknown:
        raise BertPipelineError(f"evaluate_model: unknown settings {sorted(unknown)}; known: {', '.join(FEATURE_FIELDS)}")
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise BertPipelineError(f"{model_dir}: not a model directory (no config.json)")
    cfg = FinetuneConfig(task=info.name, data_dir=str(data_dir), model=str(model_dir), output="", **settings)
    local_data = storage.local_dir(data_dir)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = BertTokenizer.from_model_dir(model_dir)
    # A NER model's tags are its own (config.json's id2label), not re-derived from a training file that pinned dev
    # data need not have (the nightly refused a NER model's data without train.txt).
    labels = {"labels": _model_labels(model_dir)} if info.kind == "ner" else {}
    adapter = ADAPTERS[info.kind](info, local_data, tokenizer, cfg, **labels)
    eval_sets = [s for s in adapter.eval_sets() if s.has_gold]
    model = adapter.model_class.from_pretrained(str(model_dir), **adapter.config_overrides()).to(dev)
    with tempfile.TemporaryDirectory(prefix="bert-task-eval-") as scratch:
        target = Path(out_dir) if out_dir is not None else Path(scratch)
        target.mkdir(parents=True, exist_ok=True)
        metrics = evaluate_sets(adapter, model, eval_sets, cfg, Precision("float32", dev), dev, target, info)
        (target / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def _model_labels(model_dir: Path) -> list[str]:
    """The labels of a fine-tuned model, in the order of its head's outputs."""
    id2label = BertConfig.from_json_file(model_dir / "config.json").id2label
    if not id2label:
        raise BertPipelineError(f"{model_dir / 'config.json'}: no id2label, expected the tags of a fine-tuned NER model")
    return [id2label[i] for i in range(len(id2label))]


def settings_from_manifest(finetune_manifest: dict[str, Any]) -> dict[str, Any]:
    """The feature settings a model was fine-tuned with, from its finetune manifest's config (a manifest
    written before max_seq_length meant every task kind has `max_len`: read as it was meant)."""
    config = finetune_manifest.get("config", {})
    if DEPRECATED_MAX_LEN in config:
        config = renamed_settings(config, catalog.get(config["task"]).kind, "finetune manifest")
    known = {f.name for f in dataclasses.fields(FinetuneConfig)}
    return {k: config[k] for k in FEATURE_FIELDS if k in config and k in known}
