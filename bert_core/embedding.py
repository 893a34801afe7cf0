"""The public import path of sentence and token embeddings (BertEmbedding): `from bert_core.embedding import
...`, the one the docs show (docs/architecture.md section 1). The code lives in
`bert_core.deploy.embedding`, which the library's own modules import."""

from bert_core.deploy.embedding import (  # noqa: F401
    BertEmbedding,
    SentenceEmbedding,
)

__all__ = ['BertEmbedding', 'SentenceEmbedding']
