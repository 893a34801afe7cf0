"""`bert-pipeline pretrain --data GLOB --model NAME|CONFIG_JSON --output DIR [...]`.

Masked-LM + next-sentence pretraining from `make-shards` shards to a model directory (config.json,
model.safetensors, vocab.txt, manifest.json with the final loss / masked-LM accuracy / NSP accuracy).
One worker runs in this process; --num-workers N > 1 (or RAY_ADDRESS with one worker) runs on Ray Train.
Flag names follow the GluonNLP/Google BERT scripts.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from bert_pipeline.commands.config_flags import add_config_arguments, config_from_args, use_home_mlflow

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Imported here, not at module level: `bert-pipeline --help` lists commands without importing them.
    from bert_core.pretrain.config import PretrainConfig

    add_config_arguments(parser, PretrainConfig)


def run(args: argparse.Namespace) -> int:
    from bert_core.launch.run import absolutize, run_step
    from bert_core.pretrain.step import PRETRAIN, PretrainConfig

    config = config_from_args(PretrainConfig, args)
    use_home_mlflow(config)
    result = run_step(PRETRAIN, config)
    check = result.get("learning_check") or {}
    print(json.dumps({"output": absolutize(PRETRAIN, config).output, **result.get("metrics", {}),
                      "learning_check": check.get("status")}), file=sys.stdout)
    if check.get("status") in ("not_learning", "warned"):
        print(f"warning: {check.get('summary') or '; '.join(check.get('problems', []))}", file=sys.stderr)
    return 0
