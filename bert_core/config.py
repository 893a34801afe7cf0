"""Public import path kept for users: `from bert_core.config import ...`. The code lives in `bert_core.model.config`."""

from bert_core.model.config import (  # noqa: F401
    BertConfig,
)

__all__ = ['BertConfig']
