"""Export a task model to a static-shape graph that runs without this package: ONNX (ONNX Runtime)
or a torch.export program (.pt2, torch alone), plus everything needed to feed it.

The export directory holds the graph, `export.json` (task, sequence length, batch size, input and
output names, labels, tokenizer casing), `config.json`, `vocab.txt` and `manifest.json`. Inputs are
int64 `input_ids`, `token_type_ids`, `attention_mask` of shape [batch, seq_length]; outputs are
`logits` (classification/regression) or `start_logits` + `end_logits` (question answering).
The model is traced with `static_graph` set (dense attention with the mask, no data-dependent
packing or checks), so exported outputs equal the PyTorch model's at every position.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bert_core import manifest, storage
from bert_core.errors import BertPipelineError
from bert_core.modeling import BertForQuestionAnswering, BertForSequenceClassification, BertPreTrainedModel

log = logging.getLogger(__name__)

TASKS = ("classification", "regression", "question_answering")
INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]


@dataclass
class ExportConfig:
    task: str
    output: str
    model: str | None = None  # model dir / URI / zoo name; None only with random_weights
    model_config: str | None = None  # architecture for random weights (zoo name or config.json)
    random_weights: bool = False
    seq_length: int = 128
    batch_size: int = 1
    dynamic_batch: bool = False
    format: str = "onnx"
    quantize: str | None = None  # "int8": ONNX Runtime dynamic quantisation
    num_labels: int | None = None
    overwrite: bool = False


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


def _load_model(cfg: ExportConfig) -> BertPreTrainedModel:
    cls = BertForQuestionAnswering if cfg.task == "question_answering" else BertForSequenceClassification
    overrides = {}
    if cfg.task == "regression":
        overrides["num_labels"] = 1
    elif cfg.num_labels is not None and cfg.task == "classification":
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
    from bert_core.config import BertConfig
    from bert_core.zoo import architecture_config

    name = cfg.model_config or "bert_12_768_12"
    config = BertConfig.from_json_file(name) if name.endswith(".json") else architecture_config(name)
    model = cls(config.replace(**overrides))
    model.vocab_file = None
    return model


def export(cfg: ExportConfig) -> dict:
    if cfg.task not in TASKS:
        raise BertPipelineError(f"unknown task {cfg.task!r}; export supports {', '.join(TASKS)}")
    if cfg.format not in ("onnx", "pt2"):
        raise BertPipelineError(f"--format must be onnx or pt2, not {cfg.format!r}")
    if cfg.quantize not in (None, "int8"):
        raise BertPipelineError(f"--quantize supports int8 only, not {cfg.quantize!r}")
    if cfg.quantize and cfg.format != "onnx":
        raise BertPipelineError("--quantize int8 needs --format onnx (ONNX Runtime dynamic quantisation)")
    started = manifest.now()
    model = _load_model(cfg).eval()
    if not 2 <= cfg.seq_length <= model.config.max_position_embeddings:
        raise BertPipelineError(f"--seq-length must be in [2, {model.config.max_position_embeddings}]")
    model.bert.static_graph = True
    graph = _Graph(model, cfg.task).eval()
    batch = max(cfg.batch_size, 2) if cfg.dynamic_batch else cfg.batch_size
    example = _example_inputs(batch, cfg.seq_length, model.config.vocab_size)
    with storage.atomic_output_dir(cfg.output, overwrite=cfg.overwrite) as tmp:
        files = _write_graph(graph, example, cfg, tmp)
        if cfg.quantize:
            files.append(_quantize(tmp / "model.onnx", tmp / "model.int8.onnx"))
        model.config.save(tmp / "config.json")
        files.append("config.json")
        vocab = getattr(model, "vocab_file", None)
        if vocab:
            shutil.copyfile(vocab, tmp / "vocab.txt")
            files.append("vocab.txt")
        meta = {
            "task": cfg.task, "format": cfg.format, "seq_length": cfg.seq_length,
            "batch_size": "dynamic" if cfg.dynamic_batch else cfg.batch_size,
            "inputs": {name: {"dtype": "int64", "shape": ["batch", cfg.seq_length]} for name in INPUT_NAMES},
            "outputs": output_names(cfg.task),
            "labels": _labels(model), "do_lower_case": model.config.do_lower_case,
            "graph": "model.onnx" if cfg.format == "onnx" else "model.pt2",
            "quantized_graph": "model.int8.onnx" if cfg.quantize else None,
            "random_weights": cfg.model is None,
        }
        (tmp / "export.json").write_text(json.dumps(meta, indent=2) + "\n")
        files.append("export.json")
        parity = _parity(graph, tmp, meta, model.config.vocab_size)
        result = manifest.build("export", asdict(cfg), {}, tmp, files, started, metrics=parity)
        manifest.write(result, tmp)
    log.info("exported %s to %s (max |diff| vs PyTorch: %s)", cfg.task, cfg.output, parity)
    return result


def _labels(model: BertPreTrainedModel) -> list[str] | None:
    if isinstance(model, BertForQuestionAnswering) or model.config.num_labels == 1:
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


def _write_graph(graph: torch.nn.Module, example, cfg: ExportConfig, out: Path) -> list[str]:
    dynamic = None
    if cfg.dynamic_batch:
        batch_dim = torch.export.Dim("batch", min=1, max=4096)
        dynamic = {name: {0: batch_dim} for name in INPUT_NAMES}
    if cfg.format == "pt2":
        program = torch.export.export(graph, example, dynamic_shapes=dynamic)
        torch.export.save(program, str(out / "model.pt2"))
        return ["model.pt2"]
    torch.onnx.export(graph, example, str(out / "model.onnx"), input_names=INPUT_NAMES,
                      output_names=output_names(cfg.task), dynamo=True, dynamic_shapes=dynamic,
                      external_data=False, verbose=False)
    return ["model.onnx"]


def _quantize(src: Path, dst: Path) -> str:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The dynamo exporter stores intermediate shapes (value_info) that the quantizer's own shape
    # inference then contradicts; without them it infers every shape afresh and consistently.
    graph = onnx.load(str(src))
    del graph.graph.value_info[:]
    plain = dst.with_name(".unannotated.onnx")
    onnx.save(graph, str(plain))
    try:
        quantize_dynamic(str(plain), str(dst), weight_type=QuantType.QInt8)
    finally:
        plain.unlink(missing_ok=True)
    return dst.name


def _parity(graph: torch.nn.Module, out: Path, meta: dict, vocab: int) -> dict[str, float]:
    """Max |exported - PyTorch| on fresh inputs (other values than the trace saw)."""
    batch = 3 if meta["batch_size"] == "dynamic" else meta["batch_size"]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (batch, meta["seq_length"]), generator=g)
    types = torch.zeros_like(ids)
    mask = torch.ones_like(ids)
    mask[0, 3:] = 0
    with torch.no_grad():
        ref = graph(ids, types, mask)
    ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    runner = ExportedModel(out, meta)
    result = {}
    for key, quantized in (("max_abs_diff", False), ("int8_max_abs_diff", True)):
        if quantized and not meta["quantized_graph"]:
            continue
        got = runner.run(ids.numpy(), types.numpy(), mask.numpy(), quantized=quantized)
        result[key] = float(max(np.abs(a - r.numpy()).max() for a, r in zip(got, ref)))
    return result


class ExportedModel:
    """Runs an export directory's graph: ONNX Runtime for .onnx, torch for .pt2."""

    def __init__(self, directory: str | Path, meta: dict | None = None):
        self.directory = Path(directory)
        if meta is None:
            try:
                meta = json.loads((self.directory / "export.json").read_text())
            except FileNotFoundError:
                raise BertPipelineError(f"{directory}: not an export directory (no export.json)") from None
        self.meta = meta
        self._sessions: dict[bool, object] = {}

    def _session(self, quantized: bool):
        if quantized not in self._sessions:
            if self.meta["format"] == "pt2":
                self._sessions[quantized] = torch.export.load(str(self.directory / self.meta["graph"])).module()
            else:
                import onnxruntime as ort

                name = self.meta["quantized_graph"] if quantized else self.meta["graph"]
                if name is None:
                    raise BertPipelineError(f"{self.directory}: this export has no quantised graph")
                options = ort.SessionOptions()
                options.log_severity_level = 3
                self._sessions[quantized] = ort.InferenceSession(str(self.directory / name), options,
                                                                 providers=["CPUExecutionProvider"])
        return self._sessions[quantized]

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray,
            quantized: bool = False) -> list[np.ndarray]:
        """Outputs for any number of rows: split/padded to the export's static batch size as needed."""
        fixed = self.meta["batch_size"]
        n = len(input_ids)
        chunk = n if fixed == "dynamic" else fixed
        outputs: list[list[np.ndarray]] = []
        for start in range(0, n, max(chunk, 1)):
            parts = [a[start:start + chunk].astype(np.int64) for a in (input_ids, token_type_ids, attention_mask)]
            real = len(parts[0])
            if fixed != "dynamic" and real < fixed:
                parts = [np.concatenate([p, np.repeat(p[-1:], fixed - real, axis=0)]) for p in parts]
            outputs.append([o[:real] for o in self._forward(parts, quantized)])
        return [np.concatenate([o[i] for o in outputs]) for i in range(len(outputs[0]))]

    def _forward(self, parts: list[np.ndarray], quantized: bool) -> list[np.ndarray]:
        session = self._session(quantized)
        if self.meta["format"] == "pt2":
            with torch.no_grad():
                out = session(*(torch.from_numpy(p) for p in parts))
            out = [out] if isinstance(out, torch.Tensor) else list(out)
            return [o.numpy() for o in out]
        return session.run(None, dict(zip(INPUT_NAMES, parts)))
