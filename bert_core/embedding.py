"""Public import path kept for users: `from bert_core.embedding import ...`. The code lives in `bert_core.deploy.embedding`."""

from bert_core.deploy.embedding import (  # noqa: F401
    BertEmbedding,
    SentenceEmbedding,
)

__all__ = ['BertEmbedding', 'SentenceEmbedding']
