"""`bert-pipeline predict`: answers of a model for its task.

Two inputs, two models:

- `--model DIR|models:/NAME@ALIAS REQUESTS --output ANSWERS.jsonl`: raw-text requests (JSON Lines, or a JSON
  list: one object per example with the task's fields, e.g. {"text": ...} or {"question": ..., "context": ...})
  answered exactly as the registered model answers them behind `mlflow models serve`: of a models:/ URI, its
  logged pyfunc loaded as the server loads it (the export's ONNX graph, INT8 when it serves that); with `--export
  DIR` as well, that export's graph does the arithmetic.
- `--export DIR INPUT --output ...`: a GLUE-style TSV or SQuAD JSON file through an export's graph, written in
  fine-tuning's prediction-file formats (submission TSV; predictions.json ...).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

from bert_pipeline.commands.config_flags import add_config_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="INPUT", help="with --model: requests as JSON Lines (one object per line) "
                        "or a JSON list of objects; with --export only: a GLUE-style TSV (classification/"
                        "regression) or SQuAD JSON (QA)")
    parser.add_argument("--model", metavar="DIR_OR_URI",
                        help="a fine-tuned model (finetune's output directory or its model/), a pretrained one "
                        "(answers sentence embeddings), or an MLflow model URI such as models:/bert-sst-2@champion")
    parser.add_argument("--export", metavar="DIR", help="directory written by `bert-pipeline export`: run its graph")
    parser.add_argument("--task", help="--export with a TSV: the GLUE/XNLI task name (e.g. MRPC, SST-2, STS-B, XNLI)")
    parser.add_argument("--output", required=True, metavar="PATH",
                        help="--model: the JSON Lines file of answers, one per request, in order; --export only: "
                        "GLUE's submission TSV, or the directory for SQuAD's predictions.json, "
                        "nbest_predictions.json (and null_odds.json with --version-2)")
    parser.add_argument("--batch-size", type=int, default=32, help="--model: requests per forward pass (default 32)")
    parser.add_argument("--quantized", action="store_true", help="--export only: run the INT8 graph of the export")
    from bert_core.finetune.config import SquadOptions

    # With --model, the SQuAD settings are the ones the model was fine-tuned and scored with (its task.json); with
    # --export only, the export's record of them, and a flag given a value other than its default wins.
    # Only the flags given land in the namespace, so "--doc-stride 128" over an export recorded with 64 is told
    # apart from no flag at all (the export's record, else SquadOptions' defaults, fill the rest).
    add_config_arguments(parser, SquadOptions, given_only=True)


def read_requests(path: str) -> list[dict]:
    """Request records from a JSON Lines file or a JSON list; errors name the file and line."""
    return read_numbered_requests(path)[0]


def read_numbered_requests(path: str) -> tuple[list[dict], list[str]]:
    """`read_requests`, and where each record is in the file (`PATH:LINE` of JSON Lines, `PATH: item N` of a
    JSON list), for the errors about a request: the model numbers its rows from 0, skipping blank lines."""
    from bert_core.errors import BertPipelineError

    text = Path(path).read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BertPipelineError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        lines = [(i + 1, r) for i, r in enumerate(records)]
        where = "item"
    else:
        lines = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                lines.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise BertPipelineError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
        where = "line"
    for number, record in lines:
        if not isinstance(record, dict):
            raise BertPipelineError(f"{path}: {where} {number}: expected an object with the task's fields, got "
                                    f"{type(record).__name__}")
    places = [f"{path}:{n}" if where == "line" else f"{path}: item {n}" for n, _ in lines]
    return [r for _, r in lines], places


@contextlib.contextmanager
def _predictor(model: str, batch_size: int, export: str | None) -> Iterator:
    """The TaskPredictor for --model: of an MLflow model URI, the one its server runs (its logged graph, INT8
    when it serves that; a download removed when the command is done) unless --export names a graph; of a
    directory, an s3:// URI or a zoo name, that model (on --export's graph when given)."""
    from bert_core.deploy.serving import TaskPredictor

    if model.startswith(("models:/", "runs:/")):
        from operators import registry

        if export is None:
            with registry.served_predictor(model, batch_size) as predictor:
                yield predictor
            return
        with registry.downloaded_model_dir(model) as local:
            yield TaskPredictor.from_model_dir(local, batch_size=batch_size, export_dir=export)
        return
    if not Path(model).is_dir():
        from bert_core.model.weights import resolve_model_dir

        model = str(resolve_model_dir(model))
    yield TaskPredictor.from_model_dir(model, batch_size=batch_size, export_dir=export)


def export_options(exported, given: dict):
    """The SQuAD settings the export's model was fine-tuned with (export.json), with the flags `given` on the command
    line (field -> value) over them: an export of a 2.0 model predicts "" without --version-2 being repeated, and
    `--doc-stride 128` over an export recorded with 64 is 128, although 128 is the default."""
    from bert_core.deploy.batch_predict import export_squad_options

    return dataclasses.replace(export_squad_options(exported), **given)


def run(args: argparse.Namespace) -> int:
    from bert_core.errors import BertPipelineError

    if args.model is None and args.export is None:
        raise BertPipelineError("give --model (raw-text requests) or --export (task files through an export)")
    if args.model is not None:
        from bert_core.deploy.serving import InvalidRequest

        requests, places = read_numbered_requests(args.input)
        with _predictor(args.model, args.batch_size, args.export) as predictor:
            try:
                answers = predictor.predict(requests)
            except InvalidRequest as exc:
                # The model's row 1 is the second request, not line 1 of the file: name the line instead.
                if exc.row is not None and exc.row < len(places):
                    raise BertPipelineError(f"{places[exc.row]}: {exc.detail}") from None
                raise BertPipelineError(f"{args.input}: {exc}") from None
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        tmp.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers), encoding="utf-8")
        os.replace(tmp, out)
        print(f"wrote {len(answers)} answer{'' if len(answers) == 1 else 's'} to {out}")
        return 0
    from bert_core.deploy.batch_predict import predict_file
    from bert_core.deploy.runtime import ExportedModel
    from bert_core.finetune.config import SquadOptions

    exported = ExportedModel(args.export)
    squad = export_options(exported, {f.name: getattr(args, f.name) for f in dataclasses.fields(SquadOptions)
                                      if hasattr(args, f.name)})
    examples, written = predict_file(exported, args.input, args.output, task=args.task, quantized=args.quantized,
                                     squad=squad)
    print(f"wrote {', '.join(written)} for {examples} examples")
    return 0
