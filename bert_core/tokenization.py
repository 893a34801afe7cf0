"""Public import path kept for users: `from bert_core.tokenization import ...`. The code lives in `bert_core.model.tokenization`."""

from bert_core.model.tokenization import (  # noqa: F401
    BasicTokenizer,
    BertTokenizer,
    Encoding,
    WordpieceTokenizer,
    load_vocab,
)

__all__ = ['BasicTokenizer', 'BertTokenizer', 'Encoding', 'WordpieceTokenizer', 'load_vocab']
