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
    from bert_core.launch.run import absolutize, run_step

    cfg = config_from_args(FinetuneConfig, args)
    use_home_mlflow(cfg)
    result = run_step(FINETUNE, cfg)
    # The manifest's config leaves out where the run was written (output is a run field, not part of what
    # makes two runs the same), so the output printed is --output made absolute, as run_step wrote it.
    print(json.dumps({"output": absolutize(FINETUNE, cfg).output, "best_epoch": result.get("best_epoch"),
                      "metrics": result["metrics"]}, indent=2))
    return 0
