"""BERT tokenization: a pure-Python reference and a fast batch encoder that must agree with it.

The reference (`BasicTokenizer` + `WordpieceTokenizer`, driven by `BertTokenizer.tokenize`) follows
Google BERT's FullTokenizer (tokenization.py), the tokenizer the released models were trained with, plus
one thing transformers' Python ("slow") BertTokenizer adds and we keep: the special tokens [PAD] [UNK]
[CLS] [SEP] [MASK] written in the text are kept whole, wherever they occur (transformers splits them off
before anything else, even inside a word).

Like Google's code, and unlike transformers' Python tokenizer (which NFC-normalises first), no Unicode
normalisation happens unless accents are stripped (lower-casing models: NFD, then the marks are dropped).
A cased model therefore sees its characters as written: "\u1f7b" (upsilon with oxia) stays itself and not
its canonical equivalent "\u03cd" (with tonos), and a decomposed "e" + U+0301 is not "é": each gives what
Google's tokenizer gives, [UNK] when the vocab lacks it.

The fast path (`encode` / `encode_batch`) runs HF `tokenizers` (Rust). Its stock BertNormalizer and
BertPreTokenizer disagree with the reference on over 800,000 code points: nearly all unassigned ones
(Python drops category Cn, Rust keeps them), plus newer punctuation, the CJK range U+2B820-U+2B91F,
and its own stock normalisation steps. So the Rust pipeline is assembled from the reference's
own steps, with character classes computed from `unicodedata` at run time: the two paths agree by
construction for whatever Python (and so Unicode) version runs them. What is left (final-sigma
lower-casing, ~100 rare combining marks the Rust crate has older data for, lone surrogates, special
tokens hidden by control characters) is detected per text with cheap checks, and
such a text takes the reference instead: see `BertTokenizer._needs_reference`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import os
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from bert_core.errors import BertPipelineError, ModelNotFoundError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, CLS, SEP, MASK)

Truncation = Literal["longest_first", "only_first", "only_second"] | None
_TRUNCATIONS = ("longest_first", "only_first", "only_second", None)

# Splits text around special tokens written in it (transformers does this with a trie; none of these
# tokens is a prefix of another, so leftmost alternation finds the same matches).
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")
_BRACKETED = re.compile(r"\[[^\[\]]{1,64}\]")
# Words of a piece of printable ASCII text without spaces, as BasicTokenizer splits it: at BERT's
# punctuation (all non-alphanumeric ASCII), each punctuation character a word of its own.
_ASCII_WORDS = re.compile(r"[!-/:-@\[-`{-~]|[^!-/:-@\[-`{-~]+")
# Pieces whose ids `encode_ids_batch` keeps (about 200 bytes each): a few MB, and most of the
# word occurrences of natural text.
_PIECE_CACHE_LIMIT = 1 << 17
# Characters of pieces `encode_ids_batch` sends through the pure-Python reference (~2 us a character)
# before it builds the Rust pipeline (~1 s of character tables): text with a few accented words or
# curly quotes then never pays for the tables; text with many (another script) soon does.
_REFERENCE_CHAR_BUDGET = 100_000


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


def load_vocab(path: str | Path) -> dict[str, int]:
    """Read a BERT vocab.txt (one token per line, id = line index) and check it is one."""
    path = Path(path)
    if not path.is_file():
        raise BertPipelineError(f"vocab file {path} does not exist (or is not a file)")
    try:
        # utf-8-sig: a BOM written by an editor must not end up glued to "[PAD]".
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BertPipelineError(f"vocab file {path} is not UTF-8 text: {exc}") from exc

    # Split on "\n" only, never str.splitlines(): the Chinese vocab has tokens "\u2028" and
    # "##\u2028", which splitlines() (and str.strip()) would treat as line breaks/whitespace.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if not lines:
        raise BertPipelineError(f"vocab file {path} is empty: a BERT vocab has one token per line")

    vocab: dict[str, int] = {}
    first_line: dict[str, int] = {}
    empty: list[int] = []
    duplicates: list[str] = []
    for index, line in enumerate(lines):
        token = line.rstrip(" \t\r")  # trailing ASCII whitespace only (CRLF files, stray spaces)
        if not token:
            empty.append(index + 1)
        elif token in first_line:
            duplicates.append(f"{token!r} on lines {first_line[token]} and {index + 1}")
        else:
            first_line[token] = index + 1
            vocab[token] = index
    problems = []
    if empty:
        problems.append(f"empty lines {_first_few(empty)}")
    if duplicates:
        problems.append(f"duplicate tokens: {_first_few(duplicates)}")
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        problems.append(f"missing the special tokens {' '.join(missing)}")
    if problems:
        raise BertPipelineError(f"vocab file {path} is not a BERT vocab: {'; '.join(problems)}")
    return vocab


def _first_few(items: Sequence[object], limit: int = 5) -> str:
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f" (and {len(items) - limit} more)" if len(items) > limit else "")


# --------------------------------------------------------------------------------------------
# Character classes (Google's definitions)
# --------------------------------------------------------------------------------------------


def _is_whitespace(char: str) -> bool:
    # \t, \n and \r are control characters, but BERT treats them as whitespace.
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in "\t\n\r":
        return False
    # Cc, Cf, Cs, Co and Cn (unassigned): zero-width spaces, BOMs, bidi marks... are all dropped.
    return unicodedata.category(char).startswith("C")


def _is_removed(char: str) -> bool:
    return char == "\x00" or char == "\ufffd" or _is_control(char)


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    # All non-alphanumeric ASCII counts as punctuation ("$", "^", "`", ...), as in BERT, even
    # though Unicode puts some of them in the symbol classes.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp: int) -> bool:
    # The CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana, which are written with
    # spaces between words and are tokenized like other scripts).
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


# --------------------------------------------------------------------------------------------
# Reference path (pure Python)
# --------------------------------------------------------------------------------------------


class BasicTokenizer:
    """Cleaning, CJK splitting, lower-casing / accent stripping and punctuation splitting."""

    def __init__(
        self,
        do_lower_case: bool = True,
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        never_split: Iterable[str] = SPECIAL_TOKENS,
    ) -> None:
        self.do_lower_case = do_lower_case
        self.tokenize_chinese_chars = tokenize_chinese_chars
        # None means "strip accents when lower-casing", as in the original BERT.
        self.strip_accents = do_lower_case if strip_accents is None else strip_accents
        self.never_split = frozenset(never_split)

    def tokenize(self, text: str) -> list[str]:
        text = self._clean_text(text)
        if self.tokenize_chinese_chars:
            text = self._tokenize_chinese_chars(text)
        tokens: list[str] = []
        for word in text.split():
            tokens.extend(self.split_word(word))
        return tokens

    def split_word(self, word: str) -> list[str]:
        """Normalise one whitespace-separated word and split it at punctuation."""
        if word in self.never_split:
            return [word]
        word = self.normalize_word(word)
        return self._split_on_punctuation(word)

    def normalize_word(self, word: str) -> str:
        # Lower-case the whole word at once: str.lower() looks at context (a final "Σ" becomes "ς").
        if self.do_lower_case:
            word = word.lower()
        if self.strip_accents:
            word = "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")
        return word

    def words_with_positions(self, text: str) -> Iterator[tuple[str, list[int]]]:
        """The words `tokenize` sees, each with the index in `text` of every character.

        Same cleaning and splitting as `tokenize`, done character by character so that offsets can
        be traced back.
        """
        chars: list[str] = []
        positions: list[int] = []
        for index, char in enumerate(text):
            if _is_removed(char):
                continue
            isolate = self.tokenize_chinese_chars and _is_chinese_char(ord(char))
            # str.split() (used by `tokenize`) also splits at U+2028/U+2029, which BERT keeps.
            if _is_whitespace(char) or char.isspace() or isolate:
                if chars:
                    yield "".join(chars), positions
                chars, positions = [], []
                if isolate:
                    yield char, [index]
                continue
            chars.append(char)
            positions.append(index)
        if chars:
            yield "".join(chars), positions

    @staticmethod
    def _clean_text(text: str) -> str:
        """Drop NUL, U+FFFD and control characters; map every whitespace character to a space."""
        output = []
        for char in text:
            if _is_removed(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)

    @staticmethod
    def _tokenize_chinese_chars(text: str) -> str:
        """Put spaces around CJK ideographs, so that each becomes a word of its own."""
        return "".join(f" {c} " if _is_chinese_char(ord(c)) else c for c in text)

    @staticmethod
    def _split_on_punctuation(word: str) -> list[str]:
        """Split at punctuation, each character of which is a piece of its own: "don't!" -> don ' t !"""
        pieces: list[list[str]] = []  # lists of characters, joined at the end: linear in len(word)
        start_new_piece = True
        for char in word:
            if _is_punctuation(char):
                pieces.append([char])
                start_new_piece = True
            else:
                if start_new_piece:
                    pieces.append([])
                    start_new_piece = False
                pieces[-1].append(char)
        return ["".join(piece) for piece in pieces]


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece, continuation pieces prefixed with "##"."""

    def __init__(self, vocab: dict[str, int], unk_token: str = UNK, max_input_chars_per_word: int = 100):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, word: str) -> list[str]:
        """A word to WordPiece tokens, e.g. "unaffable" -> ["un", "##aff", "##able"]."""
        return [token for token, _start, _end in self.tokenize_with_spans(word)]

    def tokenize_with_spans(self, word: str) -> list[tuple[str, int, int]]:
        """Like `tokenize`, with each token's [start, end) in `word`; [UNK] spans the whole word."""
        if len(word) > self.max_input_chars_per_word:
            return [(self.unk_token, 0, len(word))]
        pieces = []
        start = 0
        while start < len(word):
            end = len(word)
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if start == end:  # not even one character is in the vocab
                return [(self.unk_token, 0, len(word))]
            pieces.append((piece, start, end))
            start = end
        return pieces


# --------------------------------------------------------------------------------------------
# Fast path support: Unicode classes shared by the Rust pipeline and the fallback check
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _CharClasses:
    removed: str  # onig class: what _clean_text drops
    spaces: str  # onig class: what becomes a word break (BERT whitespace, plus U+2028/U+2029)
    punctuation: str  # onig class
    chinese: str  # onig class
    nonspacing_marks: str  # onig class: category Mn, what accent stripping drops
    # Sets, not regexes, for the checks in Python: set.isdisjoint(text) is ~10x faster here.
    needs_reference: frozenset[str]  # characters the Rust pipeline gets wrong
    needs_reference_lower: frozenset[str]  # the same when lower-casing (adds capital sigma)
    joining: frozenset[str]  # marks (and jamo) that combine with the character before them


def _onig_class(codepoints: list[int]) -> str:
    return "[" + "".join(_ranges(codepoints, lambda cp: f"\\x{{{cp:X}}}")) + "]"


def _ranges(codepoints: list[int], escape: Callable[[int], str]) -> Iterator[str]:
    codepoints = sorted(codepoints)
    i = 0
    while i < len(codepoints):
        j = i
        while j + 1 < len(codepoints) and codepoints[j + 1] == codepoints[j] + 1:
            j += 1
        yield escape(codepoints[i]) if i == j else f"{escape(codepoints[i])}-{escape(codepoints[j])}"
        i = j + 1


@functools.cache
def _char_classes() -> _CharClasses:
    """The character classes, from the on-disk cache when this exact code, Python (Unicode tables) and
    tokenizers version built them before; else scanned (~1-2 s, which every CLI call, Airflow task and
    Ray worker would otherwise pay) and cached. An unreadable or foreign cache file is rebuilt."""
    path = _char_classes_cache_file()
    try:
        fields = json.loads(path.read_text(encoding="utf-8"))
        return _CharClasses(**{name: frozenset(value) if isinstance(value, list) else value
                               for name, value in fields.items()})
    except (OSError, ValueError, TypeError):
        pass
    classes = _scan_char_classes()
    fields = {name: sorted(value) if isinstance(value, frozenset) else value
              for name, value in vars(classes).items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(fields), encoding="utf-8")  # ASCII with escapes: lone surrogates survive
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the scan again
    return classes


def _char_classes_cache_file() -> Path:
    import tokenizers

    from bert_core.io.storage import cache_root

    key = hashlib.sha256("\0".join([Path(__file__).read_text(encoding="utf-8"), tokenizers.__version__,
                                    unicodedata.unidata_version, sys.version, str(sys.maxunicode)]).encode())
    return cache_root() / "tokenizer" / f"char-classes-{key.hexdigest()[:20]}.json"


def _scan_char_classes() -> _CharClasses:
    """Scan all code points: class membership per Python's unicodedata.

    Built from the same predicates as the reference, so the Rust pipeline cleans and splits
    exactly as the reference does for the Python (and Unicode) version in use. The Rust crate's
    lower-casing and NFD tables are then compared with Python's on every assigned character;
    the ones that differ are collected into `needs_reference`.
    """
    from tokenizers import normalizers  # only the fast path needs it

    # Every category C code point is removed by the reference except \t \n \r (see _is_control), so
    # only the others need the (slower) predicates; the class of removed characters is their
    # complement, which also takes in the surrogates (never in a Rust string anyway).
    categories = map(unicodedata.category, map(chr, range(sys.maxunicode + 1)))
    candidates = [chr(cp) for cp, category in enumerate(categories) if category[0] != "C"] + [
        "\t",
        "\n",
        "\r",
    ]
    assigned = [char for char in candidates if not _is_removed(char)]
    spaces = [ord(c) for c in assigned if _is_whitespace(c) or c.isspace()]
    punctuation = [ord(c) for c in assigned if _is_punctuation(c)]
    chinese = [ord(c) for c in assigned if _is_chinese_char(ord(c))]
    marks = [ord(c) for c in assigned if unicodedata.category(c) == "Mn"]
    joining = {c for c in assigned if unicodedata.category(c)[0] == "M"}
    joining |= {c for char in assigned for c in unicodedata.normalize("NFD", char)[1:]}

    def rust_differs(form: str, chars: list[str], probe: Callable[[str], str] = str) -> set[str]:
        """The chars whose probe string Rust normalises differently from Python."""
        rust = {"NFD": normalizers.NFD(), "lower": normalizers.Lowercase()}[form]
        probes = [probe(c) for c in chars]
        # One call for all probes: "\x00" separates them (a starter that nothing composes with).
        out = rust.normalize_str("\x00".join(probes)).split("\x00")
        python = str.lower if form == "lower" else functools.partial(unicodedata.normalize, form)
        return {char for char, text, got in zip(chars, probes, out) if python(text) != got}

    risky = rust_differs("lower", assigned)
    combining = [c for c in assigned if unicodedata.combining(c)]
    for form in ("NFD",):  # the only normalisation the pipeline applies (accent stripping)
        risky |= rust_differs(form, assigned)
        risky |= rust_differs(form, assigned, functools.partial(unicodedata.normalize, "NFD"))
        # Canonical ordering: a combining mark that the Rust tables give another combining class
        # shows up next to marks of the classes around it.
        for other in ("\u0334", "\u093c", "\u094d", "\u0327", "\u0323", "\u0301", "\u0345"):
            risky |= rust_differs(form, combining, lambda c, o=other: f"a{c}{o}")
            risky |= rust_differs(form, combining, lambda c, o=other: f"a{o}{c}")
    # Lone surrogates: Python strings may hold them, Rust strings may not.
    risky |= {chr(cp) for cp in range(0xD800, 0xE000)}
    return _CharClasses(
        removed="[^" + _onig_class([ord(c) for c in assigned])[1:],
        spaces=_onig_class(spaces),
        punctuation=_onig_class(punctuation),
        chinese=_onig_class(chinese),
        nonspacing_marks=_onig_class(marks),
        needs_reference=frozenset(risky),
        # str.lower() turns a word-final capital sigma into "ς", Rust's per-character mapping into "σ".
        needs_reference_lower=frozenset(risky | {"\u03a3"}),
        joining=frozenset(joining),
    )


# --------------------------------------------------------------------------------------------
# Encodings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Encoding:
    """One encoded text or pair: `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`.

    `offsets` are (start, end) character offsets into the original text the token came from (A or
    B, per `sequence_ids`); (0, 0) for the added [CLS]/[SEP]. A special token written in the text
    (e.g. "[MASK]") keeps its real offsets and sequence id.
    """

    ids: list[int]
    tokens: list[str]
    segment_ids: list[int]
    offsets: list[tuple[int, int]]
    sequence_ids: list[int | None]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class _Pieces:
    """The tokens of one text, before special tokens and truncation."""

    tokens: list[str]
    ids: list[int]
    offsets: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.tokens)

    def truncated(self, length: int) -> _Pieces:
        return _Pieces(self.tokens[:length], self.ids[:length], self.offsets[:length])


# --------------------------------------------------------------------------------------------
# The tokenizer
# --------------------------------------------------------------------------------------------


class BertTokenizer:
    """BERT's FullTokenizer (`tokenize`) plus a fast encoder for texts and pairs (`encode_batch`)."""

    def __init__(
        self,
        vocab_file: str | Path,
        do_lower_case: bool = True,
        max_input_chars_per_word: int = 100,
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
    ) -> None:
        self.vocab_file = Path(vocab_file)
        self.vocab = load_vocab(vocab_file)
        self.ids_to_tokens = {index: token for token, index in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.strip_accents = strip_accents
        self.basic_tokenizer = BasicTokenizer(do_lower_case, tokenize_chinese_chars, strip_accents)
        self.wordpiece_tokenizer = WordpieceTokenizer(self.vocab, UNK, max_input_chars_per_word)
        self._fast_tokenizer: Tokenizer | None = None  # built on first use: `tokenize` does not need it
        self._piece_ids: dict[str, tuple[int, ...]] = {}  # encode_ids_batch's cache
        self._reference_chars = 0  # characters encode_ids_batch tokenized with the reference

    def __getstate__(self) -> dict:
        # The cache is rebuilt where the tokenizer goes: shipping it to workers would cost more.
        return {**self.__dict__, "_piece_ids": {}}

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> BertTokenizer:
        """The tokenizer of a model directory: its vocab.txt, with the casing from
        tokenizer_config.json (`do_lower_case`, and `tokenize_chinese_chars` / `strip_accents` if
        given), else from config.json's `do_lower_case`, else lower-cased."""
        model_dir = Path(model_dir)
        vocab_file = model_dir / "vocab.txt"
        if not vocab_file.is_file():
            raise ModelNotFoundError(f"model directory {model_dir} has no vocab.txt (expected {vocab_file})")
        tokenizer_config = model_dir / "tokenizer_config.json"
        settings = _read_json_object(tokenizer_config)
        casing_file = tokenizer_config if "do_lower_case" in settings else model_dir / "config.json"
        return cls(
            vocab_file,
            do_lower_case=_flag(casing_file, "do_lower_case", default=True),
            tokenize_chinese_chars=_flag(tokenizer_config, "tokenize_chinese_chars", default=True),
            strip_accents=_flag(tokenizer_config, "strip_accents", default=None),
        )

    # ---- vocabulary ------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    @property
    def pad_token_id(self) -> int:
        return self.vocab[PAD]

    @property
    def unk_token_id(self) -> int:
        return self.vocab[UNK]

    @property
    def cls_token_id(self) -> int:
        return self.vocab[CLS]

    @property
    def sep_token_id(self) -> int:
        return self.vocab[SEP]

    @property
    def mask_token_id(self) -> int:
        return self.vocab[MASK]

    @overload
    def convert_tokens_to_ids(self, tokens: str) -> int: ...
    @overload
    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]: ...
    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> int | list[int]:
        """Token(s) to id(s); a token not in the vocab gets the [UNK] id."""
        unk = self.unk_token_id
        if isinstance(tokens, str):
            return self.vocab.get(tokens, unk)
        return [self.vocab.get(token, unk) for token in tokens]

    @overload
    def convert_ids_to_tokens(self, ids: int) -> str: ...
    @overload
    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]: ...
    def convert_ids_to_tokens(self, ids: int | Iterable[int]) -> str | list[str]:
        """Id(s) to token(s); an id outside the vocab is an error (a model/vocab mismatch, usually)."""
        if isinstance(ids, Iterable):
            return [self._id_to_token(i) for i in ids]
        return self._id_to_token(ids)

    def _id_to_token(self, index: int) -> str:
        token = self.ids_to_tokens.get(operator.index(index))  # operator.index: no floats
        if token is None:
            raise BertPipelineError(
                f"token id {index} is outside the vocab of {self.vocab_file} "
                f"(vocab size {self.vocab_size}: valid ids are 0..{self.vocab_size - 1})"
            )
        return token

    # ---- reference path --------------------------------------------------------------------

    def tokenize(self, text: str) -> list[str]:
        """Text to WordPiece tokens, the reference every other path must equal."""
        tokens: list[str] = []
        for segment in _SPECIAL_SPLIT.split(text):
            if segment in SPECIAL_TOKENS:
                tokens.append(segment)
                continue
            for word in self.basic_tokenizer.tokenize(segment):
                tokens.extend(self.wordpiece_tokenizer.tokenize(word))
        return tokens

    def _reference_pieces(self, text: str) -> _Pieces:
        """`tokenize`, with ids and offsets: the fast path's fallback."""
        tokens: list[str] = []
        offsets: list[tuple[int, int]] = []
        segment_start = 0
        for segment in _SPECIAL_SPLIT.split(text):
            if segment in SPECIAL_TOKENS:
                tokens.append(segment)
                offsets.append((segment_start, segment_start + len(segment)))
            else:
                for raw_word, positions in self.basic_tokenizer.words_with_positions(segment):
                    for token, start, end in self._word_tokens_with_offsets(raw_word, positions):
                        tokens.append(token)
                        offsets.append((segment_start + start, segment_start + end))
            segment_start += len(segment)
        # Accents stripped from a word are left to the rule the fast path uses for them too.
        offsets = _extend_over_joining(text, offsets)
        return _Pieces(tokens, self.convert_tokens_to_ids(tokens), offsets)

    def _word_tokens_with_offsets(self, raw_word: str, positions: list[int]) -> list[tuple[str, int, int]]:
        """Tokens of one word, each with its [start, end) in the text the positions index."""
        word = raw_word
        word_span = (positions[0], positions[-1] + 1)
        if word in self.basic_tokenizer.never_split:
            return [(word, *word_span)]
        # Tokens as spans of the normalised word: pieces from the punctuation split follow each other.
        normalized_spans: list[tuple[str, int, int]] = []
        piece_start = 0
        for piece in self.basic_tokenizer.split_word(word):
            for token, start, end in self.wordpiece_tokenizer.tokenize_with_spans(piece):
                normalized_spans.append((token, piece_start + start, piece_start + end))
            piece_start += len(piece)
        owners = None if len(normalized_spans) == 1 else self._alignment(raw_word)
        if owners is None:  # one token, or no character-level alignment: the word's span for each
            return [(token, *word_span) for token, _start, _end in normalized_spans]
        first_raw, last_raw = owners
        return [
            (token, positions[first_raw[start]], positions[last_raw[end - 1]] + 1)
            for token, start, end in normalized_spans
        ]

    def _alignment(self, raw_word: str) -> tuple[list[int], list[int]] | None:
        """For each character of the normalised word, the first and last raw characters it comes from.

        A normalised character ends at the raw character whose addition makes it appear when
        normalising ever longer prefixes, and starts at the last raw character from which the
        suffix still normalises to it and all after it. To keep this linear the word is cut into
        chunks before ASCII characters (nothing composes with what precedes them) and, in long
        runs, every 64 characters before a non-combining one; None if the chunks then do not
        normalise to the whole word (e.g. a cut inside decomposed Hangul).
        """
        basic = self.basic_tokenizer

        def normalize(text: str) -> str:
            # Final and medial sigma are the same letter here: a prefix may end where the word does not.
            return basic.normalize_word(text).replace("\u03c2", "\u03c3")

        first_raw: list[int] = []
        last_raw: list[int] = []
        chunks: list[str] = []
        chunk_start = 0
        for chunk_end in range(1, len(raw_word) + 1):
            if chunk_end < len(raw_word):
                next_char = raw_word[chunk_end]
                long_run = chunk_end - chunk_start >= 64 and not unicodedata.combining(next_char)
                if not (next_char.isascii() or long_run):
                    continue
            chunk = raw_word[chunk_start:chunk_end]
            target = normalize(chunk)
            chunks.append(target)
            ends: list[int] = []
            for k in range(1, len(chunk) + 1):
                prefix = normalize(chunk[:k])
                agreed = len(ends)  # normalised characters already produced by shorter prefixes
                while agreed < min(len(prefix), len(target)) and prefix[agreed] == target[agreed]:
                    agreed += 1
                ends.extend([chunk_start + k - 1] * (agreed - len(ends)))
            starts = [chunk_start] * len(target)
            for k in range(len(chunk) - 1, 0, -1):
                covered = _common_suffix(normalize(chunk[k:]), target)
                for p in range(len(target) - covered, len(target)):
                    starts[p] = max(starts[p], chunk_start + k)
            first_raw.extend(starts)
            last_raw.extend(ends)
            chunk_start = chunk_end
        if "".join(chunks) != normalize(raw_word) or len(first_raw) != len(last_raw):
            return None
        return first_raw, last_raw

    # ---- ids only, for bulk text ------------------------------------------------------------

    def encode_ids_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of `tokenize(text)` for each text (no special tokens added): the fastest path, for
        bulk text such as a pretraining corpus, where neither tokens nor offsets are needed.

        Tokenization never crosses an ASCII space: cleaning keeps it, it always breaks words, a
        special token holds none, and NFD neither decomposes nor reorders it. So a
        text's ids are those of its space-separated pieces in order, and a piece's ids are cached:
        natural text repeats its words, so most pieces are found there. A new piece of printable
        ASCII only meets lower-casing, punctuation splitting and WordPiece, done here in Python; any
        other piece (accents, other scripts, tabs, control characters, brackets) goes through
        `encode_batch` in one batch or, until the Rust pipeline is needed for more than a few
        (`_REFERENCE_CHAR_BUDGET`), through `tokenize`: the two give the same tokens.
        """
        if isinstance(texts, str):
            raise BertPipelineError("encode_ids_batch takes a list of texts")
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise BertPipelineError(f"texts[{index}] is {type(text).__name__}, not str")
        split = [text.split(" ") for text in texts]
        cache = self._piece_ids
        missing = set(itertools.chain.from_iterable(split)).difference(cache)
        if missing:
            if len(cache) + len(missing) > _PIECE_CACHE_LIMIT:
                cache.clear()  # bounded memory; the frequent pieces come back at once
                missing = set(itertools.chain.from_iterable(split))
            self._cache_pieces(missing)
        get = cache.__getitem__
        return [list(itertools.chain.from_iterable(map(get, pieces))) for pieces in split]

    def _cache_pieces(self, pieces: Iterable[str]) -> None:
        cache = self._piece_ids
        lower = self.basic_tokenizer.do_lower_case
        others = []
        for piece in pieces:
            # Printable ASCII without "[" (which may start a special token) has no cleaning, CJK, Unicode
            # normalisation or accents to apply, and no whitespace, as the text was split at its spaces.
            if piece.isascii() and piece.isprintable() and "[" not in piece:
                words = _ASCII_WORDS.findall(piece.lower() if lower else piece)
                if len(words) == 1 and words[0] == piece:
                    self._cache_ascii_word(piece)
                else:
                    # Each word is a piece too, so "Word," and "word." share the entry of "word".
                    cache[piece] = tuple(itertools.chain.from_iterable(
                        cache.get(word) or self._cache_ascii_word(word) for word in words))
            else:
                others.append(piece)
        if not others:
            return
        chars = sum(map(len, others))
        if self._fast_tokenizer is None and self._reference_chars + chars <= _REFERENCE_CHAR_BUDGET:
            self._reference_chars += chars
            for piece in others:
                cache[piece] = tuple(self.convert_tokens_to_ids(self.tokenize(piece)))
        else:
            for piece, encoded in zip(others, self._pieces_batch(others, "texts")):
                cache[piece] = tuple(encoded.ids)

    def _cache_ascii_word(self, word: str) -> tuple[int, ...]:
        """WordPiece ids of a word that basic tokenization leaves as it is, cached."""
        whole = self.vocab.get(word)  # what greedy longest-match tries first
        if whole is not None and len(word) <= self.max_input_chars_per_word:
            ids: tuple[int, ...] = (whole,)
        else:
            ids = tuple(map(self.vocab.__getitem__, self.wordpiece_tokenizer.tokenize(word)))
        self._piece_ids[word] = ids
        return ids

    # ---- fast path -------------------------------------------------------------------------

    def encode(
        self,
        text: str,
        pair: str | None = None,
        max_length: int | None = None,
        truncation: Truncation = "longest_first",
        add_special_tokens: bool = True,
    ) -> Encoding:
        """Encode one text (or pair); see `encode_batch`."""
        pairs = None if pair is None else [pair]
        return self.encode_batch([text], pairs, max_length, truncation, add_special_tokens)[0]

    def encode_batch(
        self,
        texts: Sequence[str],
        pairs: Sequence[str] | None = None,
        max_length: int | None = None,
        truncation: Truncation = "longest_first",
        add_special_tokens: bool = True,
    ) -> list[Encoding]:
        """Encode texts (and, if given, their pairs) with ids, segment ids and character offsets.

        Tokens always equal `tokenize` on each text. With `max_length` (special tokens included),
        `truncation` decides what is cut: "longest_first" drops the last token of the longer
        sequence one at a time (BERT's _truncate_seq_pair; from the second on ties),
        "only_first"/"only_second" cut one side only, None makes an over-long input an error.
        """
        if truncation not in _TRUNCATIONS:
            raise BertPipelineError(f"truncation must be one of {_TRUNCATIONS}, not {truncation!r}")
        if isinstance(texts, str) or (pairs is not None and isinstance(pairs, str)):
            raise BertPipelineError("encode_batch takes a list of texts (use encode for a single text)")
        if pairs is not None and len(pairs) != len(texts):
            raise BertPipelineError(f"encode_batch got {len(texts)} texts but {len(pairs)} pairs")
        if truncation == "only_second" and pairs is None and max_length is not None:
            raise BertPipelineError("truncation='only_second' needs pairs: there is no second sequence")
        firsts = self._pieces_batch(texts, "texts")
        seconds = self._pieces_batch(pairs, "pairs") if pairs is not None else [None] * len(firsts)
        return [
            self._assemble(index, first, second, max_length, truncation, add_special_tokens)
            for index, (first, second) in enumerate(zip(firsts, seconds))
        ]

    def _pieces_batch(self, texts: Sequence[str], what: str) -> list[_Pieces]:
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise BertPipelineError(f"{what}[{index}] is {type(text).__name__}, not str")
        by_reference = {i for i, text in enumerate(texts) if self._needs_reference(text)}
        fast_indices = [i for i in range(len(texts)) if i not in by_reference]
        encoded = self._fast().encode_batch([texts[i] for i in fast_indices], add_special_tokens=False)
        result: list[_Pieces | None] = [None] * len(texts)
        joining = _char_classes().joining
        for i, encoding in zip(fast_indices, encoded):
            offsets = encoding.offsets
            if not texts[i].isascii() and not joining.isdisjoint(texts[i]):
                offsets = _extend_over_joining(texts[i], offsets)
            result[i] = _Pieces(encoding.tokens, encoding.ids, offsets)
        for i in by_reference:
            result[i] = self._reference_pieces(texts[i])
        return result  # type: ignore[return-value]

    def _needs_reference(self, text: str) -> bool:
        """Whether `text` must go through the reference; a set lookup per character (none for ASCII).

        * characters the Rust pipeline gets wrong (see `_char_classes`), and "Σ" when lower-casing;
        * a special token hidden by a control character (see `_special_in_disguise`).
        """
        if text.isascii():  # the common case: none of the above can happen but the last
            return self._special_in_disguise(text)
        classes = _char_classes()
        risky = classes.needs_reference_lower if self.do_lower_case else classes.needs_reference
        return not risky.isdisjoint(text) or self._special_in_disguise(text)

    @staticmethod
    def _special_in_disguise(text: str) -> bool:
        """True if removing control characters turns a bracketed word into a special token.

        "[MA\\u200bSK]" is not split off as a special token, but after cleaning the reference sees
        the word "[MASK]" and keeps it whole, while the Rust pipeline splits it at punctuation.
        """
        if "[" not in text:
            return False
        for match in _BRACKETED.finditer(text):
            word = match.group()
            if (
                word not in SPECIAL_TOKENS
                and "".join(c for c in word if not _is_removed(c)) in SPECIAL_TOKENS
            ):
                return True
        return False

    def _fast(self) -> Tokenizer:
        """The `tokenizers` pipeline, configured to run the reference's steps in the same order."""
        if self._fast_tokenizer is None:
            from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

            classes = _char_classes()
            tokenizer = Tokenizer(
                models.WordPiece(
                    self.vocab,
                    unk_token=UNK,
                    continuing_subword_prefix="##",
                    max_input_chars_per_word=self.max_input_chars_per_word,
                )
            )
            steps = [
                normalizers.Replace(Regex(classes.removed), ""),
                normalizers.Replace(Regex(classes.spaces), " "),
            ]
            if self.basic_tokenizer.do_lower_case:
                steps.append(normalizers.Lowercase())
            if self.basic_tokenizer.strip_accents:
                steps += [normalizers.NFD(), normalizers.Replace(Regex(classes.nonspacing_marks), "")]
            tokenizer.normalizer = normalizers.Sequence(steps)
            # CJK ideographs are isolated after normalisation rather than before as in the reference;
            # the same, since NFD/lower-casing map ideographs to ideographs and nothing else to them.
            isolated = classes.punctuation
            if self.tokenize_chinese_chars:
                isolated = isolated[:-1] + classes.chinese[1:]  # the union of the two [...] classes
            tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
                [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(isolated), behavior="isolated")]
            )
            # Matched in the raw text before normalisation, as the reference's _SPECIAL_SPLIT does.
            tokenizer.add_special_tokens(
                [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
            )
            self._fast_tokenizer = tokenizer
        return self._fast_tokenizer

    def _assemble(
        self,
        index: int,
        first: _Pieces,
        second: _Pieces | None,
        max_length: int | None,
        truncation: Truncation,
        add_special_tokens: bool,
    ) -> Encoding:
        if max_length is not None:
            first, second = self._truncate(index, first, second, max_length, truncation, add_special_tokens)
        n = 1 if add_special_tokens else 0  # how many [CLS] before, [SEP] after each sequence
        tokens = [CLS] * n + first.tokens + [SEP] * n
        ids = [self.cls_token_id] * n + first.ids + [self.sep_token_id] * n
        segment_ids = [0] * len(tokens)
        offsets = [(0, 0)] * n + first.offsets + [(0, 0)] * n
        sequence_ids: list[int | None] = [None] * n + [0] * len(first) + [None] * n
        if second is not None:
            tokens += second.tokens + [SEP] * n
            ids += second.ids + [self.sep_token_id] * n
            segment_ids += [1] * (len(second) + n)
            offsets += second.offsets + [(0, 0)] * n
            sequence_ids += [1] * len(second) + [None] * n
        return Encoding(ids, tokens, segment_ids, offsets, sequence_ids)

    @staticmethod
    def _truncate(
        index: int,
        first: _Pieces,
        second: _Pieces | None,
        max_length: int,
        truncation: Truncation,
        add_special_tokens: bool,
    ) -> tuple[_Pieces, _Pieces | None]:
        specials = (3 if second is not None else 2) if add_special_tokens else 0
        budget = max_length - specials
        len_a, len_b = len(first), len(second) if second is not None else 0
        if budget < 0:
            raise BertPipelineError(
                f"max_length={max_length} leaves no room for the {specials} special tokens"
            )
        if len_a + len_b <= budget:
            return first, second
        what = f"input {index} has {len_a + len_b + specials} tokens (special tokens included)"
        if truncation is None:
            raise BertPipelineError(
                f"{what}, more than max_length={max_length}; "
                "pass a truncation strategy or a larger max_length"
            )
        if truncation == "longest_first":
            while len_a + len_b > budget:  # BERT's _truncate_seq_pair: shorten the longer one
                if len_a > len_b:
                    len_a -= 1
                else:
                    len_b -= 1
        elif truncation == "only_first":
            len_a = budget - len_b
            if len_a < 0:
                raise BertPipelineError(
                    f"{what}: the second sequence alone has {len_b}, so truncation='only_first' cannot fit "
                    f"max_length={max_length}"
                )
        else:  # only_second
            if second is None:
                raise BertPipelineError(f"{what}, but truncation='only_second' needs a second sequence")
            len_b = budget - len_a
            if len_b < 0:
                raise BertPipelineError(
                    f"{what}: the first sequence alone has {len_a}, so truncation='only_second' cannot fit "
                    f"max_length={max_length}"
                )
        return first.truncated(len_a), second.truncated(len_b) if second is not None else None


def _extend_over_joining(text: str, offsets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Let a token's offsets take in the combining marks right after it.

    `tokenizers` aligns accents stripped from a word with no token, so lower-cased "Cafe\\u0301" would get
    (0, 4). The marks belong to the token before them (up to the next token), also across dropped
    control characters between them: (0, 5). Both paths apply this, so their offsets agree.
    """
    joining = _char_classes().joining
    extended = []
    for i, (start, end) in enumerate(offsets):
        limit = max(end, offsets[i + 1][0]) if i + 1 < len(offsets) else len(text)
        scan = end
        while scan < limit:
            if text[scan] in joining:
                end = scan + 1
            elif not _is_removed(text[scan]):
                break
            scan += 1
        extended.append((start, end))
    return extended


def _common_suffix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _read_json_object(path: Path) -> dict:
    """The JSON object in `path`, or {} if there is no such file."""
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertPipelineError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise BertPipelineError(f"{path} must hold a JSON object, not {type(value).__name__}")
    return value


@overload
def _flag(path: Path, key: str, default: bool) -> bool: ...
@overload
def _flag(path: Path, key: str, default: None) -> bool | None: ...
def _flag(path: Path, key: str, default: bool | None) -> bool | None:
    """A true/false setting from a JSON file (null too where the default is null: strip_accents)."""
    value = _read_json_object(path).get(key, default)
    if value is None and default is None:
        return None
    if not isinstance(value, bool):
        allowed = "true, false or null" if default is None else "true or false"
        raise BertPipelineError(f"{path}: {key} must be {allowed}, not {json.dumps(value)}")
    return value
