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
    parser.add_argument("--quantize", choices=["int8"],
                        help="also write an INT8 dynamically quantised ONNX graph; with --eval-data, its metric "
                        "is reported next to the fp32 graph's, with the difference")
    parser.add_argument("--eval-data", metavar="FILE",
                        help="labelled data to score the exported graph(s) on with the task's official metric "
                        "(reported in export.json, the manifest and on stdout): a GLUE/XNLI-style TSV with "
                        "labels (dev set; name the task with --eval-task) or a SQuAD v1.1/v2.0 JSON file "
                        "for question answering")
    parser.add_argument("--eval-task", metavar="TASK",
                        help="the GLUE/XNLI task of --eval-data (e.g. SST-2, MRPC, STS-B, XNLI); the model's "
                        "labels must be that task's")
    parser.add_argument("--num-labels", type=int, help="classification: number of labels when the model "
                        "directory does not say (a pretrained encoder without a fine-tuned head)")
    parser.add_argument("--random-weights", action="store_true",
                        help="export a randomly initialised model (no --model): for testing a deployment only")
    parser.add_argument("--model-config", metavar="NAME_OR_JSON",
                        help="architecture for --random-weights (zoo name or config.json; default bert_12_768_12)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing export directory")


def run(args: argparse.Namespace) -> int:
    from bert_core.deploy.export import ExportConfig, describe_evaluation, export

    cfg = ExportConfig(task=args.task, output=args.output, model=args.model, model_config=args.model_config,
                       random_weights=args.random_weights, seq_length=args.seq_length, batch_size=args.batch_size,
                       dynamic_batch=args.dynamic_batch, format=args.format, quantize=args.quantize,
                       num_labels=args.num_labels, overwrite=args.overwrite, eval_data=args.eval_data,
                       eval_task=args.eval_task)
    result = export(cfg)
    metrics = result.get("metrics", {})
    report = {"output": args.output, "files": [o["path"] for o in result["outputs"]],
              "parity": {k: v for k, v in metrics.items() if k.endswith("max_abs_diff")}}
    if "evaluation" in result:
        report["evaluation"] = result["evaluation"]
    print(json.dumps(report, indent=2))
    if "evaluation" in result:
        print(describe_evaluation(result["evaluation"]))
    return 0
