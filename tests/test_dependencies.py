"""Every third-party module the installed packages import is a dependency they declare, and every one the tests
import is declared for the tests.

A module that only arrives with another package's dependencies (pandas through mlflow, psutil through ray) or
with an extra (transformers through `test`) works in this venv and breaks a user's plain install, or the next
time the other package drops it. The same holds for the tests: sklearn and scipy, which the GLUE scorer tests
compare against, came with great-expectations until they were declared in the `test` extra. Imports inside
`try: ... except ImportError` are optional by construction (e.g. a faster CRC32C when one is installed) and are
not counted.
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
# What the test suite installs besides [project] dependencies (`pip install -e '.[test,tf,production]'`,
# Makefile): `tf` is TensorFlow, which only writes real Google checkpoints for the converter's test; `production`
# the CeleryExecutor and PostgreSQL drivers of the production-profile test.
TEST_EXTRAS = ("test", "tf", "production")


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


def _local_names() -> set[str]:
    """Top-level names the repository itself provides: its packages and any script a test imports from a folder
    it puts on sys.path."""
    names = set(PACKAGES) | {"tests"}
    for path in REPO.rglob("*.py"):
        if not any(part.startswith(".") for part in path.relative_to(REPO).parts):
            names.add(path.stem)
    return names


def imported_modules(folders: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Top-level third-party module -> the first file:line under `folders` that imports it (lazy imports
    included)."""
    local = _local_names()
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
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
                    if (top in local or top in sys.stdlib_module_names or top == "__future__"
                            or node.lineno in optional):
                        continue
                    found.setdefault(top, f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared(extras: tuple[str, ...] = ()) -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return {_name(r) for r in requirements}


def undeclared(modules: dict[str, str], declared: set[str]) -> list[str]:
    """The modules (name -> where imported) whose distribution is not among `declared`, one line each."""
    distributions = packages_distributions()
    missing = []
    for module, where in sorted(modules.items()):
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        if PART_OF.get(module) in declared or names & declared:
            continue
        missing.append(f"{module} (distribution {sorted(names) or 'not installed'}), imported at {where}")
    return missing


def test_every_imported_third_party_module_is_a_declared_dependency():
    missing = undeclared(imported_modules(), _declared())
    assert not missing, "imported but not in pyproject.toml's [project] dependencies:\n" + "\n".join(missing)


def test_every_module_the_tests_import_is_declared_for_them():
    missing = undeclared(imported_modules(("tests",)), _declared(TEST_EXTRAS))
    assert not missing, (f"imported by the tests but in neither [project] dependencies nor the extras {TEST_EXTRAS}:\n"
                         + "\n".join(missing))


def test_the_check_sees_lazy_imports_and_skips_optional_ones():
    tree = ast.parse("try:\n    import fast_thing\nexcept ImportError:\n    fast_thing = None\n"
                     "def f():\n    import lazy_thing\n")
    assert _optional_lines(tree) == {2}
    found = imported_modules()
    assert found["torch"].startswith("bert_core/")  # module-level imports
    assert "onnxruntime" in found  # imported inside functions only
    assert "google_crc32c" not in found  # optional: inside try/except ImportError


def test_the_tests_check_names_an_undeclared_module():
    found = imported_modules(("tests",))
    assert found["sklearn"].startswith("tests/")  # imported inside a test function
    assert "pytest" in found and "tests" not in found and "bert_core" not in found
    # A test-only module is not a dependency of the packages, and an unknown one is named with where it is used.
    without_test_extra = undeclared({"sklearn": found["sklearn"]}, _declared())
    assert len(without_test_extra) == 1 and without_test_extra[0].startswith("sklearn (distribution ['scikit-learn'])")
    assert undeclared({"no_such_module": "tests/x.py:3"}, _declared(TEST_EXTRAS)) == [
        "no_such_module (distribution not installed), imported at tests/x.py:3"]


def test_the_package_metadata_builds_without_setuptools_deprecations():
    """setuptools deprecated `license = { text = ... }` (a BuildBackendWarning in every install, saying builds stop
    being supported in 2027): the license is an SPDX expression, which needs setuptools >= 77 to build."""
    import re

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert isinstance(pyproject["project"]["license"], str)
    (setuptools,) = [r for r in pyproject["build-system"]["requires"] if r.startswith("setuptools")]
    assert (found := re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)) and int(found[1]) >= 77, setuptools
