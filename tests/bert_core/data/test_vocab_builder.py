from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bert_core.data.vocab_builder import VocabConfig, build_vocab, layout
from bert_core.errors import BertPipelineError
from bert_core.model.tokenization import BertTokenizer, load_vocab
from bert_pipeline.cli import main
from tests.corpus_text import documents, write_segmented
from tests.paths import FIXTURES

GOOGLE_VOCAB = FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vocab") / "in.txt"
    docs = documents(400, seed=3)
    docs.append(["Café Über naïve façade.", "Ωμέγα and 中文 characters."])
    return write_segmented(path, docs)


def test_layout_is_googles():
    google = GOOGLE_VOCAB.read_text(encoding="utf-8").split("\n")
    assert layout(["!"], 994) == google[:1000]
    assert layout(["a"], 3) == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]


def test_trained_vocab_loads_and_covers_its_text(corpus, tmp_path):
    result = build_vocab([str(corpus)], str(tmp_path / "vocab.txt"), VocabConfig(vocab_size=700))
    tokens = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(tokens) == len(set(tokens)) == result["vocab_size"] <= 700
    assert tokens[0] == "[PAD]" and tokens[tokens.index("[UNK]"):tokens.index("[UNK]") + 4] == [
        "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert sum(t.startswith("[unused") for t in tokens) == result["unused_tokens"] == 700 // 30
    assert any(t.startswith("##") for t in tokens) and not any(t != t.lower() for t in tokens if "[" not in t)
    assert load_vocab(tmp_path / "vocab.txt")["[MASK]"] == tokens.index("[MASK]")
    tokenizer = BertTokenizer(tmp_path / "vocab.txt")
    pieces = tokenizer.tokenize(corpus.read_text(encoding="utf-8"))
    assert "[UNK]" not in pieces
    assert not any(accented in token for token in tokens for accented in "éÜüï")  # stripped, as uncased BERT
    assert "中" in tokens and "Ω".lower() in tokens
    manifest_data = json.loads((tmp_path / "vocab.txt.manifest.json").read_text())
    assert manifest_data["step"] == "build-vocab" and manifest_data["inputs"][0]["uri"] == str(corpus)


def test_cased_keeps_case(corpus, tmp_path):
    build_vocab([str(corpus)], str(tmp_path / "out"), VocabConfig(vocab_size=700, do_lower_case=False))
    tokens = (tmp_path / "out" / "vocab.txt").read_text(encoding="utf-8").split("\n")
    assert "Ü" in tokens and ("é" in tokens or "##é" in tokens)
    assert any(t != t.lower() for t in tokens if not t.startswith("["))
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_rerun_no_op_other_config_refused(corpus, tmp_path):
    out = str(tmp_path / "v.txt")
    first = build_vocab([str(corpus)], out, VocabConfig(vocab_size=600))
    assert build_vocab([str(corpus)], out, VocabConfig(vocab_size=600))["finished_at"] == first["finished_at"]
    with pytest.raises(BertPipelineError, match="already exists.*--overwrite"):
        build_vocab([str(corpus)], out, VocabConfig(vocab_size=650))
    assert build_vocab([str(corpus)], out, VocabConfig(vocab_size=650), overwrite=True)["config"]["vocab_size"] == 650


def test_bad_sizes(corpus, tmp_path):
    with pytest.raises(BertPipelineError, match="leaves 15 learned tokens"):
        build_vocab([str(corpus)], str(tmp_path / "v.txt"), VocabConfig(vocab_size=40, unused=20))


def test_cli(corpus, tmp_path):
    assert main(["build-vocab", str(corpus), "--vocab-size", "500", "--output", str(tmp_path / "v.txt")]) == 0
    assert len(load_vocab(tmp_path / "v.txt")) <= 500
    assert main(["build-vocab", str(corpus), "--vocab-size", "10", "--output", str(tmp_path / "w.txt")]) == 2


def test_the_same_input_gives_the_same_vocab_in_every_process(corpus, tmp_path):
    """tokenizers' trainer alone numbers its ## pieces in hash-map order, which changes from one process to the
    next, and breaks merge ties by those numbers: builds of this corpus differed in a few tokens (huggingface/
    tokenizers#1794). Three processes, one vocab."""
    import subprocess
    import sys

    from tests.paths import REPO

    outputs = []
    for i in range(3):
        out = tmp_path / f"v{i}.txt"
        subprocess.run([sys.executable, "-c", "import sys; from bert_core.data.vocab_builder import VocabConfig, "
                        "build_vocab; build_vocab([sys.argv[1]], sys.argv[2], VocabConfig(vocab_size=2000))",
                        str(corpus), str(out)], cwd=REPO, check=True, timeout=120)
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    tokens = outputs[0].decode("utf-8").split("\n")[:-1]
    learned = tokens[tokens.index("[MASK]") + 1:]
    learned = [t for t in learned if not t.startswith("[unused")]
    # Characters, then ## characters, then merged pieces (each a merge of two known tokens, so none of one char).
    first_continuing = next(i for i, t in enumerate(learned) if t.startswith("##"))
    assert all(len(t) == 1 for t in learned[:first_continuing])
    assert any(len(t.removeprefix("##")) > 1 for t in learned[first_continuing:])


def test_progress_bars_on_a_terminal_and_none_in_a_log(corpus, tmp_path):
    import os
    import pty
    import subprocess
    import sys

    from tests.paths import REPO

    command = [sys.executable, "-m", "bert_pipeline.cli", "build-vocab", str(corpus), "--vocab-size", "500"]
    logged = subprocess.run([*command, "--output", str(tmp_path / "a.txt")], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert logged.returncode == 0, logged.stderr[-2000:]
    assert "Compute merges" not in logged.stderr + logged.stdout
    main_fd, terminal = pty.openpty()
    watched = subprocess.Popen([*command, "--output", str(tmp_path / "b.txt")], cwd=REPO, stdout=terminal,
                               stderr=terminal)
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(main_fd)
    assert watched.wait(timeout=120) == 0, seen[-2000:]
    assert b"Compute merges" in seen
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()


def test_a_vocab_size_too_small_for_the_characters_is_an_error(tmp_path):
    """The trainer keeps every character (and its ## form) whatever vocab_size says: --vocab-size 56 on a small
    text wrote a 91-token vocab without a word, too large for a model config sized by the flag. It is an error
    naming the size that fits (the default --unused grows with it), and that size works."""
    text = tmp_path / "seg.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs.\n\n"
                    "Sphinx of black quartz, judge my vow!\n", encoding="utf-8")
    with pytest.raises(BertPipelineError, match=r"--vocab-size 56 is too small for this text: its characters alone "
                                                r"are \d+ tokens .* give --vocab-size (\d+) or more") as caught:
        build_vocab([str(text)], str(tmp_path / "v.txt"), VocabConfig(vocab_size=56))
    assert not (tmp_path / "v.txt").exists()
    size = int(re.search(r"give --vocab-size (\d+)", str(caught.value)).group(1))
    assert build_vocab([str(text)], str(tmp_path / "v.txt"), VocabConfig(vocab_size=size))["vocab_size"] <= size
