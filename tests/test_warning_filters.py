"""The DeprecationWarning policy in pyproject.toml's [tool.pytest.ini_options] filterwarnings: one attributed to
our packages or to the tests fails the test; a third-party one is ignored only in the modules listed there, and any other shows up
in the warnings summary."""

from __future__ import annotations

import warnings

import pytest


def _warn_from(module: str) -> None:
    # As a library's warnings.warn(..., stacklevel=n) does when the frame it points at is in `module`.
    warnings.warn_explicit("old API", DeprecationWarning, f"{module.replace('.', '/')}.py", 1, module=module)


@pytest.mark.parametrize("module", ["bert_core.io.storage", "bert_pipeline", "operators.tasks", "pipelines.bert_demo",
                                    "evaluation.regression", "tests.tiny_bert", __name__, "conftest"])
def test_a_deprecation_warning_from_our_code_is_an_error(module):
    with pytest.raises(DeprecationWarning, match="old API"):
        _warn_from(module)


@pytest.mark.parametrize("module", ["bert_core_extra", "somelib.bert_core", "pytest_timeout"])
def test_a_module_that_only_looks_like_ours_is_not(module):
    with warnings.catch_warnings(record=True) as caught:
        _warn_from(module)  # the filters pytest set for this test still apply inside catch_warnings
    assert [str(w.message) for w in caught] == ["old API"]


def test_listed_third_party_modules_are_ignored_and_others_are_shown():
    with warnings.catch_warnings(record=True) as caught:
        _warn_from("mlflow.models.utils")
        _warn_from("mlflow.store.tracking.sqlalchemy_store")
        _warn_from("mlflow.models.signature")
    assert [w.filename for w in caught] == ["mlflow/models/signature.py"]
