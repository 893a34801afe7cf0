"""bert_core.model.tokenization against transformers' pure-Python BERT tokenizer, on Google's vocab files.

The reference path (`tokenize`) and the fast path (`encode_batch`) must both give exactly the tokens
of Google's FullTokenizer. transformers' Python ("slow") BertTokenizer (`BertTokenizerLegacy` in
transformers 5, where `BertTokenizer` is the Rust-backed one; `BertTokenizer` in transformers 4) is
Google's code plus an NFC step at the start; run with that step disabled (`theirs`), it is Google's.
"""

from __future__ import annotations

import functools
import json
import pickle
import random
import sys
import unicodedata
from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError, ModelNotFoundError
from bert_core.model.tokenization import BertTokenizer, _char_classes, load_vocab
from tests.paths import FIXTURES

VOCAB_DIR = FIXTURES / "vocab"
UNCASED = VOCAB_DIR / "uncased_L-12_H-768_A-12.vocab.txt"
CASED = VOCAB_DIR / "cased_L-12_H-768_A-12.vocab.txt"
CHINESE = VOCAB_DIR / "chinese_L-12_H-768_A-12.vocab.txt"
# (vocab, do_lower_case) as Google released them.
VOCABS = {"uncased": (UNCASED, True), "cased": (CASED, False), "chinese": (CHINESE, True)}

# Our own sentences. Escapes mark every character that is invisible or easy to mistake.
CORPUS = [
    # plain English, casing, contractions, abbreviations
    "The committee approved the new budget on Tuesday.",
    "Don't stop-believing; it's the U.S.A. vs. the U.K., isn't it?",
    "ALL CAPS SENTENCE WITH Mixed Case Words and unaffable tokenizers",
    # accents and combining marks
    "Café au lait, naïve façade, Zoë's résumé and a piñata.",
    "Cafe\u0301 with a decomposed e\u0301, n\u0303 and a\u0308 (combining marks).",
    "Ångström units, Øresund bridge, Łódź, Kraków and Dvořák.",
    "ÉCOLE, ÇA VA? Ÿ and ÿ; İstanbul and ıstanbul.",
    "Straße, Fußgänger, the ﬁne ligature and ŒUVRE.",
    "q\u0323\u0307 and q\u0307\u0323 differ only in mark order; \u0301 starts a word.",
    "Tiếng Việt có rất nhiều dấu thanh.",
    # Greek: word-final capital sigma lower-cases to a final sigma
    "ΟΔΟΣ ΚΑΙ ΠΟΛΙΣ. Η Σοφία είπε: ΑΣ ΠΑΜΕ ΣΤΟ ΣΠΙΤΙ!",
    "ΣΣ Σ. ΑΣ'Α ΟΔΟΣ\u200bΑ",
    # other scripts
    "Привет, мир! Ёлка стоит в углу, ЁЖИК спит.",
    "مرحبا بالعالم، كَتَبَ الطالبُ درسه.",
    "שלום עולם, זה משפט בעברית.",
    "हिन्दी में लिखा गया एक छोटा वाक्य।",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    # CJK
    "我们今天去北京大学参观，天气很好。",
    "東京は日本の首都です。ひらがなとカタカナも使います。",
    "한국어 문장도 잘 처리되어야 합니다.",
    "Decomposed hangul \u1100\u1161\u11a8 and compatibility ideographs \uf900\uf901\ufa0e.",
    "Extension B \U00020000\U00020001 and E \U0002b820\U0002b830 ideographs.",
    "Fullwidth ＡＢＣ１２３！ and halfwidth ｶﾀｶﾅ, ideographic comma、full stop。",
    "BERT模型在2018年发布，效果很好!",
    # punctuation and symbols
    "Prices: $5.99, €12,50, £3, ¥100; © 2024 ® ™ — an en–dash and an em—dash.",
    "“Curly quotes” and ‘single ones’, «guillemets», „German“ and 「brackets」.",
    "Wait for it… done!!! ?!?! ¿Qué? ¡Sí!",
    "Math: 2+2=4, x^2 ≥ 0, a<b>c, 50% off, ~tilde, `backtick`, {braces} (parens) | pipe \\ backslash",
    "Bullets • and · middle dots § ¶ † ‡ 25°C ± 3 ‰ ‱ ※ ⁂",
    "Hyphen\u2010minus, non-breaking\u2011hyphen, figure\u2012dash and minus \u2212 sign.",
    # control characters
    "null\x00byte, bell\x07, escape\x1b[0m and delete\x7f.",
    "zero\u200bwidth space, non\u200cjoiner and\u200djoiner",
    "\ufeffBOM at the start and a replacement \ufffd character",
    "soft\u00adhyphen, LRM\u200e, RLM\u200f, word\u2060joiner, \u202aembedding\u202c",
    "private use \ue000\U000f0000, unassigned \u0378 and tag \U000e0041 characters",
    "form\x0cfeed, vertical\x0btab, \x1cfile separator, next\x85line",
    # odd whitespace
    "tab\tseparated\tvalues\nnew line\r\ncarriage return\rend",
    "non\u00a0breaking\u3000ideographic\u2028line\u2029paragraph\u2003em\u202fnarrow\u1680ogham",
    "   leading and trailing spaces   ",
    # emoji
    "I love pizza 🍕 and 🎉 parties!",
    "Family 👨\u200d👩\u200d👧\u200d👦, thumbs 👍🏽, flag 🇯🇵, keycap 1\ufe0f\u20e3 and ❤\ufe0f.",
    "Newer emoji 🫠🥹 and a smile:) or :-( or ^_^",
    # long words
    "a" * 100,
    "b" * 101,
    "Short then " + "supercalifragilistic" * 6 + " then short.",
    "https://example.com/" + "/".join(["segment"] * 20) + "?q=1",
    "é" * 60 + "e\u0301" * 30,
    # digits
    "Call 555-0123 or +1 (800) 555-0199; version 3.14.159, 1,000,000 items.",
    "abc123def 4ever h2o the 42nd, 1st, 2nd and 3rd places",
    "Arabic-Indic ٣٤٥ and Devanagari ४२ digits, superscript x² and ½ fraction.",
    # URLs and e-mail addresses
    "Visit https://example.com/path?query=1&lang=en#frag or mail someone@example.org.",
    "ftp://files.example.net/pub/data_v2.tar.gz and user.name+tag@sub.example.co.uk",
    # special tokens written in the text
    "[CLS] first sentence [SEP] second sentence [SEP]",
    "Fill the [MASK] here and [MASK][MASK] twice, [PAD] pad, [UNK] unknown.",
    "no space[MASK]inside, [mask] in lower case and [ MASK ] with spaces",
    "[MA\u200bSK] hides a zero-width space, [[MASK]] is nested, [SEP].",
    "[unused1] and [unused99] are ordinary vocabulary entries",
    # rare characters whose Unicode data differs between Python and the Rust tables
    "a\u1dfab and \u0898x and \U00011938",
    "lone \ud800 surrogate",
    # empty and whitespace-only
    "",
    " ",
    "\t\n  \u3000\u2028",
    "\x00\u200b\ufeff",
]


def _python_tokenizer_class() -> type:
    try:  # transformers 5 keeps the Python implementation under this name
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

        return BertTokenizerLegacy
    except ImportError:  # transformers 4: BertTokenizer is the Python one
        from transformers import BertTokenizer as PythonBertTokenizer

        return PythonBertTokenizer


@functools.cache
def ours(name: str) -> BertTokenizer:
    vocab, lower = VOCABS[name]
    return BertTokenizer(vocab, do_lower_case=lower)


class _WithoutNFC:
    """`unicodedata` for transformers' tokenizer module, minus the NFC step transformers added."""

    def __getattr__(self, name: str):
        return getattr(unicodedata, name)

    @staticmethod
    def normalize(form: str, text: str) -> str:
        return text if form == "NFC" else unicodedata.normalize(form, text)


class GoogleFullTokenizer:
    """transformers' Python BertTokenizer with the NFC step it adds to Google's code turned off."""

    def __init__(self, vocab: Path, do_lower_case: bool = True, **options):
        self.tokenizer = _python_tokenizer_class()(str(vocab), do_lower_case=do_lower_case, **options)
        self.module = sys.modules[type(self.tokenizer.basic_tokenizer).__module__]

    def __getattr__(self, name: str):
        return getattr(self.tokenizer, name)

    def tokenize(self, text: str) -> list[str]:
        saved, self.module.unicodedata = self.module.unicodedata, _WithoutNFC()
        try:
            return self.tokenizer.tokenize(text)
        finally:
            self.module.unicodedata = saved


@functools.cache
def theirs(name: str) -> GoogleFullTokenizer:
    vocab, lower = VOCABS[name]
    return GoogleFullTokenizer(vocab, lower)


@functools.cache
def sweep() -> list[str]:
    """One text per code point: the Latin, Greek, Cyrillic... blocks, general punctuation, CJK
    punctuation, a sample of the rest, and every one the fast path hands to the reference.
    (All 1.1 million code points agree too, but take minutes.)"""
    cps = set(range(0x800)) | set(range(0x2000, 0x2070)) | set(range(0x3000, 0x3100))
    cps |= set(range(0x800, 0x110000, 257))
    cps |= {ord(c) for c in _char_classes().needs_reference_lower if not 0xD800 <= ord(c) < 0xE000}
    return [f"a{chr(cp)}b {chr(cp)}A{chr(cp)}" for cp in sorted(cps)]


def _normalize(tokenizer: BertTokenizer, text: str) -> str:
    """What a slice of the original text becomes once normalised (to compare offsets with tokens)."""
    text = "".join(c for c in text if not (c in "\x00\ufffd" or unicodedata.category(c)[0] == "C"))
    text = tokenizer.basic_tokenizer.normalize_word(text)
    return text.replace("\u03c2", "\u03c3")  # which sigma depends on the rest of the word


# ---- parity ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VOCABS)
def test_reference_path_equals_transformers_python_tokenizer(name):
    for text in CORPUS + sweep():
        assert ours(name).tokenize(text) == theirs(name).tokenize(text), repr(text)


@pytest.mark.parametrize("name", VOCABS)
def test_fast_path_equals_reference(name):
    tok = ours(name)
    texts = CORPUS + sweep()
    for text, encoding in zip(texts, tok.encode_batch(texts, add_special_tokens=False)):
        assert encoding.tokens == tok.tokenize(text), repr(text)
        assert encoding.ids == tok.convert_tokens_to_ids(tok.tokenize(text)), repr(text)


@functools.cache
def fuzz() -> list[str]:
    """Random strings over all of ASCII (controls, tabs, brackets), special tokens, spaces and a few
    non-ASCII characters, to cut text into pieces where `encode_ids_batch` might go wrong."""
    rng = random.Random(0)
    alphabet = [chr(i) for i in range(128)] + [" "] * 20 + ["[MASK]", "[SEP]", "[MA\u200bSK]", "é", "e\u0301",
                                                             "\u200b", "\u00a0", "中", "Σ", "the", "##", "aff"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40))) for _ in range(2000)]


@pytest.mark.parametrize("name", VOCABS)
@pytest.mark.parametrize("budget", [0, 10**9], ids=["rust", "reference"])
def test_ids_path_equals_reference(name, budget, monkeypatch):
    """Whichever path the pieces that are not plain ASCII take (Rust, or the reference while few)."""
    monkeypatch.setattr("bert_core.model.tokenization._REFERENCE_CHAR_BUDGET", budget)
    tok = BertTokenizer(*VOCABS[name])
    texts = CORPUS + sweep() + fuzz()
    expected = [tok.convert_tokens_to_ids(tok.tokenize(text)) for text in texts]
    assert tok.encode_ids_batch(texts) == expected
    # Again from the cache, in another order; and with a cache so small that it is cleared often.
    assert tok.encode_ids_batch(texts[::-1]) == expected[::-1]
    monkeypatch.setattr("bert_core.model.tokenization._PIECE_CACHE_LIMIT", 50)
    small = BertTokenizer(*VOCABS[name])
    for first in range(0, len(texts), 20):
        assert small.encode_ids_batch(texts[first: first + 20]) == expected[first: first + 20]
        assert len(small._piece_ids) <= 50 + 20 * 40


def test_ids_path_keeps_plain_ascii_out_of_rust(monkeypatch):
    tok = BertTokenizer(UNCASED)
    text = "The U.S.A. (and Mr. Smith's 3,000 dollars) won't-stop at 50%; ok?"
    assert tok.encode_ids_batch([text, "", "  two  spaces "]) == [
        tok.convert_tokens_to_ids(tok.tokenize(t)) for t in (text, "", "  two  spaces ")]
    assert tok._fast_tokenizer is None  # neither the Rust pipeline nor its character tables were built
    few = ["tab\tinside", "naïve café", "“quoted”"]
    assert tok.encode_ids_batch(few) == [tok.convert_tokens_to_ids(tok.tokenize(t)) for t in few]
    assert tok._fast_tokenizer is None  # a few pieces that are not plain ASCII: the reference took them
    monkeypatch.setattr("bert_core.model.tokenization._REFERENCE_CHAR_BUDGET", 40)
    many = ["".join(chr(0x4E00 + i) for i in range(30)), "Ωμέγα"]  # past the budget of characters
    assert tok.encode_ids_batch(many) == [tok.convert_tokens_to_ids(tok.tokenize(t)) for t in many]
    assert tok._fast_tokenizer is not None  # many: Rust
    assert "The" in tok._piece_ids and "the" in tok._piece_ids  # "The" shares the entry of "the"
    clone = pickle.loads(pickle.dumps(tok))
    assert clone._piece_ids == {} and clone.encode_ids_batch([text]) == tok.encode_ids_batch([text])
    with pytest.raises(BertPipelineError, match="list of texts"):
        tok.encode_ids_batch(text)
    with pytest.raises(BertPipelineError, match=r"texts\[1\] is int"):
        tok.encode_ids_batch(["ok", 3])


def test_corpus_exercises_what_it_claims():
    tok = ours("uncased")
    assert tok.tokenize("Cafe\u0301 na\u00efve") == ["cafe", "naive"]
    # cased: the combining accent stays a character of its own, as in Google's tokenizer
    assert ours("cased").tokenize("Cafe\u0301") == ["Cafe", "##\u0301"] != ours("cased").tokenize("Café")
    assert tok.tokenize("北京") == ["北", "京"]
    assert tok.tokenize("b" * 101) == ["[UNK]"]
    cleaned = ["null", "##by", "##te", "zero", "##wi", "##dt", "##h"]  # "nullbyte zerowidth"
    assert tok.tokenize("null\x00byte zero\u200bwidth") == cleaned
    assert tok.tokenize("Fill [MASK]x [mask]") == ["fill", "[MASK]", "x", "[", "mask", "]"]
    assert tok.tokenize("[MA\u200bSK]") == ["[MASK]"]
    assert tok.tokenize("ΟΔΟΣ")[-1] == "##ος" and "##σ" in tok.tokenize("ΟΔΟΣΑ")
    assert tok.tokenize("$5") == ["$", "5"] and tok.tokenize("a^b") == ["a", "^", "b"]
    assert tok.tokenize("") == [] and tok.tokenize(" \t\u3000") == []


def test_ascii_shortcut_is_sound():
    """`_needs_reference` and the offset fix-up skip ASCII text: nothing in their sets is ASCII."""
    classes = _char_classes()
    assert not any(c.isascii() for c in classes.needs_reference_lower | classes.joining)
    assert "\u03a3" in classes.needs_reference_lower and "\u0301" in classes.joining


def test_ordinary_text_does_not_fall_back_to_the_reference(monkeypatch):
    tok = ours("uncased")
    # Everything but Greek capitals, a special token hidden by a control character and the rare
    # characters goes through Rust, text not in NFC (decomposed accents, jamo) included.
    odd = ("ΟΔΟΣ", "ΣΣ", "[MA\u200bSK]", "a\u1dfab", "lone \ud800")
    ordinary = [text for text in CORPUS if not text.startswith(odd)]
    assert len(ordinary) == len(CORPUS) - len(odd)
    monkeypatch.setattr(BertTokenizer, "_reference_pieces", lambda self, text: pytest.fail(repr(text)))
    tok.encode_batch(ordinary, ordinary[::-1])


@pytest.mark.parametrize(
    "text",
    ["ΑΣ ΠΑΜΕ", "x\u1dfay", "lone \ud800 surrogate", "[MA\u200bSK]", "[SEP\x07]"],
)
def test_texts_the_fast_pipeline_gets_wrong_go_through_the_reference(text):
    tok = ours("uncased")
    encoding = tok.encode(text, add_special_tokens=False)
    assert encoding.tokens == tok.tokenize(text) == theirs("uncased").tokenize(text)


# ---- ids, segments and offsets ---------------------------------------------------------------


@pytest.mark.parametrize("name", VOCABS)
def test_offsets_slice_back_to_each_token(name):
    tok = ours(name)
    firsts, seconds = CORPUS, CORPUS[::-1]
    for a, b, enc in zip(firsts, seconds, tok.encode_batch(firsts, seconds)):
        assert enc.ids == tok.convert_tokens_to_ids(
            ["[CLS]", *tok.tokenize(a), "[SEP]", *tok.tokenize(b), "[SEP]"]
        )
        for token, (start, end), seq in zip(enc.tokens, enc.offsets, enc.sequence_ids):
            if seq is None:
                assert token in ("[CLS]", "[SEP]") and (start, end) == (0, 0)
                continue
            original = (a, b)[seq][start:end]
            assert start < end, (token, a, b)
            if token in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]") and "[" in original:
                assert _normalize(tok, original).upper() == token  # written in the text
            elif token != "[UNK]":
                # "in", not "==": a character can normalise to more than one token (NFD Hangul)
                piece = _normalize(tok, token.removeprefix("##"))
                assert piece in _normalize(tok, original), (token, original)


@pytest.mark.parametrize("name", VOCABS)
def test_reference_offsets_equal_fast_offsets(name):
    """The fallback's offsets, computed in Python, agree with the Rust ones wherever both apply."""
    tok = ours(name)
    texts = [t for t in CORPUS if not tok._needs_reference(t)]
    for text, pieces in zip(texts, tok._pieces_batch(texts, "texts")):
        reference = tok._reference_pieces(text)
        assert (reference.tokens, reference.ids) == (pieces.tokens, pieces.ids)
        assert reference.offsets == pieces.offsets, repr(text)


def test_pair_layout():
    tok = ours("uncased")
    enc = tok.encode("Hello there!", "Good morning, Anna")
    assert enc.tokens == ["[CLS]", "hello", "there", "!", "[SEP]", "good", "morning", ",", "anna", "[SEP]"]
    assert enc.ids[0] == tok.cls_token_id and enc.ids[4] == enc.ids[-1] == tok.sep_token_id
    assert enc.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert enc.sequence_ids == [None, 0, 0, 0, None, 1, 1, 1, 1, None]
    first = [(0, 0), (0, 5), (6, 11), (11, 12), (0, 0)]
    second = [(0, 4), (5, 12), (12, 13), (14, 18), (0, 0)]
    assert enc.offsets == first + second
    assert len(enc) == 10


def test_single_text_and_no_special_tokens():
    tok = ours("cased")
    enc = tok.encode("Ein Café")
    assert enc.tokens == ["[CLS]", "Ein", "Café", "[SEP]"] and enc.segment_ids == [0] * 4
    assert enc.offsets == [(0, 0), (0, 3), (4, 8), (0, 0)]
    bare = tok.encode("Ein Café", add_special_tokens=False)
    assert bare.tokens == ["Ein", "Café"] and bare.sequence_ids == [0, 0]
    assert tok.encode("") == tok.encode_batch([""])[0]
    assert tok.encode("").tokens == ["[CLS]", "[SEP]"]


def test_offsets_take_in_combining_marks():
    def offsets(name: str, text: str) -> list[tuple[int, int]]:
        return ours(name).encode(text, add_special_tokens=False).offsets

    # precomposed and decomposed accents alike
    assert offsets("uncased", "Caf\u00e9 au lait\u0308") == [(0, 4), (5, 7), (8, 11), (11, 13)]
    assert offsets("cased", "Caf\u00e9 au lait\u0308") == [(0, 4), (5, 7), (8, 13)]
    assert offsets("uncased", "Cafe\u0301 au lait\u0308") == [(0, 5), (6, 8), (9, 12), (12, 14)]
    # cased: the vocab has "##\u0301", a piece of its own (the precomposed "é" is not this word's)
    assert offsets("cased", "Cafe\u0301 au lait\u0308") == [(0, 4), (4, 5), (6, 8), (9, 14)]
    assert offsets("uncased", "\u1100\u1161\u11a8") == [(0, 1), (1, 2), (2, 3)]  # one token per jamo


def test_special_tokens_written_in_the_text_keep_their_offsets():
    enc = ours("uncased").encode("a [MASK] b")
    assert enc.tokens[2] == "[MASK]" and enc.offsets[2] == (2, 8) and enc.sequence_ids[2] == 0


# ---- truncation ---------------------------------------------------------------------------------

A = "one two three four five six"  # 6 tokens
B = "seven eight nine"  # 3 tokens


def _lengths(enc) -> tuple[int, int]:
    return enc.sequence_ids.count(0), enc.sequence_ids.count(1)


def test_longest_first_removes_from_the_longer_sequence_one_at_a_time():
    tok = ours("uncased")
    assert _lengths(tok.encode(A, B, max_length=3 + 7)) == (4, 3)
    assert _lengths(tok.encode(A, B, max_length=3 + 4)) == (2, 2)  # ties: the second loses first
    assert _lengths(tok.encode(A, B, max_length=3 + 3)) == (2, 1)
    assert _lengths(tok.encode(A, B, max_length=100)) == (6, 3)
    kept = tok.encode(A, B, max_length=3 + 5)
    assert kept.tokens == ["[CLS]", "one", "two", "three", "[SEP]", "seven", "eight", "[SEP]"]
    assert tok.encode(A, max_length=4).tokens == ["[CLS]", "one", "two", "[SEP]"]
    assert tok.encode(A, max_length=2, add_special_tokens=False).tokens == ["one", "two"]


def test_only_first_and_only_second():
    tok = ours("uncased")
    assert _lengths(tok.encode(A, B, max_length=3 + 5, truncation="only_first")) == (2, 3)
    assert _lengths(tok.encode(A, B, max_length=3 + 7, truncation="only_second")) == (6, 1)
    with pytest.raises(BertPipelineError, match="only_first.*max_length=5"):
        tok.encode(A, B, max_length=5, truncation="only_first")
    with pytest.raises(BertPipelineError, match="first sequence alone has 6"):
        tok.encode(A, B, max_length=8, truncation="only_second")
    with pytest.raises(BertPipelineError, match="only_second.*needs pairs"):
        tok.encode_batch([A], max_length=4, truncation="only_second")


def test_no_truncation_makes_overlong_input_an_error():
    tok = ours("uncased")
    assert len(tok.encode(A, B, max_length=12, truncation=None)) == 12
    with pytest.raises(BertPipelineError, match=r"input 1 has 12 tokens.*max_length=11"):
        tok.encode_batch(["x", A], ["y", B], max_length=11, truncation=None)
    with pytest.raises(BertPipelineError, match="no room for the 3 special tokens"):
        tok.encode(A, B, max_length=2)
    with pytest.raises(BertPipelineError, match="truncation must be one of"):
        tok.encode(A, truncation="longest")  # type: ignore[arg-type]


def test_batch_arguments_are_checked():
    tok = ours("uncased")
    with pytest.raises(BertPipelineError, match="list of texts"):
        tok.encode_batch("just a string")  # type: ignore[arg-type]
    with pytest.raises(BertPipelineError, match="2 texts but 1 pairs"):
        tok.encode_batch(["a", "b"], ["c"])
    with pytest.raises(BertPipelineError, match=r"texts\[1\] is NoneType"):
        tok.encode_batch(["a", None])  # type: ignore[list-item]


# ---- vocab ---------------------------------------------------------------------------------------


def test_google_vocabs_load_like_transformers():
    for name in VOCABS:
        tok = ours(name)
        assert tok.vocab == dict(theirs(name).vocab)
        ids = (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id)
        assert ids == (0, 100, 101, 102, 103)
    assert len(ours("uncased")) == ours("uncased").vocab_size == 30522
    assert "\u2028" in ours("chinese").vocab  # a token that str.splitlines()/strip() would lose


def test_token_and_id_conversion():
    tok = ours("uncased")
    assert tok.convert_tokens_to_ids(["hello", "no-such-token", "##ing"]) == [7592, 100, 2075]
    assert tok.convert_tokens_to_ids("[MASK]") == 103
    assert tok.convert_ids_to_tokens([101, 7592, 102]) == ["[CLS]", "hello", "[SEP]"]
    assert tok.convert_ids_to_tokens(7592) == "hello"
    assert tok.ids_to_tokens[7592] == "hello"
    for bad in (30522, -1):
        with pytest.raises(BertPipelineError, match=f"token id {bad} .*vocab size 30522"):
            tok.convert_ids_to_tokens([1, bad])


def _write(tmp_path: Path, text: str | bytes, name: str = "vocab.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


SPECIALS = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("", "is empty"),
        ("\n", "empty lines 1"),
        (SPECIALS + "hello\nworld\nhello\n", r"duplicate tokens: 'hello' on lines 6 and 8"),
        (SPECIALS + "a\n\nb\n", "empty lines 7"),
        ("[PAD]\n[CLS]\nhello\n", r"missing the special tokens \[UNK\] \[SEP\] \[MASK\]"),
        (b"[PAD]\n\xff\xfe\n", "is not UTF-8"),
    ],
)
def test_bad_vocab_files_are_named_and_explained(tmp_path, content, message):
    path = tmp_path / "vocab.txt" if content is None else _write(tmp_path, content)
    with pytest.raises(BertPipelineError, match=message) as info:
        load_vocab(path)
    assert str(path) in str(info.value)
    with pytest.raises(BertPipelineError, match=message):
        BertTokenizer(path)


def test_vocab_line_endings_and_bom(tmp_path):
    crlf = _write(tmp_path, "\ufeff" + SPECIALS.replace("\n", "\r\n") + "hello  \r\nworld")
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world"]
    assert load_vocab(crlf) == {token: index for index, token in enumerate(tokens)}


def test_from_model_dir_reads_casing(tmp_path):
    (tmp_path / "vocab.txt").write_bytes(CASED.read_bytes())
    assert BertTokenizer.from_model_dir(tmp_path).do_lower_case is True  # default
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 768, "do_lower_case": False}))
    assert BertTokenizer.from_model_dir(tmp_path).tokenize("Hello") == ["Hello"]
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"do_lower_case": True, "strip_accents": False})
    )
    tok = BertTokenizer.from_model_dir(str(tmp_path))
    assert tok.do_lower_case is True and tok.tokenize("Héllo") == ["h", "##é", "##llo"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": "yes"}))
    with pytest.raises(BertPipelineError, match='do_lower_case must be true or false, not "yes"'):
        BertTokenizer.from_model_dir(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(BertPipelineError, match="tokenizer_config.json is not valid JSON"):
        BertTokenizer.from_model_dir(tmp_path)
    with pytest.raises(ModelNotFoundError, match="has no vocab.txt"):
        BertTokenizer.from_model_dir(tmp_path / "missing")


def test_options_match_transformers():
    texts = ["Héllo Wörld 中文字", "x" * 12 + " " + "ab" * 4]
    for options in [
        {"do_lower_case": True, "strip_accents": False},
        {"do_lower_case": False, "strip_accents": True},
        {"do_lower_case": True, "tokenize_chinese_chars": False},
    ]:
        tok, ref = BertTokenizer(UNCASED, **options), GoogleFullTokenizer(UNCASED, **options)
        all_texts = texts + CORPUS
        fast = [enc.tokens for enc in tok.encode_batch(all_texts, add_special_tokens=False)]
        assert [tok.tokenize(t) for t in all_texts] == [ref.tokenize(t) for t in all_texts] == fast, options
    short = BertTokenizer(UNCASED, max_input_chars_per_word=10)
    assert short.tokenize(texts[1]) == short.encode(texts[1], add_special_tokens=False).tokens
    assert short.tokenize(texts[1])[0] == "[UNK]" and BertTokenizer(UNCASED).tokenize(texts[1])[0] != "[UNK]"


def test_tokenizer_pickles_for_worker_processes():
    tok = ours("uncased")
    tok.encode("warm up the fast path")
    clone = pickle.loads(pickle.dumps(tok))
    assert clone.encode_batch(CORPUS[:5]) == tok.encode_batch(CORPUS[:5])


def test_character_classes_are_cached_on_disk_and_rebuilt_when_unreadable(tmp_path, monkeypatch):
    from bert_core.model import tokenization
    monkeypatch.setenv("BERT_PIPELINE_CACHE", str(tmp_path))
    scanned = tokenization._scan_char_classes()
    try:
        _char_classes.cache_clear()
        assert _char_classes() == scanned  # scanned, then written
        (cached,) = (tmp_path / "tokenizer").glob("char-classes-*.json")
        _char_classes.cache_clear()
        monkeypatch.setattr(tokenization, "_scan_char_classes", lambda: pytest.fail("scanned again"))
        assert _char_classes() == scanned  # read back, every class and set equal (lone surrogates too)
        assert "\ud800" in _char_classes().needs_reference

        cached.write_text('{"removed": "[^a]"}', encoding="utf-8")  # a file this code did not write
        monkeypatch.setattr(tokenization, "_scan_char_classes", lambda: scanned)
        _char_classes.cache_clear()
        assert _char_classes() == scanned
        assert json.loads(cached.read_text(encoding="utf-8"))["removed"] == scanned.removed
    finally:
        _char_classes.cache_clear()


# ---- canonical equivalents: no normalisation in cased models (Google's FullTokenizer) -----------

# Our own words, each written in two canonically equivalent ways (NFC would make them one).
EQUIVALENTS = [
    ("δο\u1f7bλος", "δο\u03cdλος"),  # Greek upsilon with oxia (U+1F7B) vs with tonos (U+03CD)
    ("\u1f71ρτος", "\u03acρτος"),  # alpha with oxia vs tonos
    ("caf\u00e9 na\u00efve", "cafe\u0301 nai\u0308ve"),  # precomposed vs combining accents
    ("Ti\u1ebfng Vi\u1ec7t", "Tie\u0302\u0301ng Vie\u0323\u0302t"),  # Vietnamese: stacked marks
    ("\u1e69 and \u1e69", "s\u0323\u0307 and s\u0307\u0323"),  # one letter, marks in either order
    ("\ud55c\uad6d\uc5b4", "\u1112\u1161\u11ab\u1100\u116e\u11a8\u110b\u1165"),  # Hangul syllables vs jamo
    ("\u212b and \u2126", "\u00c5 and \u03a9"),  # Angstrom and Ohm signs (singletons) vs letters
]
# Not canonical equivalents: NFC leaves them alone in any case (compatibility forms).
COMPATIBILITY = ["the \ufb01ne \ufb02ow", "\uff21\uff22\uff23\uff11\uff12", "\u2460 \u00bd x\u00b2"]


@pytest.mark.parametrize("name", ["cased", "uncased"])
def test_canonical_equivalents_match_googles_tokenizer(name):
    texts = [text for pair in EQUIVALENTS for text in pair] + COMPATIBILITY
    tok = ours(name)
    for text, encoding in zip(texts, tok.encode_batch(texts, add_special_tokens=False)):
        expected = theirs(name).tokenize(text)
        assert tok.tokenize(text) == expected, repr(text)
        assert encoding.tokens == expected, repr(text)


def test_cased_tokens_keep_characters_as_written():
    """Cased: U+1F7B is not its NFC equivalent U+03CD (the STS-B sentence of the defect report), and a
    decomposed accent is not the precomposed letter; uncased: accent stripping makes them one."""
    cased, uncased = ours("cased"), ours("uncased")
    oxia, tonos = EQUIVALENTS[0]
    assert cased.tokenize(oxia) == ["[UNK]"] != cased.tokenize(tonos)
    assert "[UNK]" not in cased.tokenize(tonos)
    assert cased.tokenize("cafe\u0301") != cased.tokenize("caf\u00e9")
    for a, b in EQUIVALENTS[:5]:
        assert uncased.tokenize(a) == uncased.tokenize(b), (a, b)
