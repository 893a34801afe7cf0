"""The public import path of BertConfig: `from bert_core.config import ...`, the one the docs show
(docs/architecture.md section 1). The code lives in `bert_core.model.config`, which the library's own
modules import."""

from bert_core.model.config import (  # noqa: F401
    BertConfig,
)

__all__ = ['BertConfig']
