"""`bert-pipeline export`: a static-shape ONNX or torch.export model plus what is needed to run it."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, choices=["classification", "regression", "question_answering"],
                        help="which head to export: sequence classification, regression (one output) or SQuAD QA")
    parser.add_argument("--model", metavar="DIR", help="fine-tuned model directory, s3:// URI or zoo name")
    parser.add_argument("--output", required=True, metavar="DIR_OR_URI", help="export directory to create")
    parser.add_argument("--seq-length", type=int, default=128, help="static sequence length (default 128)")
    batch = parser.add_mutually_exclusive_group()
    batch.add_argument("--batch-size", type=int, default=1, help="static batch size (default 1)")
    batch.add_argument("--dynamic-batch", action="store_true", help="leave the batch dimension dynamic")
    parser.add_argument("--format", choices=["onnx", "pt2"], default="onnx",
                        help="onnx (ONNX Runtime) or pt2 (torch.export program; torch only) (default onnx)")
    parser.add_argument("--quantize", choices=["int8"], help="also write an INT8 dynamically quantised ONNX graph")
    parser.add_argument("--num-labels", type=int, help="classification: number of labels when the model "
                        "directory does not say (a pretrained encoder without a fine-tuned head)")
    parser.add_argument("--random-weights", action="store_true",
                        help="export a randomly initialised model (no --model): for testing a deployment only")
    parser.add_argument("--model-config", metavar="NAME_OR_JSON",
                        help="architecture for --random-weights (zoo name or config.json; default bert_12_768_12)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export directory")


def run(args: argparse.Namespace) -> int:
    from bert_core.export import ExportConfig, export

    cfg = ExportConfig(task=args.task, output=args.output, model=args.model, model_config=args.model_config,
                       random_weights=args.random_weights, seq_length=args.seq_length, batch_size=args.batch_size,
                       dynamic_batch=args.dynamic_batch, format=args.format, quantize=args.quantize,
                       num_labels=args.num_labels, overwrite=args.overwrite)
    result = export(cfg)
    print(json.dumps({"output": args.output, "files": [o["path"] for o in result["outputs"]],
                      "parity": result.get("metrics", {})}, indent=2))
    return 0
