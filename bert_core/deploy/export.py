"""Export a task model to a graph that runs without this package: ONNX (ONNX Runtime) or a
torch.export program (.pt2, torch alone), plus everything needed to feed it.

The export directory holds the graph, `export.json` (task, sequence length, batch size, which axes
are dynamic, input and output names and shapes, labels, tokenizer casing, the fusions applied),
`config.json`, `vocab.txt` and `manifest.json`. Inputs are int64 `input_ids`, `token_type_ids`,
`attention_mask` of shape [batch, seq]; outputs are `logits` ([batch, labels] for classification and
regression, [batch, seq, labels] for token classification) or `start_logits` + `end_logits`
([batch, seq], question answering). The batch axis is static (--batch-size) or dynamic
(--dynamic-batch); the sequence axis is static (--max-seq-length) or, with --dynamic-seq, any length up to
--max-seq-length. `bert_core.deploy.runtime.ExportedModel` runs the graph on any number of rows of any length
up to --max-seq-length either way.

ONNX exports are optimised for ONNX Runtime by default (`onnx_optimize`): the model is traced in the
dense form ONNX Runtime's transformer optimizer fuses (one Attention kernel per layer, residual +
LayerNorm as SkipLayerNormalization, bias + GELU as BiasGelu), and the fused operator counts go to
export.json. --no-optimize (and .pt2) trace the model itself with `static_graph` set (dense attention
with the mask, no data-dependent packing or checks). Either way exported outputs equal the PyTorch
model's at every position.

Parity is checked on random inputs (max |diff| of the outputs). With labelled task data
(`eval_data`), the exported graph, and the INT8 one when quantising, also predict it and are scored
with the task's official metric (bert_core.deploy.export_evaluation), so the cost of quantisation is stated
as a metric difference.
"""

from __future__ import annotations

import json
import logging
import shutil
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bert_core.deploy.export_evaluation import describe_evaluation, evaluate_export, flat_metrics
from bert_core.deploy.runtime import INPUT_NAMES, PER_TOKEN_TASKS, ExportedModel
from bert_core.errors import BertPipelineError
from bert_core.io import manifest, storage
from bert_core.model.modeling import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertPreTrainedModel,
)
from bert_core.options import option

log = logging.getLogger(__name__)

TASKS = ("classification", "regression", "question_answering", "token_classification")
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
    max_seq_length: int = option(128, "static sequence length (with --dynamic-seq: the longest accepted)",
                                 deprecated=("--seq-length",))
    batch_size: int = option(1, "static batch size", exclusive="batch")
    dynamic_batch: bool = option(False, "leave the batch dimension dynamic", exclusive="batch")
    dynamic_seq: bool = option(False, "leave the sequence dimension dynamic: the graph runs each batch at its own "
                               "length (up to --max-seq-length) instead of padded to --max-seq-length")
    format: str = option("onnx", "onnx (ONNX Runtime) or pt2 (torch.export program; torch only)",
                         choices=("onnx", "pt2"))
    optimize: bool = option(True, "onnx: do not fuse the graph with ONNX Runtime's transformer optimizer "
                            "(fused: one Attention kernel per layer, SkipLayerNormalization, BiasGelu; the "
                            "counts are recorded in export.json)", negate="--no-optimize",
                            switch_help="onnx: fuse the graph with ONNX Runtime's transformer optimizer")
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


def _card(cfg: ExportConfig):
    """The exported model's task card (how it was fine-tuned and is served); None where there is none. An s3://
    model's is read from the local copy _load_model made."""
    if cfg.model is None:
        return None
    from bert_core.finetune.task_card import read_card
    from bert_core.model.weights import resolve_model_dir

    return read_card(resolve_model_dir(cfg.model))


def _squad_settings(card, task: str) -> dict | None:
    """A question-answering export's SquadOptions fields from its model's task card; None where there is none."""
    return dict(card.squad) if task == "question_answering" and card is not None and card.kind == "squad" else None


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
    if not 2 <= cfg.max_seq_length <= model.config.max_position_embeddings:
        raise BertPipelineError(f"--max-seq-length must be in [2, {model.config.max_position_embeddings}]")
    if eval_task is not None:
        _check_labels(eval_task, _labels(model))
    model.bert.static_graph = True
    graph = _Graph(model, cfg.task).eval()  # the reference outputs, and the graph traced without --optimize
    optimized = cfg.optimize and cfg.format == "onnx"
    batch = max(cfg.batch_size, 2) if cfg.dynamic_batch else cfg.batch_size
    example = _example_inputs(batch, cfg.max_seq_length, model.config.vocab_size)
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
        seq_axis = "seq" if cfg.dynamic_seq else cfg.max_seq_length
        card = _card(cfg)
        meta = {
            "task": cfg.task, "format": cfg.format, "max_seq_length": cfg.max_seq_length,
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
            # The SQuAD settings the model was fine-tuned and scored with (its task.json): how `predict --export`
            # and this export's own evaluation split contexts and decide "no answer".
            "squad": _squad_settings(card, cfg.task),
            # The length the model was fine-tuned and scored at (its task.json), which serving cuts requests (and
            # windows SQuAD contexts) at: `predict --export` and this export's evaluation cut there too, not at
            # the longest length the graph accepts (an MRPC model of length 64 was evaluated at 128, F1 0.8331
            # against its served 0.8318). None without a task card.
            "model_max_seq_length": card.max_seq_length if card is not None else None,
        }
        metrics = _parity(graph, tmp, meta, model.config.vocab_size)
        if eval_task is not None:
            evaluation = evaluate_export(ExportedModel(tmp, meta), cfg.eval_data, eval_task)
            meta["evaluation"] = asdict(evaluation)
            metrics.update(flat_metrics(evaluation))
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
        # Traced at --max-seq-length, so nothing is specialised to a shorter length; torch.export needs a
        # minimum of 2 (a length-1 dimension is specialised), a [CLS] ... [SEP] input has at least 2 tokens.
        axes[1] = torch.export.Dim("seq", min=2, max=cfg.max_seq_length)
    dynamic = {input_name: dict(axes) for input_name in INPUT_NAMES} if axes else None
    with warnings.catch_warnings():
        # Both say nothing a user can act on: the three inputs share their batch and seq axes on purpose (the
        # exporter warns once per input after the first that the shared name "will not be used"), and torch's
        # own pytree code calls its deprecated LeafSpec check.
        warnings.filterwarnings("ignore", message=r"# The axis name: .* shares the same shape constraints",
                                category=UserWarning)
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
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
    full = meta["max_seq_length"]
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
