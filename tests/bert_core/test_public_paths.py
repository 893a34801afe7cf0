"""The public import paths: `bert_core.modeling`, `bert_core.tokenization`, `bert_core.config` and
`bert_core.embedding` are the ones users import and the only ones the docs show; each re-exports every public
class of the module that holds the code (the library's own modules import those, the contract
`internal-imports-subpackages` in pyproject.toml)."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from tests.paths import REPO

PUBLIC = {"bert_core.modeling": "bert_core.model.modeling", "bert_core.tokenization": "bert_core.model.tokenization",
          "bert_core.config": "bert_core.model.config", "bert_core.embedding": "bert_core.deploy.embedding"}


@pytest.mark.parametrize("public, home", PUBLIC.items())
def test_the_public_path_has_every_public_class(public, home):
    shim, module = importlib.import_module(public), importlib.import_module(home)
    classes = {name for name, value in vars(module).items()
               if not name.startswith("_") and inspect.isclass(value) and value.__module__ == home}
    assert classes <= set(shim.__all__), f"{public} lacks {sorted(classes - set(shim.__all__))}"
    assert all(getattr(shim, name) is getattr(module, name) for name in shim.__all__)


def test_the_docs_show_only_the_public_paths():
    internal = re.compile("|".join(re.escape(home) + r"\b" for home in PUBLIC.values()))
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()}"
             for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if internal.search(line)]
    assert not found, "docs name an internal import path (show bert_core.modeling etc.):\n" + "\n".join(found)
