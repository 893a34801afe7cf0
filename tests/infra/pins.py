"""The versions infra/constraints.txt pins, for the checks of the images and manifests that must match them."""

from __future__ import annotations

from tests.paths import REPO

CONSTRAINTS = REPO / "infra" / "constraints.txt"


def pinned(package: str) -> str:
    """The version infra/constraints.txt pins `package` to (exactly one `package==X` line)."""
    pins = [line.split("==", 1)[1].strip() for line in CONSTRAINTS.read_text().splitlines()
            if line.lower().startswith(f"{package.lower()}==")]
    assert len(pins) == 1, f"infra/constraints.txt must pin {package} exactly once"
    return pins[0]
