"""Google BERT's `create_pretraining_data.py` algorithm, on token ids, for one bounded unit of documents.

A *unit* is a chunk of consecutive documents of one input file. For it, `build_unit` does what
Google's script does for its whole corpus: tokenize every line, drop empty documents, shuffle the
documents, make `dupe_factor` passes of `create_instances_from_document` (target length with
`short_seq_prob`, random split point, 50% random next sentence, unused segments put back,
`truncate_seq_pair` from the front or back at random, masking with 80/10/10 and optional whole-word
masking), then shuffle the instances.

Where the random next sentence comes from differs: Google draws it from the whole corpus, we draw
it from the unit (up to a thousand documents by default; see ShardConfig). Both draw a uniformly
random *other* document; with hundreds to choose from the two are the same for training, while the
unit keeps memory bounded and lets units run in parallel. A unit's random numbers depend only on the
seed and the unit's position (file index, chunk index), so the output does not depend on how many
workers run the units.

Two ways of drawing, with the same distributions:

* `google_random_stream=True`: every draw is the one Google's script makes, from one `random.Random`
  (through `_randbelow`, `_randint` and `_shuffle`, which consume it exactly as `random.Random`'s
  methods do, without their per-call overhead; tests check it). The first unit (file 0, chunk 0) is
  seeded with the seed itself, so a single-file, single-unit run gives exactly Google's instances
  (`python -m evaluation.make_shards --check-exact` compares them with the real script's).
* default: segments are drawn the same way, but truncation draws how many tokens to cut from the
  front at once (`_truncate_spans`), and the instance shuffle and all masks come from a numpy
  generator for the whole unit at once (`mask_instances`): several times faster.

Either way an instance is made as two spans of the unit's concatenated tokens (`_document_spans`):
A and B are runs of consecutive segments and truncation only cuts their ends, so no token is copied
until the instance is written (by `_gather_instances`, for all instances of a unit at once, or one
at a time when Google's draws need the tokens to mask).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from bert_core.errors import BertPipelineError
from bert_core.options import Form, option

SPLITS = ("all", "train", "heldout")


def is_heldout(document: Sequence[str], fraction: float) -> bool:
    """Whether a document (its stripped, non-empty lines) belongs to the held-out side of `fraction`."""
    if fraction <= 0.0:
        return False
    digest = hashlib.sha256("\n".join(document).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < fraction


MASKING = "instances and masking (Google's create_pretraining_data.py flags)"
UNITS = "units, shards and memory"
HOLDOUT = "held-out split"


@dataclass(frozen=True)
class ShardConfig:
    """Everything that decides the shards' bytes (recorded in the manifest). Workers are not in it:
    the output does not depend on them. The make-shards flags are generated from these fields."""

    GROUPS = (MASKING, UNITS, HOLDOUT)

    max_seq_length: int = option(128, "tokens per instance, [CLS] and [SEP]s included", group=MASKING,
                                 section=Form.DATA)
    max_predictions_per_seq: int = option(20, "most masked-LM predictions per instance", group=MASKING,
                                          section=Form.DATA)
    masked_lm_prob: float = option(0.15, "fraction of an instance's tokens to predict", group=MASKING,
                                   section=Form.DATA)
    short_seq_prob: float = option(0.1, "probability of a document's instances targeting a random shorter length",
                                   group=MASKING, section=Form.DATA)
    dupe_factor: int = option(5, "passes over the input, each with fresh masks", group=MASKING, section=Form.DATA)
    random_seed: int = option(12345, "seed of the instances and their masks", group=MASKING, section=Form.DATA)
    whole_word_mask: bool = option(False, "mask all WordPiece pieces of a word together (Google's "
                                   "--do_whole_word_mask)", group=MASKING, section=Form.DATA)
    do_lower_case: bool = option(True, "keep case, for cased vocabs (default: lower-case and strip accents "
                                 "before WordPiece, for uncased vocabs: --do-lower-case)", group=MASKING,
                                 section=Form.DATA,
                                 negate="--cased", aliases=("--do-lower-case",),
                                 switch_help="lower-case and strip accents before WordPiece, for uncased vocabs; off: keep case, for cased vocabs")
    # A unit closes after this many documents or this many characters of text, whichever comes first
    # (a worker needs ~50 bytes per character of its unit; smaller units also balance workers better).
    chunk_documents: int = option(1000, "documents per unit of work; the random next sentence is drawn from the "
                                  "unit", group=UNITS, section=Form.DATA, metavar="N")
    chunk_chars: int = option(1_000_000, "a unit also closes after this many characters of text (bounds memory "
                              "with long documents)", group=UNITS, section=Form.DATA, metavar="N")
    instances_per_shard: int = option(10_000, "instances per .npz shard; the last one may hold fewer",
                                      group=UNITS, section=Form.DATA,
                                      metavar="N")
    # Draw every random number as Google's script does (about 2x slower). A single-unit run then gives
    # Google's instances exactly; otherwise the same distribution comes from faster vectorised draws.
    google_random_stream: bool = option(False, "draw every random number exactly as Google's script does (about "
                                        "2x slower to make instances). Default: the same distributions from faster "
                                        "vectorised draws. With it, a single-file input that fits in one unit "
                                        "gives exactly Google's instances", group=MASKING, section=Form.DATA)
    # Instances from consecutive units are mixed in a buffer of this many before being written.
    shuffle_buffer: int = option(20_000, "instances from consecutive units are mixed in a buffer of this many "
                                 "before being written", group=UNITS, section=Form.DATA, metavar="N")
    # Held-out split by document: a document is held out when the hash of its text falls below
    # holdout_fraction (is_heldout), so the split depends neither on file order, units nor the seed, and
    # a document repeated in the corpus lands on the same side. split "all" keeps every document;
    # "train" / "heldout" keep one side (make_split_shards writes both).
    holdout_fraction: float = option(0.0, "hold out about this fraction of the documents (chosen by a hash of "
                                     "each document's text, so the split is stable across runs and seeds) as "
                                     "evaluation shards: one masking pass, random next sentences from held-out "
                                     "documents only; 0: none", group=HOLDOUT, section=Form.DATA, metavar="F")
    split: str = option("all", cli=False)

    def check(self) -> None:
        problems = []
        if self.max_seq_length < 5:
            problems.append("max_seq_length must be at least 5 ([CLS] A [SEP] B [SEP] with A, B non-empty)")
        if self.max_predictions_per_seq < 1:
            problems.append("max_predictions_per_seq must be at least 1")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            problems.append("masked_lm_prob must be in (0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            problems.append("short_seq_prob must be in [0, 1]")
        for name in ("dupe_factor", "chunk_documents", "chunk_chars", "instances_per_shard"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1")
        if self.shuffle_buffer < 0:
            problems.append("shuffle_buffer must be >= 0")
        if not 0.0 <= self.holdout_fraction < 1.0:
            problems.append(f"holdout_fraction must be in [0, 1), got {self.holdout_fraction}")
        if self.split not in SPLITS:
            problems.append(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        elif self.split != "all" and self.holdout_fraction <= 0.0:
            problems.append(f"split {self.split!r} needs a holdout_fraction above 0")
        if problems:
            raise BertPipelineError("make-shards: " + "; ".join(problems))


def prediction_budget(lengths, masked_lm_prob: float, max_predictions_per_seq: int):
    """Google's num_to_predict: how many positions of an instance of `lengths` tokens ([CLS] and [SEP]s
    counted) are masked-LM predictions: round(length x masked_lm_prob), half to even, at least 1, at most
    max_predictions_per_seq. Masking and shard validation both use it.

    `lengths`: an int (one instance: an int back) or an integer array (one budget per instance, int64). The
    int path stays in plain Python: Google's random stream masks one instance at a time, and numpy on one
    scalar would cost it a fifth of its speed."""
    if isinstance(lengths, np.ndarray):
        return np.minimum(max_predictions_per_seq, np.maximum(1, np.round(lengths * masked_lm_prob))).astype(np.int64)
    return min(max_predictions_per_seq, max(1, round(lengths * masked_lm_prob)))


@dataclass(frozen=True)
class Vocab:
    """What the algorithm needs from the vocabulary, by id."""

    ids: list[int]  # every id in vocab-file order: Google's `vocab_words`, for random replacement
    cls_id: int
    sep_id: int
    mask_id: int
    is_subword: bytes = field(repr=False)  # is_subword[id] == 1 for "##" pieces (whole-word masking)

    @classmethod
    def from_dict(cls, vocab: dict[str, int]) -> Vocab:
        missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in vocab]
        if missing:
            raise BertPipelineError(f"the vocab has no {' '.join(missing)} token(s); BERT pretraining needs them")
        flags = bytearray(max(vocab.values()) + 1)
        for token, index in vocab.items():
            if token.startswith("##"):
                flags[index] = 1
        return cls(list(vocab.values()), vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], bytes(flags))


# --------------------------------------------------------------------------------------------
# Random draws, consuming the generator exactly as random.Random does
# --------------------------------------------------------------------------------------------


def _randbelow(getrandbits, n: int) -> int:
    k = n.bit_length()
    r = getrandbits(k)
    while r >= n:
        r = getrandbits(k)
    return r


def _randint(getrandbits, a: int, b: int) -> int:
    return a + _randbelow(getrandbits, b - a + 1)


_BIT_LENGTHS = [n.bit_length() for n in range(4097)]


def _shuffle(getrandbits, x: list) -> None:
    bit_lengths = _BIT_LENGTHS if len(x) < len(_BIT_LENGTHS) else [n.bit_length() for n in range(len(x) + 1)]
    for i in range(len(x) - 1, 0, -1):
        n = i + 1
        k = bit_lengths[n]
        j = getrandbits(k)
        while j >= n:
            j = getrandbits(k)
        x[i], x[j] = x[j], x[i]


def unit_seed(seed: int, file_index: int, chunk_index: int) -> int:
    """The seed of one unit: the run's seed for the first unit (Google's stream), a hash otherwise."""
    if file_index == 0 and chunk_index == 0:
        return seed
    digest = hashlib.sha256(f"bert-pipeline/make-shards/{seed}/{file_index}/{chunk_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


# --------------------------------------------------------------------------------------------
# Tokenization
# --------------------------------------------------------------------------------------------


_ENCODE_BATCH = 64  # documents per encode_ids_batch call: bounds the pieces held at once


def tokenize_documents(tokenizer, documents: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Token ids of every line of every document; lines without tokens are dropped, as Google does.

    Google's FullTokenizer knows no special tokens, so "[MASK]" written in the text is "[", "mask",
    "]" there; every "[" is followed by a space first, which changes nothing else ("[" is
    punctuation, a token of its own) but keeps ours from reading a special token in the text.
    """
    result: list[list[list[int]]] = []
    for first in range(0, len(documents), _ENCODE_BATCH):
        batch = documents[first: first + _ENCODE_BATCH]
        lines = [line.replace("[", "[ ") if "[" in line else line for document in batch for line in document]
        ids = iter(tokenizer.encode_ids_batch(lines))
        for document in batch:
            result.append([line for line in itertools.islice(ids, len(document)) if line])
    return result


# --------------------------------------------------------------------------------------------
# Google's algorithm
# --------------------------------------------------------------------------------------------


@dataclass
class Instance:
    tokens: list[int]  # [CLS] A [SEP] B [SEP], masked
    len_a: int  # tokens of A (so segment 1 starts at len_a + 2)
    masked_positions: list[int]
    masked_labels: list[int]
    is_random_next: bool


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    """Truncate the longer sequence one token at a time, from the front or back at random (in place)."""
    start_a, len_a, start_b, len_b = _truncate_spans_google(0, len(tokens_a), 0, len(tokens_b), max_num_tokens,
                                                            rng.random)
    tokens_a[:] = tokens_a[start_a: start_a + len_a]
    tokens_b[:] = tokens_b[start_b: start_b + len_b]


def _truncate_spans_google(start_a: int, len_a: int, start_b: int, len_b: int, max_num_tokens: int,
                           random_) -> tuple[int, int, int, int]:
    """Google's truncate_seq_pair on two spans, a coin flip per removed token: (start, length) of each."""
    while len_a + len_b > max_num_tokens:
        # Removing from the front as well as the back adds more randomness and avoids biases.
        if len_a > len_b:
            len_a -= 1
            if random_() < 0.5:
                start_a += 1
        else:
            len_b -= 1
            if random_() < 0.5:
                start_b += 1
    return start_a, len_a, start_b, len_b


def truncate_seq_pair_fast(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                           getrandbits) -> tuple[list[int], list[int]]:
    """truncate_seq_pair's result distribution without its token-by-token loop (see `_truncate_spans`)."""
    start_a, keep_a, start_b, keep_b = _truncate_spans(0, len(tokens_a), 0, len(tokens_b), max_num_tokens,
                                                       getrandbits)
    return tokens_a[start_a: start_a + keep_a], tokens_b[start_b: start_b + keep_b]


def _truncate_spans(start_a: int, len_a: int, start_b: int, len_b: int, max_num_tokens: int,
                    getrandbits) -> tuple[int, int, int, int]:
    """truncate_seq_pair on two spans: their (start, length) afterwards.

    Which side loses how many tokens does not depend on chance (always the longer one, B on ties);
    only whether each removal is at the front or the back does, a fair coin each time, so the number
    taken from the front of a side is Binomial(removals, 1/2): the popcount of that many random bits
    (drawn for A first, then B).
    """
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return start_a, len_a, start_b, len_b
    keep_a, keep_b = len_a, len_b
    gap = min(excess, abs(len_a - len_b))
    if len_a > len_b:
        keep_a -= gap
    else:
        keep_b -= gap
    excess -= gap
    keep_b -= (excess + 1) // 2
    keep_a -= excess // 2
    if keep_a < len_a:
        start_a += bin(getrandbits(len_a - keep_a)).count("1")
    if keep_b < len_b:
        start_b += bin(getrandbits(len_b - keep_b)).count("1")
    return start_a, keep_a, start_b, keep_b


def create_masked_lm_predictions(tokens: list[int], config: ShardConfig, vocab: Vocab,
                                 rng: random.Random) -> tuple[list[int], list[int], list[int]]:
    """(masked tokens, sorted positions, original ids at them) as Google's function makes them."""
    cls_id, sep_id = vocab.cls_id, vocab.sep_id
    cand_indexes: list = []
    if config.whole_word_mask:
        is_subword = vocab.is_subword
        for i, token in enumerate(tokens):
            if token == cls_id or token == sep_id:
                continue
            if cand_indexes and is_subword[token]:
                cand_indexes[-1].append(i)
            else:
                cand_indexes.append([i])
    elif tokens.count(sep_id) == 2 and tokens.count(cls_id) == 1:
        # Single positions instead of one-element lists: the shuffle draws the same numbers.
        len_a = tokens.index(sep_id) - 1
        cand_indexes = [*range(1, len_a + 1), *range(len_a + 2, len(tokens) - 1)]
    else:
        cand_indexes = [i for i, token in enumerate(tokens) if token != cls_id and token != sep_id]
    getrandbits = rng.getrandbits
    _shuffle(getrandbits, cand_indexes)

    num_to_predict = prediction_budget(len(tokens), config.masked_lm_prob, config.max_predictions_per_seq)
    # Google also checks that no index of a candidate is already covered; candidates are disjoint
    # (each position is in exactly one), so that check never fires and is left out.
    if config.whole_word_mask:
        selected: list[int] = []
        for index_set in cand_indexes:
            if len(selected) >= num_to_predict:
                break
            # A whole word that would go past the budget is skipped, as Google skips it.
            if len(selected) + len(index_set) > num_to_predict:
                continue
            selected.extend(index_set)
    else:
        selected = cand_indexes[:num_to_predict]

    output_tokens = list(tokens)
    random_ = rng.random
    vocab_ids = vocab.ids
    num_vocab = len(vocab_ids)
    mask_id = vocab.mask_id
    for index in selected:
        if random_() < 0.8:  # 80%: [MASK]
            output_tokens[index] = mask_id
        elif random_() < 0.5:  # 10%: keep the original
            pass
        else:  # 10%: a random vocabulary token
            output_tokens[index] = vocab_ids[_randbelow(getrandbits, num_vocab)]
    positions = sorted(selected)
    return output_tokens, positions, [tokens[p] for p in positions]


def create_instances_from_document(all_documents: list[list[list[int]]], document_index: int,
                                   config: ShardConfig, vocab: Vocab, rng: random.Random) -> list[Instance]:
    """Google's function of the same name, on ids (all_documents is the unit's documents), masked."""
    bounds = _segment_bounds(all_documents)
    tokens = list(itertools.chain.from_iterable(itertools.chain.from_iterable(all_documents)))
    return [_masked_instance(tokens, span, config, vocab, rng)
            for span in _document_spans(bounds, document_index, config, rng, google_truncation=True)]


Span = tuple[int, int, int, int, bool]  # (start of A, length of A, start of B, length of B, random next)


def _segment_bounds(documents: list[list[list[int]]]) -> list[list[int]]:
    """bounds[d][k]: where segment k of document d starts in the documents' concatenated tokens;
    bounds[d][-1]: where document d ends."""
    bounds: list[list[int]] = []
    offset = 0
    for document in documents:
        starts = [offset]
        for segment in document:
            offset += len(segment)
            starts.append(offset)
        bounds.append(starts)
    return bounds


def _document_spans(bounds: list[list[int]], document_index: int, config: ShardConfig, rng: random.Random,
                    google_truncation: bool) -> Iterator[Span]:
    """Google's create_instances_from_document, up to masking, with instances as spans of tokens.

    A and B are always runs of consecutive segments of one document, and truncation cuts them from
    the ends, so each is a span of the documents' concatenated tokens and only segment lengths are
    needed. The draws are Google's, call for call; truncation draws a coin per removed token with
    `google_truncation`, else how many to cut from the front at once (`_truncate_spans`). A caller
    that masks an instance before asking for the next one consumes `rng` exactly as Google's
    script does.
    """
    document = bounds[document_index]
    num_segments = len(document) - 1
    getrandbits = rng.getrandbits
    random_ = rng.random
    # Account for [CLS], [SEP], [SEP].
    max_num_tokens = config.max_seq_length - 3
    # Usually fill the whole sequence, but sometimes (short_seq_prob) a shorter one, to lessen the
    # mismatch between pretraining and fine-tuning on short inputs. Chosen once per document, as Google does.
    target_seq_length = max_num_tokens
    if random_() < config.short_seq_prob:
        target_seq_length = _randint(getrandbits, 2, max_num_tokens)
    chunk_start = 0  # Google's current_chunk: segments chunk_start..i
    i = 0
    while i < num_segments:
        if i == num_segments - 1 or document[i + 1] - document[chunk_start] >= target_seq_length:
            chunk_size = i + 1 - chunk_start
            # How many segments of the chunk go into A.
            a_end = 1
            if chunk_size >= 2:
                a_end = _randint(getrandbits, 1, chunk_size - 1)
            start_a = document[chunk_start]
            len_a = document[chunk_start + a_end] - start_a
            if chunk_size == 1 or random_() < 0.5:
                is_random_next = True
                target_b_length = target_seq_length - len_a
                # Ten tries at another document; in a one-document unit B comes from the same one.
                for _ in range(10):
                    random_document_index = _randint(getrandbits, 0, len(bounds) - 1)
                    if random_document_index != document_index:
                        break
                other = bounds[random_document_index]
                random_start = _randint(getrandbits, 0, len(other) - 2)
                start_b = other[random_start]
                # Whole segments from there until B reaches its target length or the document ends.
                end = random_start + 1
                while end < len(other) - 1 and other[end] - start_b < target_b_length:
                    end += 1
                len_b = other[end] - start_b
                # The segments not used for A are put back, so they are not wasted.
                i -= chunk_size - a_end
            else:
                is_random_next = False
                start_b = document[chunk_start + a_end]
                len_b = document[i + 1] - start_b
            if google_truncation:
                span = _truncate_spans_google(start_a, len_a, start_b, len_b, max_num_tokens, random_)
            else:
                span = _truncate_spans(start_a, len_a, start_b, len_b, max_num_tokens, getrandbits)
            if span[1] < 1 or span[3] < 1:
                raise AssertionError(f"empty segment after truncation: A has {span[1]} tokens, B {span[3]}")
            yield (*span, is_random_next)
            chunk_start = i + 1
        i += 1


def _masked_instance(tokens: list[int], span: Span, config: ShardConfig, vocab: Vocab,
                     rng: random.Random) -> Instance:
    start_a, len_a, start_b, len_b, is_random_next = span
    instance = [vocab.cls_id, *tokens[start_a: start_a + len_a], vocab.sep_id,
                *tokens[start_b: start_b + len_b], vocab.sep_id]
    masked, positions, labels = create_masked_lm_predictions(instance, config, vocab, rng)
    return Instance(masked, len_a, positions, labels, is_random_next)


def create_instances(documents: list[list[list[int]]], config: ShardConfig, vocab: Vocab,
                     seed: int) -> dict[str, np.ndarray]:
    """Google's create_training_instances after tokenization (shuffle documents, dupe passes, shuffle
    instances, mask), returning the instances packed as shard arrays.

    With `google_random_stream` every draw is Google's: instances are masked one at a time as they
    are made, as its script does, packed as they come, and the final shuffle permutes row indices
    (shuffling a list of indices draws the same numbers as shuffling the instances). Otherwise
    segments are drawn the same way, truncation draws fewer numbers (`_truncate_spans`), and the
    instance shuffle and the masks come from a numpy generator for the whole unit at once
    (`mask_instances`), the instances being copied from their spans in one vectorised gather
    (`_gather_instances`): the same distribution, several times faster.
    """
    rng = random.Random(seed)
    documents = [d for d in documents if d]
    _shuffle(rng.getrandbits, documents)
    bounds = _segment_bounds(documents)
    exact = config.google_random_stream
    spans = (span for _ in range(config.dupe_factor) for document_index in range(len(documents))
             for span in _document_spans(bounds, document_index, config, rng, google_truncation=exact))
    if exact:
        tokens = list(itertools.chain.from_iterable(itertools.chain.from_iterable(documents)))
        packer = _Packer(config)
        for span in spans:
            packer.add(_masked_instance(tokens, span, config, vocab, rng))
        order = list(range(packer.rows))
        _shuffle(rng.getrandbits, order)
        return packer.arrays(order)
    columns = [np.asarray(column, dtype=np.int64) for column in zip(*spans)] or [np.zeros(0, np.int64)] * 5
    generator = np.random.Generator(np.random.PCG64([seed & (2**64 - 1), 0x4D41534B]))
    order = generator.permutation(len(columns[0]))
    tokens = np.fromiter(itertools.chain.from_iterable(itertools.chain.from_iterable(documents)), dtype=np.int32)
    arrays = _gather_instances(tokens, *(column[order] for column in columns), config, vocab)
    mask_instances(arrays, config, vocab, generator)
    return arrays


def _gather_instances(tokens: np.ndarray, start_a: np.ndarray, len_a: np.ndarray, start_b: np.ndarray,
                      len_b: np.ndarray, random_next: np.ndarray, config: ShardConfig,
                      vocab: Vocab) -> dict[str, np.ndarray]:
    """Shard arrays (ARCHITECTURE §5), unmasked, of instances [CLS] A [SEP] B [SEP] given as spans."""
    n, t, p = len(len_a), config.max_seq_length, config.max_predictions_per_seq
    input_ids = np.zeros((n, t), dtype=np.int32)
    segment_ids = np.zeros((n, t), dtype=np.int8)
    column = np.arange(t)[None, :]
    for first in range(0, n, _BLOCK_ROWS):  # in blocks: the index arrays are 8 bytes per cell
        rows = slice(first, first + _BLOCK_ROWS)
        la, lb = len_a[rows, None], len_b[rows, None]
        in_a = (column >= 1) & (column <= la)
        in_b = (column >= la + 2) & (column < la + 2 + lb)
        index = np.where(in_a, start_a[rows, None] + column - 1, np.where(in_b, start_b[rows, None] + column - la - 2, 0))
        block = np.where(in_a | in_b, tokens[index] if len(tokens) else 0, 0).astype(np.int32)
        block[:, 0] = vocab.cls_id
        block[(column == la + 1) | (column == la + lb + 2)] = vocab.sep_id
        input_ids[rows] = block
        segment_ids[rows] = (column >= la + 2) & (column < la + lb + 3)
    return {
        "input_ids": input_ids,
        "segment_ids": segment_ids,
        "valid_lengths": (len_a + len_b + 3).astype(np.int32),
        "masked_lm_positions": np.zeros((n, p), dtype=np.int32),
        "masked_lm_ids": np.zeros((n, p), dtype=np.int32),
        "masked_lm_weights": np.zeros((n, p), dtype=np.float32),
        "next_sentence_labels": random_next.astype(np.int8),
    }


def mask_instances(arrays: dict[str, np.ndarray], config: ShardConfig, vocab: Vocab,
                   generator: np.random.Generator) -> None:
    """Google's create_masked_lm_predictions for every instance at once, in place.

    Candidates are all tokens but [CLS] and the two [SEP]s; a uniformly random order of them is drawn
    (random keys, sorted); the first min(max_predictions_per_seq, max(1, round(length * masked_lm_prob)))
    are predicted; each shows [MASK] with probability 0.8, itself 0.1, a uniformly random vocabulary
    token 0.1. Whole-word masking walks the words of each instance in random order, skipping a word
    that would exceed the budget, as Google does.
    """
    ids = arrays["input_ids"]
    n, t = ids.shape
    p = config.max_predictions_per_seq
    if n == 0:
        return
    lengths = arrays["valid_lengths"].astype(np.int64)
    column = np.arange(t)[None, :]
    first_sep = (arrays["segment_ids"] == 0).sum(axis=1) - (t - lengths) - 1
    candidate = (column >= 1) & (column < lengths[:, None] - 1) & (column != first_sep[:, None])
    budget = prediction_budget(lengths, config.masked_lm_prob, p)
    keys = generator.random((n, t))
    positions = np.full((n, p), t, dtype=np.int64)  # t marks "no prediction"
    if config.whole_word_mask:
        _whole_word_positions(ids, candidate, keys, budget, vocab, positions)
    else:
        keys[~candidate] = 2.0
        k = min(p, t)
        # The k smallest keys of each row, then in key order: a random order of k candidates.
        smallest = np.argpartition(keys, k - 1, axis=1)[:, :k] if k < t else np.tile(np.arange(t), (n, 1))
        order = np.take_along_axis(smallest, np.argsort(np.take_along_axis(keys, smallest, axis=1), axis=1), axis=1)
        chosen = (np.arange(k)[None, :] < budget[:, None]) & (np.take_along_axis(keys, order, axis=1) < 2.0)
        positions[:, :k] = np.sort(np.where(chosen, order, t), axis=1)
    real = positions < t
    rows = np.nonzero(real)[0]
    cols = positions[real]
    originals = ids[rows, cols]
    draw = generator.random(len(rows))
    replacement = np.asarray(vocab.ids, dtype=np.int32)[generator.integers(0, len(vocab.ids), len(rows))]
    ids[rows, cols] = np.where(draw < 0.8, vocab.mask_id, np.where(draw < 0.9, originals, replacement))
    arrays["masked_lm_positions"][:] = np.where(real, positions, 0)
    labels = np.zeros((n, p), dtype=np.int32)
    labels[real] = originals
    arrays["masked_lm_ids"][:] = labels
    arrays["masked_lm_weights"][:] = real.astype(np.float32)


def _whole_word_positions(ids: np.ndarray, candidate: np.ndarray, keys: np.ndarray, budget: np.ndarray,
                          vocab: Vocab, out: np.ndarray) -> None:
    """Sorted predicted positions per row, into `out` (pre-filled with "none"), for whole-word masking.

    Google's words: a candidate starts a new word unless it is a "##" piece and some candidate comes
    before it in the instance ([CLS]/[SEP] are not candidates, so a piece may join the word before a
    [SEP]). Words are visited in random order (their first token's key) and taken while they fit.
    """
    subword = np.frombuffer(vocab.is_subword, dtype=np.uint8).astype(bool)
    for row in range(len(ids)):
        cands = np.flatnonzero(candidate[row])
        if not len(cands):
            continue
        starts = ~subword[ids[row, cands]]
        starts[0] = True
        bounds = np.flatnonzero(starts).tolist() + [len(cands)]
        chosen: list[int] = []
        limit = int(budget[row])
        for word in np.argsort(keys[row, cands[starts]], kind="stable").tolist():
            if len(chosen) >= limit:
                break
            size = bounds[word + 1] - bounds[word]
            if len(chosen) + size > limit:
                continue
            chosen.extend(cands[bounds[word]: bounds[word + 1]].tolist())
        chosen.sort()
        out[row, : len(chosen)] = chosen


# --------------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------------


_BLOCK_ROWS = 1024


class _Packer:
    """Instances packed into shard arrays (ARCHITECTURE §5), 0-padded, a block of rows at a time.

    Rows wait as Python lists until a block is full and are then written with a few vectorised
    assignments: cheaper than seven small numpy assignments per instance.
    """

    def __init__(self, config: ShardConfig) -> None:
        self.config = config
        self.blocks: list[dict[str, np.ndarray]] = []
        self.pending: list[Instance] = []
        self.rows = 0

    def _empty(self, n: int) -> dict[str, np.ndarray]:
        t, p = self.config.max_seq_length, self.config.max_predictions_per_seq
        return {
            "input_ids": np.zeros((n, t), dtype=np.int32),
            "segment_ids": np.zeros((n, t), dtype=np.int8),
            "valid_lengths": np.zeros(n, dtype=np.int32),
            "masked_lm_positions": np.zeros((n, p), dtype=np.int32),
            "masked_lm_ids": np.zeros((n, p), dtype=np.int32),
            "masked_lm_weights": np.zeros((n, p), dtype=np.float32),
            "next_sentence_labels": np.zeros(n, dtype=np.int8),
        }

    def add(self, instance: Instance) -> None:
        if len(instance.tokens) > self.config.max_seq_length:
            raise AssertionError(f"instance of {len(instance.tokens)} tokens > max_seq_length "
                                 f"{self.config.max_seq_length}")
        self.pending.append(instance)
        self.rows += 1
        if len(self.pending) >= _BLOCK_ROWS:
            self._flush()

    def _flush(self) -> None:
        rows = self.pending
        if not rows:
            return
        self.pending = []
        block = self._empty(len(rows))
        t, p = self.config.max_seq_length, self.config.max_predictions_per_seq
        lengths = np.fromiter((len(r.tokens) for r in rows), dtype=np.int64, count=len(rows))
        inside = np.arange(t)[None, :] < lengths[:, None]
        block["input_ids"][inside] = np.fromiter(
            itertools.chain.from_iterable(r.tokens for r in rows), dtype=np.int32, count=int(lengths.sum()))
        starts_b = np.fromiter((r.len_a + 2 for r in rows), dtype=np.int64, count=len(rows))
        block["segment_ids"][inside & (np.arange(t)[None, :] >= starts_b[:, None])] = 1
        block["valid_lengths"][:] = lengths
        counts = np.fromiter((len(r.masked_positions) for r in rows), dtype=np.int64, count=len(rows))
        predicted = np.arange(p)[None, :] < counts[:, None]
        total = int(counts.sum())
        if total:
            block["masked_lm_positions"][predicted] = np.fromiter(
                itertools.chain.from_iterable(r.masked_positions for r in rows), dtype=np.int32, count=total)
            block["masked_lm_ids"][predicted] = np.fromiter(
                itertools.chain.from_iterable(r.masked_labels for r in rows), dtype=np.int32, count=total)
            block["masked_lm_weights"][predicted] = 1.0
        block["next_sentence_labels"][:] = np.fromiter((r.is_random_next for r in rows), dtype=np.int8,
                                                       count=len(rows))
        self.blocks.append(block)

    def arrays(self, order: Sequence[int] | None = None) -> dict[str, np.ndarray]:
        self._flush()
        if not self.blocks:
            return self._empty(0)
        result = {}
        index = np.asarray(order if order is not None else range(self.rows), dtype=np.int64)
        for key in self.blocks[0]:
            merged = np.concatenate([block[key] for block in self.blocks])
            result[key] = merged[index]
            for block in self.blocks:  # free as we go: the blocks and the result would double the peak
                block[key] = merged[:0]
            del merged
        self.blocks = []
        return result


def pack_instances(instances: Sequence[Instance], config: ShardConfig) -> dict[str, np.ndarray]:
    """Instances as the arrays of a shard, in the given order."""
    packer = _Packer(config)
    for instance in instances:
        packer.add(instance)
    return packer.arrays()


@dataclass
class UnitResult:
    file_index: int
    chunk_index: int
    arrays: dict[str, np.ndarray]
    documents: int
    tokens: int


def build_unit(tokenizer, vocab: Vocab, config: ShardConfig, file_index: int, chunk_index: int,
               documents: Sequence[Sequence[str]]) -> UnitResult:
    """All instances of one unit (documents as lists of stripped, non-empty lines), packed."""
    tokenized = tokenize_documents(tokenizer, documents)
    seed = unit_seed(config.random_seed, file_index, chunk_index)
    return UnitResult(
        file_index, chunk_index, create_instances(tokenized, config, vocab, seed),
        documents=sum(1 for d in tokenized if d),
        tokens=sum(len(line) for d in tokenized for line in d),
    )
