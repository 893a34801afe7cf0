"""The `build-vocab` step: segmented text -> a WordPiece vocab.txt laid out like Google's BERT vocabs.

Trained with the `tokenizers` library's WordPiece trainer behind BERT's normalisation (cleaning,
CJK characters split, lower-casing and accent stripping unless cased) and pre-tokenisation
(whitespace and punctuation), so the vocabulary fits what bert_core.model.tokenization produces.

Layout, as in Google's vocabs: `[PAD]`, `[unused0]`..`[unused98]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`,
the remaining `[unusedN]` (room for task tokens later), then the learned tokens (characters, `##`
characters, then pieces in the trainer's merge order). Google's vocabs have 994 unused tokens; smaller
vocabularies get proportionally fewer unless `unused` is given.

The output is `vocab.txt` plus its manifest: `DIR/vocab.txt` + `DIR/manifest.json` when the output is
a directory, `NAME.txt` + `NAME.txt.manifest.json` beside it when it is a file name (a vocab is often
written next to other artifacts, whose manifest.json it must not replace). Both are written to
temporary names and renamed.

The same input and settings give the same vocab.txt, byte for byte, in any process: the trainer alone does not
(huggingface/tokenizers#1794; train_wordpiece says how that is mended).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.data.text_inputs import SEGMENTED_REMEDY, iter_lines, resolve_inputs
from bert_core.errors import BertPipelineError
from bert_core.io import manifest, storage

log = logging.getLogger(__name__)

STEP = "build-vocab"
SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
GOOGLE_UNUSED = 994
MIN_LEARNED = 50  # fewer learned tokens than this cannot even hold the characters of ordinary text
_UNUSED_BEFORE_UNK = 99  # [unused0]..[unused98] sit between [PAD] and [UNK] in Google's vocabs


@dataclass(frozen=True)
class VocabConfig:
    vocab_size: int = 30522
    do_lower_case: bool = True
    unused: int | None = None  # None: 994 (Google's) for full-size vocabs, about 3% for small ones
    min_frequency: int = 2
    limit_alphabet: int = 1000  # most frequent characters kept; rarer ones become [UNK]

    def num_unused(self) -> int:
        return self.unused if self.unused is not None else min(GOOGLE_UNUSED, self.vocab_size // 30)

    def check(self) -> None:
        if self.num_unused() < 0:
            raise BertPipelineError("build-vocab: --unused must be >= 0")
        learned = self.vocab_size - len(SPECIALS) - self.num_unused()
        if learned < MIN_LEARNED:
            raise BertPipelineError(
                f"build-vocab: --vocab-size {self.vocab_size} leaves {learned} learned tokens after "
                f"{len(SPECIALS)} special and {self.num_unused()} unused ones, fewer than the {MIN_LEARNED} a vocab "
                f"needs; make it at least {self.smallest_size(MIN_LEARNED)} or lower --unused")

    def smallest_size(self, learned: int) -> int:
        """The least --vocab-size that leaves `learned` learned tokens (the default --unused grows with it)."""
        size = self.vocab_size
        while size - len(SPECIALS) - dataclasses.replace(self, vocab_size=size).num_unused() < learned:
            size += 1
        return size


def layout(learned: list[str], num_unused: int) -> list[str]:
    """Google's order: [PAD], unused, [UNK] [CLS] [SEP] [MASK], more unused, learned tokens."""
    before = min(num_unused, _UNUSED_BEFORE_UNK)
    return [
        "[PAD]",
        *(f"[unused{i}]" for i in range(before)),
        "[UNK]", "[CLS]", "[SEP]", "[MASK]",
        *(f"[unused{i}]" for i in range(before, num_unused)),
        *learned,
    ]


def _lines(files: list[tuple[str, Path]]) -> Iterator[list[str]]:
    batch: list[str] = []
    for uri, path in files:
        for line in iter_lines(path, uri, remedy=SEGMENTED_REMEDY):
            if line.strip():
                batch.append(line)
                if len(batch) >= 1000:
                    yield batch
                    batch = []
    if batch:
        yield batch


def _trainer_vocab(files: list[tuple[str, Path]], config: VocabConfig, vocab_size: int,
                   kept: list[str]) -> list[str]:
    """The vocab of one run of tokenizers' WordPiece trainer, in its id order; `kept` go in first, after SPECIALS."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=config.do_lower_case)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=config.min_frequency, special_tokens=[*SPECIALS, *kept],
        limit_alphabet=config.limit_alphabet, continuing_subword_prefix="##",
        # The trainer's own bars (words read, pairs counted, merges): where a person watches, not in a log file.
        show_progress=sys.stderr.isatty(),
    )
    tokenizer.train_from_iterator(_lines(files), trainer=trainer)
    return [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]


def train_wordpiece(files: list[tuple[str, Path]], config: VocabConfig) -> list[str]:
    """Learned tokens (no specials): the characters (the trainer's alphabet, in its order), the continuing
    characters (`##c`, sorted), then the pieces in the order the trainer merged them. The same for the same input.

    tokenizers' trainer alone is not reproducible (huggingface/tokenizers#1794): it numbers the `##c` pieces in
    hash-map order as it meets them, and breaks ties between equally frequent merges by those numbers, so two
    builds of one corpus differed in a few tokens. A first pass with no merges (its alphabet work alone, a fraction
    of the training) finds the `##c` pieces; the second pass gets them, sorted, as tokens to keep, which fixes their
    numbers before the trainer compares any."""
    log.info("build-vocab: first pass (the characters)")
    first = _trainer_vocab(files, config, 0, [])
    continuing = sorted(token for token in first if token.startswith("##"))
    log.info("build-vocab: second pass (%d characters, %d ## characters; the merges)", len(first) - len(SPECIALS)
             - len(continuing), len(continuing))
    trained = _trainer_vocab(files, config, config.vocab_size - config.num_unused(), continuing)
    alphabet = [token for token in first if token not in SPECIALS and not token.startswith("##")]
    known = set(SPECIALS) | set(continuing) | set(alphabet)
    pieces = [token for token in trained if token not in known]
    # Tokens with a newline or other whitespace would break the one-token-per-line format.
    return [token for token in alphabet + continuing + pieces if token and token.strip() == token and "\n" not in token]


def _targets(output: str) -> tuple[str, str]:
    """(vocab URI, manifest URI) for a directory or file output."""
    is_dir = output.endswith("/") or (not storage.is_s3(output) and storage.local_path(output).is_dir())
    if is_dir or not output.rsplit("/", 1)[-1].count("."):
        return storage.join(output, "vocab.txt"), storage.join(output, manifest.MANIFEST)
    return output, output + ".manifest.json"


def _write(uri: str, text: str) -> None:
    if storage.is_s3(uri):
        tmp = storage.cache_root() / "uploads" / uri.rsplit("/", 1)[-1]
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        storage.upload_file(tmp, uri)
        return
    path = storage.local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    os.replace(tmp, path)


def build_vocab(inputs: list[str], output: str, config: VocabConfig | None = None,
                overwrite: bool = False) -> dict[str, Any]:
    """Run the step; return its manifest. An existing vocab made otherwise is replaced only with overwrite."""
    config = config or VocabConfig()
    config.check()
    started = manifest.now()
    uris = resolve_inputs(inputs)
    files = [(uri, storage.local_file(uri)) for uri in uris]
    hashes = {uri: manifest.sha256_file(path) for uri, path in files}
    vocab_uri, manifest_uri = _targets(output)
    if not storage.is_s3(manifest_uri) and storage.local_path(manifest_uri).is_file():
        old = json.loads(storage.local_path(manifest_uri).read_text(encoding="utf-8"))
        same = (old.get("step") == STEP and old.get("config") == manifest.build(STEP, config, {}, ".", [], started)["config"]
                and {i["uri"]: i["sha256"] for i in old.get("inputs", [])} == hashes
                and storage.local_path(vocab_uri).is_file()
                and [o["sha256"] for o in old.get("outputs", [])] == [manifest.sha256_file(storage.local_path(vocab_uri))])
        if same:
            log.info("%s is already the vocab of these inputs with this config: nothing to do", vocab_uri)
            return old
    if not overwrite and storage.exists(vocab_uri):
        raise BertPipelineError(f"{vocab_uri} already exists (made from other inputs or flags, or by hand); "
                                "pass --overwrite to replace it")
    learned = train_wordpiece(files, config)
    if not learned:
        raise BertPipelineError(f"build-vocab: no text in {', '.join(uris)}")
    tokens = layout(learned, config.num_unused())
    if len(tokens) > config.vocab_size:
        singles = [token for token in learned if len(token.removeprefix("##")) == 1]
        characters, continuing = len(singles), sum(1 for token in singles if token.startswith("##"))
        # The trainer keeps every character of its alphabet (and its ## form) whatever vocab_size says; a vocab
        # larger than asked breaks a model config sized by --vocab-size, so say it instead of writing it.
        raise BertPipelineError(
            f"build-vocab: --vocab-size {config.vocab_size} is too small for this text: its characters alone are "
            f"{characters} tokens ({characters - continuing} and {continuing} ## forms), {len(tokens)} with the "
            "special and unused ones; give --vocab-size "
            f"{config.smallest_size(characters)} or more, or keep fewer characters with --limit-alphabet (now "
            f"{config.limit_alphabet})")
    text = "".join(f"{token}\n" for token in tokens)
    result = {
        "step": STEP,
        "config": manifest.build(STEP, config, {}, ".", [], started)["config"],
        "inputs": [{"uri": uri, "sha256": digest} for uri, digest in sorted(hashes.items())],
        "outputs": [{"path": vocab_uri.rsplit("/", 1)[-1], "sha256": hashlib.sha256(text.encode()).hexdigest()}],
        "started_at": started,
        "finished_at": manifest.now(),
        "vocab_size": len(tokens),
        "learned_tokens": len(learned),
        "unused_tokens": config.num_unused(),
    }
    if len(tokens) < config.vocab_size:
        log.warning("build-vocab: the input only supports %d tokens (asked for %d)", len(tokens), config.vocab_size)
    # The vocab first, then the manifest that vouches for it: a crash in between leaves no manifest.
    _write(vocab_uri, text)
    _write(manifest_uri, json.dumps(result, indent=2) + "\n")
    log.info("build-vocab: %d tokens (%d learned, %d unused) -> %s", len(tokens), len(learned),
             config.num_unused(), vocab_uri)
    return result
