"""Google's create_pretraining_data rules, on our id-based implementation."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bert_core.data import instances as pd
from bert_core.data.instances import ShardConfig, Vocab
from bert_core.errors import BertPipelineError
from bert_core.model.tokenization import BertTokenizer
from tests.corpus_text import documents
from tests.paths import FIXTURES

VOCAB_FILE = FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt"


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    return BertTokenizer(VOCAB_FILE)


@pytest.fixture(scope="module")
def vocab(tokenizer) -> Vocab:
    return Vocab.from_dict(tokenizer.vocab)


@pytest.fixture(scope="module")
def corpus(tokenizer) -> list[list[list[int]]]:
    return pd.tokenize_documents(tokenizer, documents(150, seed=11, min_sentences=2, max_sentences=14))


def build(corpus, config: ShardConfig, vocab: Vocab, seed: int = 5) -> dict[str, np.ndarray]:
    return pd.create_instances([list(d) for d in corpus], config, vocab, seed)


@pytest.fixture(params=[False, True], ids=["vectorised", "google-stream"])
def exact(request) -> bool:
    """Both ways of drawing: the default vectorised masks, and Google's own random stream."""
    return request.param


# --------------------------------------------------------------------------------------------
# Random draws
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_inlined_draws_consume_the_generator_like_random(seed):
    ours, theirs = random.Random(seed), random.Random(seed)
    for length in (0, 1, 2, 3, 7, 64, 65, 128, 129, 300, 5000):
        a, b = list(range(length)), list(range(length))
        pd._shuffle(ours.getrandbits, a)
        theirs.shuffle(b)
        assert a == b
        assert pd._randint(ours.getrandbits, 0, length + 1) == theirs.randint(0, length + 1)
    for a, b in ((2, 125), (0, 30521), (1, 1), (0, 2**40)):
        assert pd._randint(ours.getrandbits, a, b) == theirs.randint(a, b)
    assert ours.getstate() == theirs.getstate()


def test_unit_seed_is_the_seed_for_the_first_unit_and_distinct_otherwise():
    assert pd.unit_seed(12345, 0, 0) == 12345
    seeds = {pd.unit_seed(12345, f, c) for f in range(4) for c in range(4)}
    assert len(seeds) == 16
    assert pd.unit_seed(12345, 1, 0) != pd.unit_seed(12346, 1, 0)


# --------------------------------------------------------------------------------------------
# Tokenization
# --------------------------------------------------------------------------------------------


def test_tokenize_documents_equals_line_by_line_tokenization(tokenizer):
    docs = documents(30, seed=3)
    docs[4] = ["A line that spells [SEP] and [MASK] literally.", "\u0001", "Next line here."]
    got = pd.tokenize_documents(tokenizer, docs)
    for doc, lines in zip(docs, got):
        expected = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line.replace("[", "[ "))) for line in doc]
        assert lines == [ids for ids in expected if ids]  # lines without tokens are dropped, as Google does
    words = tokenizer.convert_ids_to_tokens(got[4][0])
    assert words[4:7] == ["[", "sep", "]"] and "[SEP]" not in words and "[MASK]" not in words
    assert len(got[4]) == 2


def test_vocab_without_mask_is_a_clear_error():
    with pytest.raises(BertPipelineError, match=r"no \[MASK\]"):
        Vocab.from_dict({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4})


# --------------------------------------------------------------------------------------------
# Instances
# --------------------------------------------------------------------------------------------


def original_ids(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """input_ids with the masked positions given back their original ids."""
    ids = arrays["input_ids"].copy()
    rows, cols = np.nonzero(arrays["masked_lm_weights"])
    ids[rows, arrays["masked_lm_positions"][rows, cols]] = arrays["masked_lm_ids"][rows, cols]
    return ids


def test_instance_layout(corpus, vocab, exact):
    config = ShardConfig(max_seq_length=64, max_predictions_per_seq=10, google_random_stream=exact)
    arrays = build(corpus, config, vocab)
    ids = original_ids(arrays)
    n = len(ids)
    assert n > 200
    for r in range(n):
        length = arrays["valid_lengths"][r]
        row = ids[r, :length].tolist()
        assert 5 <= length <= 64 and (ids[r, length:] == 0).all()
        assert row[0] == vocab.cls_id and row[-1] == vocab.sep_id and row.count(vocab.sep_id) == 2
        first_sep = row.index(vocab.sep_id)
        assert first_sep >= 2 and length - first_sep >= 3  # A and B each hold at least one token
        segments = arrays["segment_ids"][r]
        assert (segments[: first_sep + 1] == 0).all() and (segments[first_sep + 1: length] == 1).all()
        assert (segments[length:] == 0).all()


def test_masking_counts_positions_and_80_10_10(corpus, vocab, exact):
    config = ShardConfig(max_seq_length=128, max_predictions_per_seq=20, google_random_stream=exact)
    arrays = build(corpus, config, vocab, seed=9)
    originals = original_ids(arrays)
    weights = arrays["masked_lm_weights"]
    counts = weights.sum(axis=1).astype(int)
    expected = np.minimum(20, np.maximum(1, np.round(arrays["valid_lengths"] * 0.15).astype(int)))
    assert (counts == expected).all()
    kinds = {"mask": 0, "same": 0, "random": 0}
    for r in range(len(counts)):
        k = counts[r]
        positions = arrays["masked_lm_positions"][r, :k]
        assert (np.diff(positions) > 0).all()  # sorted, unique
        assert (positions > 0).all() and (positions < arrays["valid_lengths"][r]).all()
        assert not np.isin(originals[r, positions], [vocab.cls_id, vocab.sep_id]).any()
        assert (arrays["masked_lm_ids"][r, :k] == originals[r, positions]).all()
        assert (arrays["masked_lm_positions"][r, k:] == 0).all() and (weights[r, k:] == 0).all()
        shown = arrays["input_ids"][r, positions]
        kinds["mask"] += int((shown == vocab.mask_id).sum())
        kinds["same"] += int((shown == originals[r, positions]).sum())
        kinds["random"] += int(((shown != vocab.mask_id) & (shown != originals[r, positions])).sum())
    total = sum(kinds.values())
    assert total > 15_000  # tolerances below are over 4 standard deviations
    assert abs(kinds["mask"] / total - 0.8) < 0.015
    # A random replacement that happens to draw the original token counts as "same" (p = 1/30522).
    assert abs(kinds["same"] / total - 0.1) < 0.01
    assert abs(kinds["random"] / total - 0.1) < 0.01


def test_next_sentence_is_random_about_half_the_time(tokenizer, vocab):
    long_docs = pd.tokenize_documents(tokenizer, documents(200, seed=4, min_sentences=30, max_sentences=40))
    arrays = build(long_docs, ShardConfig(dupe_factor=3), vocab)
    assert len(arrays["next_sentence_labels"]) > 3000
    # A coin flip, plus the chunks of a single sentence (a document's last), which can only get a random
    # next: Google's algorithm lands a little above one half.
    assert 0.48 < arrays["next_sentence_labels"].mean() < 0.58


def test_single_sentence_document_gets_random_next_only(corpus, vocab):
    docs = [list(d) for d in corpus[:20]] + [[corpus[0][0]]]
    config = ShardConfig()
    instances = pd.create_instances_from_document(docs, len(docs) - 1, config, vocab, random.Random(1))
    assert len(instances) == 1 and instances[0].is_random_next
    # A unit holding only that document still yields an instance (B from the same document, as Google).
    alone = pd.create_instances([[corpus[0][0]]], config, vocab, 1)
    assert len(alone["input_ids"]) == config.dupe_factor and alone["next_sentence_labels"].all()


def test_lines_longer_than_max_seq_length_are_truncated(tokenizer, vocab, exact):
    long_line = " ".join(["harbour"] * 300) + "."
    docs = pd.tokenize_documents(tokenizer, [[long_line, long_line], ["Short one.", long_line]])
    arrays = build(docs, ShardConfig(max_seq_length=32, max_predictions_per_seq=5, google_random_stream=exact), vocab)
    assert len(arrays["input_ids"]) > 0
    assert (arrays["valid_lengths"] == 32).all()
    assert arrays["input_ids"].shape[1] == 32


def test_truncate_seq_pair_trims_the_longer_side_from_both_ends():
    rng = random.Random(0)
    fronts = backs = 0
    for _ in range(200):
        a, b = list(range(10)), list(range(100, 130))
        pd.truncate_seq_pair(a, b, 20, rng)
        assert len(a) + len(b) == 20 and a == list(range(10))  # only the longer side is cut here
        fronts += b[0] != 100
        backs += b[-1] != 129
    assert fronts > 150 and backs > 150
    a, b = list(range(12)), list(range(12))
    pd.truncate_seq_pair(a, b, 10, random.Random(1))
    assert {len(a), len(b)} == {5}


def test_fast_truncation_keeps_googles_lengths_and_coin_flips():
    rng = random.Random(3)
    fronts = []
    for la in range(0, 40, 3):
        for lb in range(1, 40, 4):
            for limit in (2, 10, 25, 60):
                a, b = list(range(la)), list(range(100, 100 + lb))
                ga, gb = list(a), list(b)
                pd.truncate_seq_pair(ga, gb, limit, random.Random(0))
                fa, fb = pd.truncate_seq_pair_fast(a, b, limit, rng.getrandbits)
                assert (len(fa), len(fb)) == (len(ga), len(gb))
                for kept, original in ((fa, a), (fb, b)):  # a contiguous run of the original
                    assert kept == original[original.index(kept[0]):][: len(kept)] if kept else True
                    if len(original) - len(kept) >= 10:
                        fronts.append(original.index(kept[0]) / (len(original) - len(kept)))
    assert abs(np.mean(fronts) - 0.5) < 0.05


def test_whole_word_masking_masks_whole_words_only(tokenizer, vocab, exact):
    docs = documents(120, seed=21, min_sentences=4, max_sentences=12)
    tokenized = pd.tokenize_documents(tokenizer, docs)
    config = ShardConfig(whole_word_mask=True, max_seq_length=64, max_predictions_per_seq=12,
                         google_random_stream=exact)
    arrays = build(tokenized, config, vocab, seed=3)
    originals = original_ids(arrays)
    multi_piece_masked = 0
    for r in range(len(originals)):
        length = arrays["valid_lengths"][r]
        masked = set(arrays["masked_lm_positions"][r, : int(arrays["masked_lm_weights"][r].sum())].tolist())
        # Google's grouping: a "##" piece joins the candidate before it ([CLS]/[SEP] are never candidates).
        groups: list[list[int]] = []
        for i in range(length):
            token = int(originals[r, i])
            if token in (vocab.cls_id, vocab.sep_id):
                continue
            if groups and vocab.is_subword[token]:
                groups[-1].append(i)
            else:
                groups.append([i])
        for group in groups:
            hit = [i in masked for i in group]
            assert all(hit) or not any(hit), f"row {r}: word {group} partly masked"
            multi_piece_masked += len(group) > 1 and all(hit)
    assert multi_piece_masked > 50


def test_dupe_passes_have_fresh_masks_and_scale_the_count(corpus, vocab, exact):
    one = build(corpus, ShardConfig(dupe_factor=1, google_random_stream=exact), vocab)
    three = build(corpus, ShardConfig(dupe_factor=3, google_random_stream=exact), vocab)
    assert 2.7 < len(three["input_ids"]) / len(one["input_ids"]) < 3.3
    # The same unmasked instance appears with different masks across passes.
    originals = original_ids(three)
    by_text: dict[bytes, set[bytes]] = {}
    for r in range(len(originals)):
        by_text.setdefault(originals[r].tobytes(), set()).add(three["masked_lm_positions"][r].tobytes())
    assert any(len(masks) > 1 for masks in by_text.values())


def test_same_seed_same_arrays_other_seed_other_arrays(corpus, vocab, exact):
    a, b, c = (build(corpus, ShardConfig(google_random_stream=exact), vocab, seed=s) for s in (1, 1, 2))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["input_ids"], c["input_ids"])


# --------------------------------------------------------------------------------------------
# Against a plain transcription of Google's algorithm (string tokens, random.Random's own methods)
# --------------------------------------------------------------------------------------------


def google_reference(documents_tokens, vocab_words, config: ShardConfig, rng: random.Random, fast: bool = False):
    """Google's create_training_instances (after tokenization), written out with strings.

    fast=True: what the default (not google_random_stream) path draws from `rng`: the same, but for
    truncation (truncate_seq_pair_fast) and no masks or final shuffle (numpy draws those)."""
    all_documents = [d for d in documents_tokens if d]
    rng.shuffle(all_documents)
    out = []
    for _ in range(config.dupe_factor):
        for doc_index in range(len(all_documents)):
            document = all_documents[doc_index]
            max_num_tokens = config.max_seq_length - 3
            target = max_num_tokens
            if rng.random() < config.short_seq_prob:
                target = rng.randint(2, max_num_tokens)
            chunk, length, i = [], 0, 0
            while i < len(document):
                chunk.append(document[i])
                length += len(document[i])
                if i == len(document) - 1 or length >= target:
                    if chunk:
                        a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                        a = [t for seg in chunk[:a_end] for t in seg]
                        b = []
                        if len(chunk) == 1 or rng.random() < 0.5:
                            random_next = True
                            for _ in range(10):
                                other = rng.randint(0, len(all_documents) - 1)
                                if other != doc_index:
                                    break
                            other_doc = all_documents[other]
                            for seg in other_doc[rng.randint(0, len(other_doc) - 1):]:
                                b.extend(seg)
                                if len(b) >= target - len(a):
                                    break
                            i -= len(chunk) - a_end
                        else:
                            random_next = False
                            b = [t for seg in chunk[a_end:] for t in seg]
                        if fast:
                            a, b = pd.truncate_seq_pair_fast(a, b, max_num_tokens, rng.getrandbits)
                            out.append((["[CLS]", *a, "[SEP]", *b, "[SEP]"], len(a), [], random_next))
                            chunk, length = [], 0
                            i += 1
                            continue
                        while len(a) + len(b) > max_num_tokens:
                            longer = a if len(a) > len(b) else b
                            if rng.random() < 0.5:
                                del longer[0]
                            else:
                                longer.pop()
                        tokens = ["[CLS]", *a, "[SEP]", *b, "[SEP]"]
                        cands = []
                        for k, tok in enumerate(tokens):
                            if tok in ("[CLS]", "[SEP]"):
                                continue
                            if config.whole_word_mask and cands and tok.startswith("##"):
                                cands[-1].append(k)
                            else:
                                cands.append([k])
                        rng.shuffle(cands)
                        num = min(config.max_predictions_per_seq, max(1, int(round(len(tokens) * config.masked_lm_prob))))
                        shown, masked = list(tokens), []
                        for group in cands:
                            if len(masked) >= num:
                                break
                            if len(masked) + len(group) > num:
                                continue
                            for k in group:
                                if rng.random() < 0.8:
                                    shown[k] = "[MASK]"
                                elif rng.random() < 0.5:
                                    shown[k] = tokens[k]
                                else:
                                    shown[k] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
                                masked.append((k, tokens[k]))
                        masked.sort()
                        out.append((shown, len(a), masked, random_next))
                    chunk, length = [], 0
                i += 1
    if not fast:
        rng.shuffle(out)
    return out


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_equals_googles_algorithm_draw_for_draw(tokenizer, vocab, whole_word_mask):
    docs = documents(40, seed=8, min_sentences=1, max_sentences=20)
    docs.append(["one lonely sentence that forms a whole document ."])
    token_docs = [[tokenizer.tokenize(line) for line in doc] for doc in docs]
    config = ShardConfig(max_seq_length=48, max_predictions_per_seq=7, short_seq_prob=0.3, dupe_factor=2,
                         whole_word_mask=whole_word_mask, google_random_stream=True)
    expected = google_reference(token_docs, list(tokenizer.vocab), config, random.Random(77))
    id_docs = [[tokenizer.convert_tokens_to_ids(line) for line in doc] for doc in token_docs]
    arrays = pd.create_instances(id_docs, config, vocab, 77)
    assert len(arrays["input_ids"]) == len(expected)
    for r, (shown, len_a, masked, random_next) in enumerate(expected):
        length = len(shown)
        assert arrays["valid_lengths"][r] == length
        assert arrays["input_ids"][r, :length].tolist() == tokenizer.convert_tokens_to_ids(shown)
        assert arrays["segment_ids"][r, :length].tolist() == [0] * (len_a + 2) + [1] * (length - len_a - 2)
        k = len(masked)
        assert arrays["masked_lm_positions"][r, :k].tolist() == [p for p, _ in masked]
        assert arrays["masked_lm_ids"][r, :k].tolist() == tokenizer.convert_tokens_to_ids([t for _, t in masked])
        assert arrays["next_sentence_labels"][r] == int(random_next)


def test_default_path_makes_the_instances_of_googles_segment_draws(tokenizer, vocab):
    """The default path builds instances as spans of the unit's tokens: the same A and B segments,
    random-next labels and truncation lengths as the list-based algorithm drawing the same numbers."""
    docs = documents(40, seed=9, min_sentences=1, max_sentences=20)
    docs.append(["one lonely sentence that forms a whole document ."])
    token_docs = [[tokenizer.tokenize(line) for line in doc] for doc in docs]
    config = ShardConfig(max_seq_length=48, max_predictions_per_seq=7, short_seq_prob=0.3, dupe_factor=2)
    expected = google_reference(token_docs, list(tokenizer.vocab), config, random.Random(31), fast=True)
    id_docs = [[tokenizer.convert_tokens_to_ids(line) for line in doc] for doc in token_docs]
    arrays = pd.create_instances(id_docs, config, vocab, 31)
    ids = original_ids(arrays)
    got = sorted((tuple(ids[r, : arrays["valid_lengths"][r]].tolist()), int(arrays["segment_ids"][r].argmax()) - 2,
                  int(arrays["next_sentence_labels"][r])) for r in range(len(ids)))
    want = sorted((tuple(tokenizer.convert_tokens_to_ids(shown)), len_a, int(random_next))
                  for shown, len_a, _, random_next in expected)
    assert len(got) == len(want) > 100
    assert got == want


def test_prediction_budget_is_googles_num_to_predict_for_one_instance_and_for_arrays():
    """round(length x masked_lm_prob), half to even, at least 1, at most max_predictions_per_seq; the array form
    (vectorised masking, shard validation) gives what the one-instance form (Google's stream) gives."""
    assert [pd.prediction_budget(n, 0.15, 20) for n in (5, 10, 30, 128, 512)] == [1, 2, 4, 19, 20]
    assert [pd.prediction_budget(n, 0.1, 20) for n in (5, 15, 25)] == [1, 2, 2]  # 0.5 rounds to 0, raised to 1
    lengths = np.arange(0, 600)
    for prob, cap in ((0.15, 20), (0.1, 76), (0.2, 3)):
        budget = pd.prediction_budget(lengths, prob, cap)
        assert budget.dtype == np.int64
        assert budget.tolist() == [pd.prediction_budget(int(n), prob, cap) for n in lengths]
