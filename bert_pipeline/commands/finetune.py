"""`bert-pipeline finetune TASK --data-dir DIR --model NAME_OR_DIR --output DIR`."""

from __future__ import annotations

import argparse
import json

from bert_core.tasks.catalog import TASKS
from bert_pipeline.commands.config_flags import add_config_arguments, config_from_args, use_home_mlflow


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.finetune.config import FinetuneConfig

    add_config_arguments(parser, FinetuneConfig)
    task = next(a for a in parser._actions if a.dest == "task")
    task.help = f"one of: {', '.join(TASKS)} (GLUE names are case-insensitive)"


def run(args: argparse.Namespace) -> int:
    from bert_core.finetune.step import FINETUNE, FinetuneConfig
    from bert_core.launch.run import run_step

    cfg = config_from_args(FinetuneConfig, args)
    use_home_mlflow(cfg)
    result = run_step(FINETUNE, cfg)
    print(json.dumps({"output": result["config"]["output"], "best_epoch": result.get("best_epoch"),
                      "metrics": result["metrics"]}, indent=2))
    return 0
