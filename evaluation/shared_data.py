"""Default inputs of the benchmarks measured on the shared data sets (docs/benchmarks*.md): files under
`../shared/data` next to a checkout, where the documented figures were measured.

Found from this file's place in a checkout (evaluation/ -> the repository -> its parent); an installed package
has no such neighbour, so there the default is missing and `existing` names the flag to pass instead.
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
