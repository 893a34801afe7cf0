"""The import layering contract ([tool.importlinter] in pyproject.toml), checked with import-linter:
bert_pipeline > pipelines > operators > evaluation > bert_core, and the rules between bert_core's subpackages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    # --no-cache: nothing written into the checkout (the whole graph takes well under a second).
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_import_contracts_are_kept():
    result = lint_imports()
    assert result.returncode == 0, f"lint-imports failed:\n{result.stdout}\n{result.stderr}"


def test_a_broken_contract_fails(tmp_path):
    """The check can fail: bert_core.deploy.export imports the model, so forbidding that is reported as broken
    (next to a contract that holds, so this is a contract failure, not a configuration error)."""
    config = tmp_path / "importlinter.toml"
    config.write_text("""
[tool.importlinter]
root_packages = ["bert_core"]

[[tool.importlinter.contracts]]
name = "deploy without the model"
type = "forbidden"
source_modules = ["bert_core.deploy"]
forbidden_modules = ["bert_core.model"]

[[tool.importlinter.contracts]]
name = "model without deploy"
type = "forbidden"
source_modules = ["bert_core.model"]
forbidden_modules = ["bert_core.deploy"]
""")
    result = lint_imports("--config", str(config))
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode != 0, output
    assert "deploy without the model BROKEN" in output, output
    assert "model without deploy KEPT" in output, output
    assert "bert_core.deploy.export -> bert_core.model." in output, output


def test_the_layer_check_sees_the_nightly_use_the_benchmark(tmp_path):
    """evaluation sits between operators and bert_core; the nightly imports the throughput benchmark (no module
    string in a subprocess), so the layers contract sees that edge: with the two layers swapped it is broken there."""
    config = tmp_path / "importlinter.toml"
    config.write_text("""
[tool.importlinter]
root_packages = ["evaluation", "operators"]

[[tool.importlinter.contracts]]
name = "evaluation above operators"
type = "layers"
layers = ["evaluation", "operators"]
""")
    result = lint_imports("--config", str(config))
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode != 0, output
    assert "evaluation above operators BROKEN" in output, output
    assert "operators.nightly -> evaluation.model_throughput" in output, output
