"""The INT8 gate: when an export's INT8 graph may be served instead of its fp32 graph. The bar is written once
here; `bert-pipeline export --serve-int8` and operators.registry.register_model_dir both apply it to the
evaluation the export recorded in export.json (bert_core.deploy.export_evaluation).
"""

from __future__ import annotations

import json
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_core.io import storage

# Serving the INT8 graph may cost at most this on the task's main metric, in points (accuracy 0.01 = 1 point;
# SQuAD's F1/EM are percentages already). Measured cost on SST-2 with MiniLM: 0.0 (docs/benchmarks-serving.md).
INT8_MAX_DROP_POINTS = 1.0


def servable_int8_evaluation(export_dir: str | Path) -> dict:
    """The INT8 evaluation recorded in `export_dir`'s export.json, when the INT8 graph may be served: it loses at
    most INT8_MAX_DROP_POINTS against the fp32 graph on the task's main metric. A clear error otherwise, and for
    an export that was not evaluated with INT8 (`--quantize int8 --eval-data`)."""
    meta_file = storage.local_dir(str(export_dir)) / "export.json"
    try:
        evaluation = json.loads(meta_file.read_text()).get("evaluation") or {}
    except FileNotFoundError:
        raise BertPipelineError(f"{export_dir}: not an export directory (no export.json)") from None
    except (json.JSONDecodeError, AttributeError):
        raise BertPipelineError(f"{meta_file}: not an export's export.json (expected a JSON object)") from None
    if not evaluation.get("int8"):
        raise BertPipelineError(f"{meta_file}: no INT8 evaluation; serving the INT8 graph needs an export made with "
                                "--quantize int8 and --eval-data (its loss against the fp32 graph is what allows it)")
    metric = evaluation["main_metric"]
    scale = 1.0 if evaluation["task"] == "squad" else 100.0  # SQuAD's metrics are percentages, GLUE's fractions
    drop = (evaluation["fp32"][metric] - evaluation["int8"][metric]) * scale
    if drop > INT8_MAX_DROP_POINTS:
        raise BertPipelineError(
            f"{export_dir}: the INT8 graph scores {metric} {evaluation['int8'][metric]:.4f} on {evaluation['data']}, "
            f"{drop:.2f} points under the fp32 graph's {evaluation['fp32'][metric]:.4f} (at most "
            f"{INT8_MAX_DROP_POINTS:g} allowed); serve the fp32 graph instead")
    return evaluation
