"""The public import path of the WordPiece tokenizer: `from bert_core.tokenization import ...`, the one the
docs show (docs/architecture.md section 1). The code lives in `bert_core.model.tokenization`, which the
library's own modules import."""

from bert_core.model.tokenization import (  # noqa: F401
    BasicTokenizer,
    BertTokenizer,
    Encoding,
    WordpieceTokenizer,
    load_vocab,
)

__all__ = ['BasicTokenizer', 'BertTokenizer', 'Encoding', 'WordpieceTokenizer', 'load_vocab']
