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
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bert_pipeline.commands.config_flags import HOME_MLFLOW, add_config_arguments

EPILOG = """\
requests and answers with --model (one JSON object per request; docs/serving.md):
  GLUE / XNLI classification  {"text": ...} (pair tasks: and "text_pair")  -> {"label", "probabilities"}
  STS-B                       {"text": ..., "text_pair": ...}              -> {"score"}
  SQuAD                       {"question": ..., "context": ...}            -> {"answer", "start", "end", "score"}
  NER                         {"text": ...}                                -> {"entities": [{"type", "text", "start", "end"}]}
  pretrained encoder          {"text": ...}                                -> {"embedding"}
The answers are those `mlflow models serve` gives for the same model. With --model, tokenization, truncation and
SQuAD's windows follow the settings the model was fine-tuned and scored with (its task.json): the SQuAD flags
apply to --export alone."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("input", metavar="INPUT", help="with --model: requests as JSON Lines (one object per line) "
                        "or a JSON list of objects, or the JSON body POSTed to `mlflow models serve` "
                        "({\"dataframe_records\": [...]}, dataframe_split, inputs, instances), UTF-8; '-' reads "
                        "stdin; with --export only: a GLUE-style TSV (classification/regression) or SQuAD JSON (QA)")
    parser.add_argument("--model", metavar="DIR_OR_URI",
                        help="a fine-tuned model (finetune's output directory or its model/), a pretrained one "
                        "(answers sentence embeddings), or an MLflow model URI such as models:/bert-sst-2@champion")
    parser.add_argument("--export", metavar="DIR", help="directory written by `bert-pipeline export`: run its graph")
    parser.add_argument("--task", help="--export with a TSV: the GLUE/XNLI task name (e.g. MRPC, SST-2, STS-B, XNLI)")
    parser.add_argument("--output", required=True, metavar="PATH",
                        help="--model: the JSON Lines file of answers, one per request, in order ('-': stdout); "
                        "--export only: GLUE's submission TSV, or the directory for SQuAD's predictions.json, "
                        "nbest_predictions.json (and null_odds.json with --version-2)")
    parser.add_argument("--batch-size", type=int, default=32, help="--model: requests per forward pass (default 32)")
    parser.add_argument("--quantized", action="store_true",
                        help="run the INT8 graph of the --export (alone, or under --model's tokenization)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help=f"--model models:/... or runs:/...: the MLflow store to load it from (default: "
                        f"{HOME_MLFLOW})")
    from bert_core.finetune.config import SquadOptions

    # With --model, the SQuAD settings are the ones the model was fine-tuned and scored with (its task.json): a flag
    # is refused there (run() says so); with --export only, the export's record of them, and a flag given a value
    # other than its default wins.
    # Only the flags given land in the namespace, so "--doc-stride 128" over an export recorded with 64 is told
    # apart from no flag at all (the export's record, else SquadOptions' defaults, fill the rest).
    add_config_arguments(parser, SquadOptions, given_only=True)


def read_requests(path: str) -> list[dict]:
    """Request records from a JSON Lines file or a JSON list; errors name the file and line."""
    return read_numbered_requests(path)[0]


def read_numbered_requests(path: str) -> tuple[list[dict], list[str]]:
    """`read_requests`, and where each record is in the file (`PATH:LINE` of JSON Lines, `PATH: item N` of a
    JSON list, `PATH: FORMAT row N` of a server request body), for the errors about a request: the model numbers
    its rows from 0, skipping blank lines."""
    from bert_core.errors import BertPipelineError

    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    if path == "-":
        path = "<stdin>"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A traceback before; JSON text is UTF-8 (RFC 8259), as the server requires of a request.
        line = data.count(b"\n", 0, exc.start) + 1
        raise BertPipelineError(f"{path}:{line}: not UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start}): "
                                "requests are JSON in UTF-8; convert the file, e.g. `iconv -f latin1 -t utf-8`") \
            from None
    stripped = text.lstrip()
    document: Any = None
    if stripped.startswith(("[", "{")):
        # One JSON document: a list of requests, one request, or the body POSTed to `mlflow models serve` (a
        # pretty-printed object was read as JSON Lines: `FILE:1: not a JSON object (Expecting property name ...)`).
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            if stripped.startswith("[") or (exc.msg != "Extra data" and not _parses(stripped.splitlines()[0])):
                raise BertPipelineError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if isinstance(document, dict) and any(key in document for key in SERVER_FORMATS):
        records, places = _server_body(document, path)
    elif isinstance(document, list):
        records, places = document, [f"{path}: item {i + 1}" for i in range(len(document))]
    elif isinstance(document, dict):
        records, places = [document], [f"{path}:{text[:len(text) - len(stripped)].count(chr(10)) + 1}"]
    else:
        records, places = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise BertPipelineError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
            places.append(f"{path}:{number}")
    for place, record in zip(places, records):
        if not isinstance(record, dict):
            where = place.replace(f"{path}:", f"{path}: line ", 1) if place[len(path) + 1:].isdigit() else place
            raise BertPipelineError(f"{where}: expected an object with the task's fields, got {type(record).__name__}")
    return records, places


# The request formats of `mlflow models serve` (its /invocations body): a file holding that body answers the same.
SERVER_FORMATS = ("dataframe_records", "dataframe_split", "inputs", "instances")


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


def _server_body(body: dict, path: str) -> tuple[list, list[str]]:
    """The records of a server request body, and `PATH: FORMAT row N` for each (numbered from 0, as the server's
    errors number them)."""
    from bert_core.errors import BertPipelineError

    keys = [key for key in SERVER_FORMATS if key in body]
    others = sorted(set(body) - set(SERVER_FORMATS) - {"params"})
    if len(keys) != 1 or others:
        raise BertPipelineError(f"{path}: a request body of `mlflow models serve` has exactly one of "
                                f"{', '.join(SERVER_FORMATS)}; this one has {', '.join(sorted(body))}")
    key, value = keys[0], body[keys[0]]
    if key == "dataframe_split":
        columns, rows = (value.get("columns"), value.get("data")) if isinstance(value, dict) else (None, None)
        if not isinstance(columns, list) or not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            raise BertPipelineError(f"{path}: dataframe_split needs `columns` (a list of field names) and `data` (a "
                                    "list of rows, each a list of values)")
        records = [dict(zip(columns, row)) for row in rows]
    elif isinstance(value, dict):  # columns: {"text": [...], "text_pair": [...]}
        lists = {k: v for k, v in value.items() if isinstance(v, list)}
        if not lists:
            records = [value]
        elif len(lists) != len(value) or len({len(v) for v in lists.values()}) != 1:
            raise BertPipelineError(f"{path}: {key} as columns needs a list of the same length for every field; "
                                    "got " + ", ".join(f"{k}: {len(v) if isinstance(v, list) else type(v).__name__}"
                                                       for k, v in value.items()))
        else:
            records = [dict(zip(lists, row)) for row in zip(*lists.values())]
    elif isinstance(value, list):
        records = value
    else:
        raise BertPipelineError(f"{path}: {key} must be a list of objects (or, for inputs/instances, an object of "
                                f"columns); got {type(value).__name__}")
    return records, [f"{path}: {key} row {i}" for i in range(len(records))]


@contextlib.contextmanager
def _predictor(model: str, batch_size: int, export: str | None, quantized: bool = False,
               tracking_uri: str | None = None) -> Iterator:
    """The TaskPredictor for --model: of an MLflow model URI, the one its server runs (its logged graph, INT8
    when it serves that; a download removed when the command is done) unless --export names a graph; of a
    directory, an s3:// URI or a zoo name, that model (on --export's graph when given, its INT8 graph with
    `quantized`)."""
    from bert_core.deploy.serving import TaskPredictor

    if model.startswith(("models:/", "runs:/")):
        from operators import registry

        if tracking_uri is None:
            # The home's MLflow is the stack's server while one is up there, as for finetune, run and report:
            # what that server logged (artifacts at mlflow-artifacts:/) only it can serve.
            from bert_pipeline.embedded_home import use_stack_mlflow
            from bert_pipeline.stack.state import stack_home

            use_stack_mlflow(stack_home(None))
        if export is None:
            with registry.served_predictor(model, batch_size, tracking_uri) as predictor:
                yield predictor
            return
        with registry.downloaded_model_dir(model, tracking_uri) as local:
            yield TaskPredictor.from_model_dir(local, batch_size=batch_size, export_dir=export, quantized=quantized)
        return
    if not Path(model).is_dir():
        from bert_core.model.weights import resolve_model_dir

        model = str(resolve_model_dir(model))
    yield TaskPredictor.from_model_dir(model, batch_size=batch_size, export_dir=export, quantized=quantized)


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
        from bert_core.finetune.config import SquadOptions

        # Flags of --export alone were ignored with --model: `--doc-stride 64` changed nothing (the model's
        # task.json decides), and `--export DIR --quantized` ran the fp32 graph.
        ignored = [f"--{f.name.replace('_', '-')}" for f in dataclasses.fields(SquadOptions) if hasattr(args, f.name)]
        ignored += ["--task"] if args.task is not None else []
        if ignored:
            raise BertPipelineError(f"{', '.join(ignored)}: not used with --model, which answers with the settings "
                                    "the model was fine-tuned and scored with (its task.json); these flags are for "
                                    "--export alone")
        if args.quantized and args.export is None:
            raise BertPipelineError("--quantized runs an export's INT8 graph: give --export DIR as well (a models:/ "
                                    "URI registered with --serve-int8 serves INT8 by itself)")
        requests, places = read_numbered_requests(args.input)
        with _predictor(args.model, args.batch_size, args.export, args.quantized, args.tracking_uri) as predictor:
            try:
                answers = predictor.predict(requests)
            except InvalidRequest as exc:
                # The model's row 1 is the second request, not line 1 of the file: name the line instead.
                if exc.row is not None and exc.row < len(places):
                    raise BertPipelineError(f"{places[exc.row]}: {exc.detail}") from None
                raise BertPipelineError(f"{args.input}: {exc}") from None
        lines = "".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers)
        written = f"wrote {len(answers)} answer{'' if len(answers) == 1 else 's'}"
        if args.output == "-":  # the answers alone on stdout (a file named '-' was written before)
            sys.stdout.buffer.write(lines.encode("utf-8"))
            sys.stdout.flush()
            print(f"{written} to stdout", file=sys.stderr)
            return 0
        out = Path(args.output)
        if out.is_dir():  # a traceback before (IsADirectoryError), leaving the temporary file beside it
            raise BertPipelineError(f"--output {out} is a directory: with --model, --output is the JSON Lines file "
                                    "of answers (e.g. --output answers.jsonl)")
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(lines, encoding="utf-8")
            os.replace(tmp, out)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise BertPipelineError(f"cannot write --output {out}: {exc.strerror or exc}") from None
        print(f"{written} to {out}")
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
