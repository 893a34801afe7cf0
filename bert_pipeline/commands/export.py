"""`bert-pipeline export`: a static-shape ONNX or torch.export model plus what is needed to run it."""

from __future__ import annotations

import argparse
import json

from bert_pipeline.commands.config_flags import add_config_arguments, config_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.deploy.export import ExportConfig

    add_config_arguments(parser, ExportConfig)


def run(args: argparse.Namespace) -> int:
    from bert_core.deploy.export import ExportConfig, describe_evaluation, export

    cfg = config_from_args(ExportConfig, args)
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
