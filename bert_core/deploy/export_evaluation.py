"""An export scored on labelled data: its fp32 graph and, when quantised, its INT8 graph predict the data
(bert_core.deploy.batch_predict) and the official scorers score both (bert_core.metrics.scoring), so the cost of
quantisation is a metric difference. `bert-pipeline export --eval-data` records it in export.json and the
manifest; the INT8 gate (bert_core.deploy.int8_gate) reads it from there.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bert_core.deploy.batch_predict import export_squad_options, predict_file
from bert_core.deploy.runtime import ExportedModel
from bert_core.metrics.scoring import score_predictions
from bert_core.tasks import catalog


@dataclass
class Evaluation:
    """The exported graph(s) scored on labelled data."""

    data: str
    task: str
    examples: int
    main_metric: str
    fp32: dict[str, float]
    int8: dict[str, float] | None = None
    int8_minus_fp32: dict[str, float] = field(default_factory=dict)


def evaluate_export(model: ExportedModel, data: str | Path, task: str) -> Evaluation:
    """Predict `data` with the fp32 graph and, if the export has one, the INT8 graph; score both."""
    squad = None
    if task == "squad":
        from bert_core.tasks.squad import V2, read_squad

        version, _ = read_squad(data)
        # The model's own settings (doc stride, null threshold ...), on this file's version.
        squad = dataclasses.replace(export_squad_options(model), version_2=version == V2)
    scores: dict[str, dict[str, float]] = {}
    examples = 0
    with tempfile.TemporaryDirectory(prefix="bert-export-eval-") as work:
        for precision in ("fp32", "int8"):
            quantized = precision == "int8"
            if quantized and not model.meta.get("quantized_graph"):
                continue
            out = Path(work) / precision
            examples, written = predict_file(model, data, out if squad else out.with_suffix(".tsv"),
                                             task=None if squad else task, quantized=quantized, squad=squad)
            if squad:
                na_prob = out / "null_odds.json" if squad.version_2 else None
                scores[precision] = score_predictions("squad", data, out / "predictions.json", na_prob_file=na_prob)
            else:
                scores[precision] = score_predictions(task, data, written[0])
    fp32, int8 = scores["fp32"], scores.get("int8")
    difference = {} if int8 is None else {k: int8[k] - fp32[k] for k in fp32 if k in int8}
    return Evaluation(str(data), task, examples, catalog.get(task).main_metric, fp32, int8, difference)


def flat_metrics(evaluation: Evaluation) -> dict[str, float]:
    """The evaluation as manifest metrics: fp32_<metric>, int8_<metric>, int8_minus_fp32_<metric>."""
    flat = {f"fp32_{k}": v for k, v in evaluation.fp32.items()}
    flat.update({f"int8_{k}": v for k, v in (evaluation.int8 or {}).items()})
    flat.update({f"int8_minus_fp32_{k}": v for k, v in evaluation.int8_minus_fp32.items()})
    return flat


def describe_evaluation(evaluation: dict) -> str:
    """One line: the main metric of the fp32 and INT8 graphs and their difference."""
    metric = evaluation["main_metric"]
    text = (f"{evaluation['task']} on {evaluation['data']} ({evaluation['examples']} examples): "
            f"fp32 {metric} {evaluation['fp32'][metric]:.4f}")
    if evaluation.get("int8"):
        text += (f", int8 {metric} {evaluation['int8'][metric]:.4f} "
                 f"(int8 - fp32: {evaluation['int8_minus_fp32'][metric]:+.4f})")
    return text
