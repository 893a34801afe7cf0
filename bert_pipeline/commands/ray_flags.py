"""The Ray Train flags that `pretrain` and `finetune` share."""

from __future__ import annotations

import argparse


def add_ray_train_arguments(parser: argparse.ArgumentParser, num_workers_default: int, batch_note: str = "",
                            storage_holds: str = "the run's state") -> argparse._ArgumentGroup:
    """Add --num-workers, --use-gpu and --storage in a "distributed (Ray Train)" group; returns the group
    so a step can add its own flags to it."""
    scale = parser.add_argument_group("distributed (Ray Train)")
    scale.add_argument("--num-workers", type=int, default=num_workers_default,
                       help=f"training workers (one per GPU with --use-gpu){batch_note}. 0 or 1: in this process "
                            "(1 runs on Ray when RAY_ADDRESS is set); more: Ray Train on the local Ray or the "
                            "cluster at RAY_ADDRESS, given in its GCS form host:6379 (default: %(default)s)")
    scale.add_argument("--use-gpu", action="store_true", help="train on GPUs (NCCL between workers)")
    scale.add_argument("--storage", metavar="URI",
                       help=f"Ray Train storage for {storage_holds}, shared by all nodes: local/NFS path or s3:// "
                            "(default: $BERT_PIPELINE_HOME/ray_results)")
    return scale
