"""Export a task model to a graph that runs without this package: ONNX (ONNX Runtime) or a
torch.export program (.pt2, torch alone), plus everything needed to feed it.

The export directory holds the graph, `export.json` (task, sequence length, batch size, which axes
are dynamic, input and output names and shapes, labels, tokenizer casing, the fusions applied),
`config.json`, `vocab.txt` and `manifest.json`. Inputs are int64 `input_ids`, `token_type_ids`,
`attention_mask` of shape [batch, seq]; outputs are `logits` ([batch, labels] for classification and
regression, [batch, seq, labels] for token classification) or `start_logits` + `end_logits`
([batch, seq], question answering). The batch axis is static (--batch-size) or dynamic
(--dynamic-batch); the sequence axis is static (--seq-length) or, with --dynamic-seq, any length up to
--seq-length. `ExportedModel.run` takes any number of rows of any length up to --seq-length either way.

ONNX exports are optimised for ONNX Runtime by default (`onnx_optimize`): the model is traced in the
dense form ONNX Runtime's transformer optimizer fuses (one Attention kernel per layer, residual +
LayerNorm as SkipLayerNormalization, bias + GELU as BiasGelu), and the fused operator counts go to
export.json. --no-optimize (and .pt2) trace the model itself with `static_graph` set (dense attention
with the mask, no data-dependent packing or checks). Either way exported outputs equal the PyTorch
model's at every position.

Parity is checked on random inputs (max |diff| of the outputs). With labelled task data
(`eval_data`), the exported graph, and the INT8 one when quantising, also predict it and are scored
with the task's official metric, so the cost of quantisation is stated as a metric difference.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from bert_core.errors import BertPipelineError
from bert_core.finetune.config import SquadOptions
from bert_core.io import manifest, storage
from bert_core.metrics.scoring import score_predictions
from bert_core.model.modeling import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertPreTrainedModel,
)
from bert_core.options import option

log = logging.getLogger(__name__)

TASKS = ("classification", "regression", "question_answering", "token_classification")
# Tasks whose outputs have a sequence axis (axis 1): cut back when run() pads the sequence.
PER_TOKEN_TASKS = ("question_answering", "token_classification")
INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]
# How --quantize int8 quantises (recorded in export.json): see _quantize.
QUANTIZATION = {"tool": "onnxruntime.quantization.quantize_dynamic", "weights": "int8, one scale per output channel",
                "activations": "uint8, scale computed per tensor at run time (dynamic)"}


@dataclass(kw_only=True)
class ExportConfig:
    """All `bert-pipeline export` settings (flags generated from these fields)."""

    task: str = option(help="which head to export: sequence classification, regression (one output), SQuAD QA "
                       "or token classification (NER: logits per token)", choices=TASKS)
    model: str | None = option(None, "fine-tuned model directory, s3:// URI or zoo name", metavar="DIR")
    output: str = option(help="export directory to create", metavar="DIR_OR_URI")
    seq_length: int = option(128, "static sequence length (with --dynamic-seq: the longest accepted)")
    batch_size: int = option(1, "static batch size", exclusive="batch")
    dynamic_batch: bool = option(False, "leave the batch dimension dynamic", exclusive="batch")
    dynamic_seq: bool = option(False, "leave the sequence dimension dynamic: the graph runs each batch at its own "
                               "length (up to --seq-length) instead of padded to --seq-length")
    format: str = option("onnx", "onnx (ONNX Runtime) or pt2 (torch.export program; torch only)",
                         choices=("onnx", "pt2"))
    optimize: bool = option(True, "onnx: do not fuse the graph with ONNX Runtime's transformer optimizer "
                            "(fused: one Attention kernel per layer, SkipLayerNormalization, BiasGelu; the "
                            "counts are recorded in export.json)", negate="--no-optimize")
    quantize: str | None = option(None, "also write an INT8 dynamically quantised ONNX graph (ONNX Runtime dynamic "
                                  "quantisation of the fused graph, per-channel weight scales); with --eval-data, its metric is reported next "
                                  "to the fp32 graph's, with the difference", choices=("int8",))
    # Labelled data to score the fp32 and INT8 graphs on: a GLUE/XNLI-style TSV (eval_task names the
    # task) for classification/regression, a SQuAD JSON file (v1.1 or v2.0) for question answering.
    eval_data: str | None = option(None, "labelled data to score the exported graph(s) on with the task's official "
                                   "metric (reported in export.json, the manifest and on stdout): a GLUE/XNLI-style "
                                   "TSV with labels (dev set; name the task with --eval-task) or a SQuAD v1.1/v2.0 "
                                   "JSON file for question answering", metavar="FILE")
    eval_task: str | None = option(None, "the GLUE/XNLI task of --eval-data (e.g. SST-2, MRPC, STS-B, XNLI); the "
                                   "model's labels must be that task's", metavar="TASK")
    num_labels: int | None = option(None, "classification: number of labels when the model directory does not say "
                                    "(a pretrained encoder without a fine-tuned head)")
    random_weights: bool = option(False, "export a randomly initialised model (no --model): for testing a "
                                  "deployment only")
    model_config: str | None = option(None, "architecture for --random-weights (zoo name or config.json)",
                                      metavar="NAME_OR_JSON", default_help="bert_12_768_12")
    overwrite: bool = option(False, "replace an existing export directory")


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


class _Graph(torch.nn.Module):
    """Positional inputs and plain tensor outputs, which is what exporters and runtimes want."""

    def __init__(self, model: BertPreTrainedModel, task: str):
        super().__init__()
        self.model, self.task = model, task

    def forward(self, input_ids, token_type_ids, attention_mask):
        out = self.model(input_ids, token_type_ids, attention_mask)
        if self.task == "question_answering":
            return out.start_logits, out.end_logits
        return out.logits


def output_names(task: str) -> list[str]:
    return ["start_logits", "end_logits"] if task == "question_answering" else ["logits"]


def output_shapes(task: str, seq: int | str, labels: int) -> dict[str, list]:
    if task == "question_answering":
        return {"start_logits": ["batch", seq], "end_logits": ["batch", seq]}
    if task == "token_classification":
        return {"logits": ["batch", seq, labels]}
    return {"logits": ["batch", labels]}


_MODEL_CLASSES = {"question_answering": BertForQuestionAnswering, "token_classification": BertForTokenClassification}


def _load_model(cfg: ExportConfig) -> BertPreTrainedModel:
    cls = _MODEL_CLASSES.get(cfg.task, BertForSequenceClassification)
    overrides = {}
    if cfg.task == "regression":
        overrides["num_labels"] = 1
    elif cfg.num_labels is not None and cfg.task in ("classification", "token_classification"):
        overrides["num_labels"] = cfg.num_labels
    if cfg.model is not None:
        model = cls.from_pretrained(cfg.model, **overrides)
        if model.load_report.newly_initialized:
            log.warning("exporting with newly initialised (untrained) weights: %s", model.load_report.newly_initialized)
        return model
    if not cfg.random_weights:
        raise BertPipelineError(
            "no --model given: this would export a randomly initialised, untrained model, which is only "
            "useful to test a deployment. Pass --model DIR to export trained weights, or --random-weights "
            "(with --model-config NAME|CONFIG_JSON) to export random weights on purpose")
    from bert_core.model.config import BertConfig
    from bert_core.model.zoo import architecture_config

    name = cfg.model_config or "bert_12_768_12"
    config = BertConfig.from_json_file(name) if name.endswith(".json") else architecture_config(name)
    model = cls(config.replace(**overrides))
    model.vocab_file = None
    return model


def export(cfg: ExportConfig) -> dict:
    """Export; return the manifest (with `evaluation`, scored by the official-equivalent scorers, when
    `eval_data` is given)."""
    if cfg.task not in TASKS:
        raise BertPipelineError(f"unknown task {cfg.task!r}; export supports {', '.join(TASKS)}")
    if cfg.format not in ("onnx", "pt2"):
        raise BertPipelineError(f"--format must be onnx or pt2, not {cfg.format!r}")
    if cfg.quantize not in (None, "int8"):
        raise BertPipelineError(f"--quantize supports int8 only, not {cfg.quantize!r}")
    if cfg.quantize and cfg.format != "onnx":
        raise BertPipelineError("--quantize int8 needs --format onnx (ONNX Runtime dynamic quantisation)")
    eval_task = _check_eval_data(cfg)
    started = manifest.now()
    model = _load_model(cfg).eval()
    if not 2 <= cfg.seq_length <= model.config.max_position_embeddings:
        raise BertPipelineError(f"--seq-length must be in [2, {model.config.max_position_embeddings}]")
    if eval_task is not None:
        _check_labels(eval_task, _labels(model))
    model.bert.static_graph = True
    graph = _Graph(model, cfg.task).eval()  # the reference outputs, and the graph traced without --optimize
    optimized = cfg.optimize and cfg.format == "onnx"
    batch = max(cfg.batch_size, 2) if cfg.dynamic_batch else cfg.batch_size
    example = _example_inputs(batch, cfg.seq_length, model.config.vocab_size)
    inputs = {} if cfg.eval_data is None else {cfg.eval_data: manifest.sha256_file(cfg.eval_data)}
    with storage.atomic_output_dir(cfg.output, overwrite=cfg.overwrite) as tmp:
        if optimized:
            from bert_core.deploy import onnx_optimize

            _write_graph(onnx_optimize.FusableGraph(model, cfg.task).eval(), example, cfg, tmp, name="unfused.onnx")
            optimization = onnx_optimize.optimize(tmp / "unfused.onnx", tmp / "model.onnx", model.config)
            (tmp / "unfused.onnx").unlink()
            files = ["model.onnx"]
        else:
            files = _write_graph(graph, example, cfg, tmp)
            optimization = None
        if cfg.quantize:
            files.append(_quantize(tmp / "model.onnx", tmp / "model.int8.onnx"))
        model.config.save(tmp / "config.json")
        files.append("config.json")
        vocab = getattr(model, "vocab_file", None)
        if vocab:
            shutil.copyfile(vocab, tmp / "vocab.txt")
            files.append("vocab.txt")
        seq_axis = "seq" if cfg.dynamic_seq else cfg.seq_length
        meta = {
            "task": cfg.task, "format": cfg.format, "seq_length": cfg.seq_length,
            "batch_size": "dynamic" if cfg.dynamic_batch else cfg.batch_size,
            "dynamic_seq": cfg.dynamic_seq,
            "inputs": {name: {"dtype": "int64", "shape": ["batch", seq_axis]} for name in INPUT_NAMES},
            "outputs": output_names(cfg.task),
            "output_shapes": output_shapes(cfg.task, seq_axis, model.config.num_labels),
            "labels": _labels(model), "do_lower_case": model.config.do_lower_case,
            "graph": "model.onnx" if cfg.format == "onnx" else "model.pt2",
            "optimization": optimization,
            "quantized_graph": "model.int8.onnx" if cfg.quantize else None,
            "quantization": QUANTIZATION if cfg.quantize else None,
            "random_weights": cfg.model is None,
        }
        metrics = _parity(graph, tmp, meta, model.config.vocab_size)
        if eval_task is not None:
            evaluation = evaluate_export(ExportedModel(tmp, meta), cfg.eval_data, eval_task)
            meta["evaluation"] = asdict(evaluation)
            metrics.update(_flat_metrics(evaluation))
        (tmp / "export.json").write_text(json.dumps(meta, indent=2) + "\n")
        files.append("export.json")
        result = manifest.build("export", asdict(cfg), inputs, tmp, files, started, metrics=metrics,
                                extra={"evaluation": meta["evaluation"]} if "evaluation" in meta else None)
        manifest.write(result, tmp)
    log.info("exported %s to %s (max |diff| vs PyTorch: %s; fused: %s)", cfg.task, cfg.output,
             {k: v for k, v in metrics.items() if k.endswith("max_abs_diff")},
             optimization["fused_operators"] if optimization else "no")
    if "evaluation" in result:
        log.info("%s", describe_evaluation(result["evaluation"]))
    return result


def _check_eval_data(cfg: ExportConfig) -> str | None:
    """The task to score `eval_data` as (None without eval data); a clear error when it cannot be."""
    if cfg.eval_data is None:
        if cfg.eval_task is not None:
            raise BertPipelineError("--eval-task needs --eval-data (the labelled file to score)")
        return None
    if cfg.task == "token_classification":
        raise BertPipelineError("--eval-data scores classification, regression and question-answering exports; "
                                "a token-classification export is checked against PyTorch only (parity)")
    if not Path(cfg.eval_data).is_file():
        raise BertPipelineError(f"--eval-data {cfg.eval_data}: no such file")
    from bert_core.tasks import catalog

    if cfg.task == "question_answering":
        if cfg.eval_task is not None and catalog.get(cfg.eval_task).kind != "squad":
            raise BertPipelineError(f"--eval-task {cfg.eval_task}: a question-answering export is scored on "
                                    "SQuAD data (a SQuAD JSON file; leave --eval-task out)")
        return "squad"
    if cfg.eval_task is None:
        raise BertPipelineError(f"--eval-data {cfg.eval_data}: name its task with --eval-task (e.g. SST-2, "
                                "MRPC, STS-B, XNLI) to read the TSV and score it")
    info = catalog.get(cfg.eval_task)
    if info.kind != cfg.task:
        raise BertPipelineError(f"--eval-task {cfg.eval_task} is a {info.kind} task, but this is a {cfg.task} "
                                "export")
    return info.name


def _check_labels(task: str, labels: list[str] | None) -> None:
    """Predictions are the model's label strings: they must be the task's, or scoring is meaningless."""
    from bert_core.tasks import glue

    if task == "squad" or labels is None:
        return
    expected = glue.GLUE_TASKS[glue.task_key(task)].labels or ()
    if sorted(labels) != sorted(expected):
        raise BertPipelineError(f"the model's labels {labels} are not those of {task} ({list(expected)}): "
                                "export a model fine-tuned on that task, or pass the matching --eval-task")


def evaluate_export(model: ExportedModel, data: str | Path, task: str) -> Evaluation:
    """Predict `data` with the fp32 graph and, if the export has one, the INT8 graph; score both."""
    from bert_core.tasks import catalog

    squad = None
    if task == "squad":
        from bert_core.tasks.squad import V2, read_squad

        version, _ = read_squad(data)
        squad = SquadOptions(version_2=version == V2)
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


def _flat_metrics(evaluation: Evaluation) -> dict[str, float]:
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


def predict_file(model: ExportedModel, data: str | Path, output: str | Path, task: str | None = None,
                 quantized: bool = False, squad: SquadOptions | None = None) -> tuple[int, list[str]]:
    """Run the export on task input and write predictions in `finetune`'s formats.

    GLUE-style TSV (`task` names it): the submission TSV at `output`. SQuAD JSON (QA exports):
    predictions.json, nbest_predictions.json (and null_odds.json for 2.0) in the directory `output`.
    Returns (number of examples, paths written).
    """
    from bert_core.finetune.tasks import features as feats
    from bert_core.model.tokenization import BertTokenizer

    meta = model.meta
    vocab = model.directory / "vocab.txt"
    if not vocab.is_file():
        raise BertPipelineError(f"{model.directory}: the export has no vocab.txt (exported without a model?)")
    tokenizer = BertTokenizer(vocab, do_lower_case=meta.get("do_lower_case") is not False)
    seq = meta["seq_length"]
    if meta["task"] == "question_answering":
        from bert_core.finetune.tasks.squad import make_features, postprocess
        from bert_core.tasks.squad import read_squad

        squad = squad or SquadOptions()
        _, examples = read_squad(data)
        features = make_features(examples, tokenizer, seq, squad.doc_stride, squad.max_query_length)
        arrays = feats.pad_squad_features(features, seq)
        start, end = model.run(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                               quantized=quantized)
        result = postprocess(examples, features, start, end, squad)
        written = feats.write_squad_predictions(output, result, squad.version_2)
        return len(examples), [str(Path(output) / name) for name in written]
    if not task:
        raise BertPipelineError("--task is needed to read a GLUE-style TSV (e.g. --task MRPC)")
    from bert_core.tasks.glue import read_examples

    examples = read_examples(task, data)
    arrays = feats.encode_examples(tokenizer, examples, seq)
    (logits,) = model.run(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                          quantized=quantized)
    if meta["task"] == "regression":
        predictions: list = [float(v) for v in logits[:, 0]]
    else:
        labels = meta["labels"]
        predictions = [labels[i] for i in np.argmax(logits, axis=-1)]
    feats.write_glue_submission(output, predictions)
    return len(examples), [str(output)]


def _labels(model: BertPreTrainedModel) -> list[str] | None:
    if isinstance(model, BertForQuestionAnswering) or (
            model.config.num_labels == 1 and not isinstance(model, BertForTokenClassification)):
        return None
    id2label = model.config.id2label or {}
    return [id2label.get(i, str(i)) for i in range(model.config.num_labels)]


def _example_inputs(batch: int, seq: int, vocab: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (batch, seq), generator=g)
    types = torch.zeros_like(ids)
    types[:, seq // 2:] = 1
    mask = torch.ones_like(ids)
    mask[-1, seq // 2 + 1:] = 0  # the traced graph must see a real mask
    return ids, types, mask


def _write_graph(graph: torch.nn.Module, example, cfg: ExportConfig, out: Path, name: str = "model.onnx"
                 ) -> list[str]:
    axes: dict[int, torch.export.Dim] = {}
    if cfg.dynamic_batch:
        axes[0] = torch.export.Dim("batch", min=1, max=4096)
    if cfg.dynamic_seq:
        # Traced at --seq-length, so nothing is specialised to a shorter length; torch.export needs a
        # minimum of 2 (a length-1 dimension is specialised), a [CLS] ... [SEP] input has at least 2 tokens.
        axes[1] = torch.export.Dim("seq", min=2, max=cfg.seq_length)
    dynamic = {input_name: dict(axes) for input_name in INPUT_NAMES} if axes else None
    if cfg.format == "pt2":
        program = torch.export.export(graph, example, dynamic_shapes=dynamic)
        torch.export.save(program, str(out / "model.pt2"))
        return ["model.pt2"]
    torch.onnx.export(graph, example, str(out / name), input_names=INPUT_NAMES,
                      output_names=output_names(cfg.task), dynamo=True, dynamic_shapes=dynamic,
                      external_data=False, verbose=False)
    return [name]


def _quantize(src: Path, dst: Path) -> str:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The dynamo exporter stores intermediate shapes (value_info) that the quantizer's own shape
    # inference then contradicts; without them it infers every shape afresh and consistently.
    graph = onnx.load(str(src))
    del graph.graph.value_info[:]
    plain = dst.with_name(".unannotated.onnx")
    onnx.save(graph, str(plain))
    # The quantizer logs a line per tensor it leaves alone through the root logger, at INFO.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        # Per-channel weight scales (one per output column): on SST-2 dev (fine-tuned MiniLM) the INT8
        # graph's accuracy stayed that of the fp32 graph, where one scale per weight matrix lost 1-2
        # points; same speed (docs/benchmarks-serving.md). Shape inference knows no types past ONNX
        # Runtime's fused (contrib) operators: float is theirs.
        quantize_dynamic(str(plain), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        root.setLevel(level)
        plain.unlink(missing_ok=True)
    return dst.name


def _parity(graph: torch.nn.Module, out: Path, meta: dict, vocab: int) -> dict[str, float]:
    """Max |exported - PyTorch| on fresh inputs (other values than the trace saw), at the full sequence
    length and at a shorter one (run at its own length by a --dynamic-seq graph, padded by `run`
    otherwise), for the fp32 graph and the INT8 one, through `ExportedModel.run` as callers use it.
    Per-token outputs are compared where the mask attends (what `run` computes for every export)."""
    batch = 3 if meta["batch_size"] == "dynamic" else meta["batch_size"]
    full = meta["seq_length"]
    g = torch.Generator().manual_seed(1)
    cases = []
    for length in sorted({full, max(2, full // 2 + 1)}, reverse=True):
        ids = torch.randint(5, vocab, (batch, length), generator=g)
        types = torch.zeros_like(ids)
        types[:, length // 2:] = 1
        mask = torch.ones_like(ids)
        mask[0, 3:] = 0
        with torch.no_grad():
            ref = graph(ids, types, mask)
        cases.append(((ids.numpy(), types.numpy(), mask.numpy()),
                      [ref] if isinstance(ref, torch.Tensor) else list(ref)))
    runner = ExportedModel(out, meta)
    result = {}
    for key, quantized in (("max_abs_diff", False), ("int8_max_abs_diff", True)):
        if quantized and not meta["quantized_graph"]:
            continue
        diffs = []
        for arrays, ref in cases:
            got = runner.run(*arrays, quantized=quantized)
            where = arrays[2] != 0 if meta["task"] in PER_TOKEN_TASKS else slice(None)
            diffs += [np.abs(a - r.numpy())[where].max() for a, r in zip(got, ref, strict=True)]
        result[key] = float(max(diffs))
    return result


def _row_lengths(mask: np.ndarray) -> np.ndarray:
    """Each row's length up to its last attended position (0 for a row with no attended position)."""
    attended = mask != 0
    return np.where(attended.any(1), mask.shape[1] - np.argmax(attended[:, ::-1], axis=1), 0)


_MAX_GROUP_ROWS = 64


def _length_groups(lengths: np.ndarray, waste: float = 0.1, max_rows: int = _MAX_GROUP_ROWS) -> list[np.ndarray]:
    """Row indices in groups of similar length: sorted by length, a group closes when the next row would
    make its padded size more than `waste` over its real tokens, or at max_rows rows. (On SST-2 dev,
    batches of 32 in file order are 49% padding; grouped, ONNX Runtime served them 1.8x faster.)"""
    order = np.argsort(lengths, kind="stable")
    groups, current, real = [], [], 0
    for i in order:
        size = max(int(lengths[i]), 1)
        if current and (size * (len(current) + 1) > (1 + waste) * (real + size) or len(current) == max_rows):
            groups.append(np.array(current))
            current, real = [], 0
        current.append(i)
        real += size
    groups.append(np.array(current))
    return groups


def _groups_balance(costs: list[int], workers: int, slack: float = 0.25) -> bool:
    """Whether length groups of these costs (rows x length) keep `workers` single-threaded runners busy: the
    longest runner, groups dealt costliest first to the least loaded, within `slack` of an even share.
    (Groups are never split to make them balance: an INT8 graph quantises each group's activations as a
    whole, so its answers would then depend on the machine's core count.)"""
    if workers < 2 or len(costs) < 2:
        return False
    loads = [0] * workers
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads) <= (1 + slack) * sum(costs) / workers


def _physical_cores() -> int:
    """Physical cores this process may use: ONNX Runtime's own default for its intra-op threads."""
    import psutil

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(usable, psutil.cpu_count(logical=False) or usable))


def session_options(threads: int | None = None, spin: bool = True):
    """ONNX Runtime session options for an export's graph: `threads` intra-op threads (None: its own choice),
    idle threads spin-waiting (its default) or sleeping (spin=False); warnings only."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class ExportedModel:
    """Runs an export directory's graph: ONNX Runtime for .onnx, torch for .pt2."""

    def __init__(self, directory: str | Path, meta: dict | None = None, threads: int | None = None,
                 spin: bool = True):
        """threads: the cores a call may use (default: one per physical core the process may run on, as
        `taskset` or a cgroup's cpuset leaves them). A call runs on ONNX Runtime with that many intra-op
        threads. A batch whose rows run in several length groups (see run()) runs them side by side instead,
        one per thread on a single-threaded session of the same graph, when they keep every thread busy: small
        groups split badly over intra-op threads (2 cores, batch 32, SST-2 dev: INT8 1.84x our eager PyTorch
        instead of 1.46x; docs/benchmarks-serving.md). At most `threads` threads compute at any time.
        spin=False: idle ONNX Runtime threads sleep instead of spin-waiting for the next call (its default
        spins, which holds the cores a while after each call: lower latency for a server, CPU taken from
        anything else)."""
        if threads is not None and threads < 1:
            raise BertPipelineError(f"threads: expected a number of threads >= 1 (or None for one per core), got {threads}")
        self.directory = Path(directory)
        self.threads = threads
        self.spin = spin
        self.workers = threads or _physical_cores()
        if meta is None:
            try:
                meta = json.loads((self.directory / "export.json").read_text())
            except FileNotFoundError:
                raise BertPipelineError(f"{directory}: not an export directory (no export.json)") from None
        self.meta = meta
        self._sessions: dict[tuple[bool, bool], object] = {}
        self._lock = threading.Lock()

    def _session(self, quantized: bool, single_thread: bool = False):
        """The graph's session (made on first use): `threads` intra-op threads, or one (single_thread)."""
        key = (quantized, single_thread)
        with self._lock:  # one session per key, also when length groups ask for it concurrently
            if key not in self._sessions:
                self._sessions[key] = self._load(quantized, 1 if single_thread else self.workers)
        return self._sessions[key]

    def _load(self, quantized: bool, threads: int | None):
        if self.meta["format"] == "pt2":
            return torch.export.load(str(self.directory / self.meta["graph"])).module()
        import onnxruntime as ort

        name = self.meta["quantized_graph"] if quantized else self.meta["graph"]
        if name is None:
            raise BertPipelineError(f"{self.directory}: this export has no quantised graph")
        return ort.InferenceSession(str(self.directory / name), session_options(threads, self.spin),
                                    providers=["CPUExecutionProvider"])

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray,
            quantized: bool = False, group_by_length: bool = True) -> list[np.ndarray]:
        """The graph's outputs (export.json's `outputs`, in order) for [batch, seq] inputs: any number of
        rows (split/padded to a static batch size as needed) of any length up to the export's seq_length
        (a --dynamic-seq graph runs at that length; a static one gets padding columns, mask 0, and its
        per-token outputs are cut back to the length given).

        With both axes dynamic (--dynamic-batch --dynamic-seq), rows are run in groups of similar length,
        each group cut to its longest row (up to the last position its mask attends to), so the padding of
        a batch costs nothing, as in the PyTorch model; per-token outputs past a row's last attended
        position are then 0 (not computed). group_by_length=False runs the batch as given, in one call."""
        arrays = [np.asarray(a).astype(np.int64, copy=False) for a in (input_ids, token_type_ids, attention_mask)]
        if arrays[0].ndim != 2 or any(a.shape != arrays[0].shape for a in arrays):
            raise BertPipelineError("input_ids, token_type_ids and attention_mask must be [batch, seq] arrays of one "
                                    f"shape, got {[a.shape for a in arrays]}")
        n, length = arrays[0].shape
        limit = self.meta["seq_length"]
        if length > limit:
            raise BertPipelineError(f"sequence length {length} is over this export's seq_length {limit}: truncate "
                                    "the input or export with a larger --seq-length")
        per_token = self.meta["task"] in PER_TOKEN_TASKS
        if group_by_length and n and self.meta["batch_size"] == "dynamic" and self.meta.get("dynamic_seq"):
            return self._run_grouped(arrays, quantized, per_token)
        if length < limit and not self.meta.get("dynamic_seq"):
            arrays = [np.pad(a, ((0, 0), (0, limit - length))) for a in arrays]
        fixed = self.meta["batch_size"]
        chunk = n if fixed == "dynamic" else fixed
        outputs: list[list[np.ndarray]] = []
        for start in range(0, n, max(chunk, 1)):
            parts = [a[start:start + chunk] for a in arrays]
            real = len(parts[0])
            if fixed != "dynamic" and real < fixed:
                parts = [np.concatenate([p, np.repeat(p[-1:], fixed - real, axis=0)]) for p in parts]
            outputs.append([o[:real, :length] if per_token else o[:real] for o in self._forward(parts, quantized)])
        return [np.concatenate([o[i] for o in outputs]) for i in range(len(outputs[0]))]

    def _run_grouped(self, arrays: list[np.ndarray], quantized: bool, per_token: bool) -> list[np.ndarray]:
        n, length = arrays[0].shape
        lengths = _row_lengths(arrays[2])
        if n <= _MAX_GROUP_ROWS and lengths.min() == length:  # nothing to cut (e.g. one row): one call
            return self._forward(arrays, quantized)
        groups = _length_groups(lengths)
        cuts = [min(length, max(2, int(lengths[rows].max()))) for rows in groups]  # the graph's seq axis starts at 2
        costs = [len(rows) * cut for rows, cut in zip(groups, cuts)]
        concurrent = self.meta["format"] != "pt2" and _groups_balance(costs, self.workers)

        def forward(i: int) -> list[np.ndarray]:
            return self._forward([a[groups[i], :cuts[i]] for a in arrays], quantized, single_thread=concurrent)

        if concurrent:
            order = sorted(range(len(groups)), key=lambda i: -costs[i])  # costliest first: threads finish together
            with ThreadPoolExecutor(self.workers, thread_name_prefix="export-group") as pool:
                outs = dict(zip(order, pool.map(forward, order)))
        else:
            outs = {i: forward(i) for i in range(len(groups))}
        result: list[np.ndarray] = []
        for i, rows in enumerate(groups):
            cut, out = cuts[i], outs[i]
            if not result:
                result = [np.zeros((n, length, *o.shape[2:]) if per_token else (n, *o.shape[1:]), o.dtype)
                          for o in out]
            for full, part in zip(result, out):
                if per_token:
                    full[rows, :cut] = part
                else:
                    full[rows] = part
        return result

    def _forward(self, parts: list[np.ndarray], quantized: bool, single_thread: bool = False) -> list[np.ndarray]:
        session = self._session(quantized, single_thread)
        if self.meta["format"] == "pt2":
            with torch.no_grad():
                out = session(*(torch.from_numpy(p) for p in parts))
            out = [out] if isinstance(out, torch.Tensor) else list(out)
            return [o.numpy() for o in out]
        return session.run(None, dict(zip(INPUT_NAMES, parts)))
