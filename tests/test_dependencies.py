"""Every third-party module the installed packages import is a dependency they declare.

A module that only arrives with another package's dependencies (pandas through mlflow, psutil through ray) or
with an extra (transformers through `test`) works in this venv and breaks a user's plain install, or the next
time the other package drops it. Imports inside `try: ... except ImportError` are optional by construction
(e.g. a faster CRC32C when one is installed) and are not counted.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.paths import REPO

PACKAGES = ("bert_core", "bert_pipeline", "evaluation", "operators", "pipelines")
# Import names whose distribution is one of a declared dependency's own parts.
PART_OF = {"airflow": "apache-airflow"}


def _optional_lines(tree: ast.AST) -> set[int]:
    """Line numbers of imports inside a try block that catches ImportError (or ModuleNotFoundError)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            for stmt in node.body:
                lines.update(n.lineno for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return lines


def imported_modules() -> dict[str, str]:
    """Top-level third-party module -> the first file:line that imports it (lazy imports included)."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            optional = _optional_lines(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if (top in PACKAGES or top in sys.stdlib_module_names or top == "__future__"
                            or node.lineno in optional):
                        continue
                    found.setdefault(top, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_imported_third_party_module_is_a_declared_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    distributions = packages_distributions()
    missing = []
    for module, where in sorted(imported_modules().items()):
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        if PART_OF.get(module) in declared or names & declared:
            continue
        missing.append(f"{module} (distribution {sorted(names) or 'not installed'}), imported at {where}")
    assert not missing, "imported but not in pyproject.toml's [project] dependencies:\n" + "\n".join(missing)


def test_the_check_sees_lazy_imports_and_skips_optional_ones():
    tree = ast.parse("try:\n    import fast_thing\nexcept ImportError:\n    fast_thing = None\n"
                     "def f():\n    import lazy_thing\n")
    assert _optional_lines(tree) == {2}
    found = imported_modules()
    assert found["torch"].startswith("bert_core/")  # module-level imports
    assert "onnxruntime" in found  # imported inside functions only
    assert "google_crc32c" not in found  # optional: inside try/except ImportError
