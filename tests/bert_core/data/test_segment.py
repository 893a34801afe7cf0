from __future__ import annotations

import bz2
import gzip
import json
import logging

import pytest

from bert_core.data import segment
from bert_core.data.segment import SegmentConfig
from bert_core.errors import BertPipelineError
from bert_core.io import manifest
from bert_pipeline.cli import main
from tests.corpus_text import documents, write_raw


@pytest.fixture(autouse=True)
def _no_installed_punkt(monkeypatch):
    """Tests decide which Punkt model is used; one installed on this machine must not leak in."""
    monkeypatch.setattr(segment, "_installed_punkt_dir", lambda: None)


def read_docs(path):
    text = path.read_text(encoding="utf-8")
    return [block.split("\n") for block in text.strip("\n").split("\n\n")] if text.strip() else []


def test_plain_text_roundtrip_with_punkt_trained_on_input(tmp_path, caplog):
    docs = documents(60, seed=1)
    write_raw(tmp_path / "raw.txt", docs)
    with caplog.at_level(logging.INFO):
        result = segment.segment([str(tmp_path / "raw.txt")], str(tmp_path / "out"))
    assert read_docs(tmp_path / "out" / "raw.txt") == docs
    assert "trained Punkt's unsupervised parameters" in caplog.text
    assert result["sentence_splitter"]["model"] == "trained-on-input"
    assert result["totals"]["documents"] == 60
    assert result["totals"]["sentences"] == sum(map(len, docs))
    assert manifest.verify_outputs(tmp_path / "out") == []


ABBREVIATION_TEXT = (
    "Dr. Alvarez met Mr. Okafor at the station. They talked about the U.S. economy, e.g. prices and wages. "
    "The weather was mild, i.e. warm for the season. She bought apples, pears, etc. and went home. "
    "Prof. Lind moved to the U.S. last year. Mrs. Hale wrote three letters to Ms. Novak. It rained all day."
)


def test_abbreviations_do_not_end_sentences_in_a_tiny_corpus(tmp_path):
    (tmp_path / "tiny.txt").write_text(ABBREVIATION_TEXT + "\n", encoding="utf-8")
    segment.segment([str(tmp_path / "tiny.txt")], str(tmp_path / "out"))
    assert read_docs(tmp_path / "out" / "tiny.txt") == [[
        "Dr. Alvarez met Mr. Okafor at the station.",
        "They talked about the U.S. economy, e.g. prices and wages.",
        "The weather was mild, i.e. warm for the season.",
        "She bought apples, pears, etc. and went home.",
        "Prof. Lind moved to the U.S. last year.",
        "Mrs. Hale wrote three letters to Ms. Novak.",
        "It rained all day.",
    ]]


def test_title_before_a_word_seen_lower_case_stays_attached(tmp_path):
    # "brown" is seen lower-case, so Punkt's orthographic heuristic alone would split after "Dr.".
    text = "The fox was brown and quick. Later we met Dr. Brown near the brown gate. The gate was old.\n"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    segment.segment([str(tmp_path / "t.txt")], str(tmp_path / "out"))
    assert read_docs(tmp_path / "out" / "t.txt")[0][1] == "Later we met Dr. Brown near the brown gate."


def test_pretrained_punkt_model_directory(tmp_path, monkeypatch, caplog):
    docs = documents(30, seed=2)
    params, _ = segment.train_punkt(iter(" ".join(d) for d in docs), 10**6)
    model = segment.save_punkt_dir(params, tmp_path / "nltk" / "tokenizers" / "punkt_tab" / "english")
    write_raw(tmp_path / "raw.txt", docs)
    result = segment.segment([str(tmp_path / "raw.txt")], str(tmp_path / "a"),
                             SegmentConfig(punkt_model=str(model)))
    assert result["sentence_splitter"]["model"] == str(model)
    assert read_docs(tmp_path / "a" / "raw.txt") == docs
    # Found under NLTK_DATA when not given explicitly.
    monkeypatch.undo()
    import nltk.data

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk")])
    result = segment.segment([str(tmp_path / "raw.txt")], str(tmp_path / "b"))
    assert result["sentence_splitter"]["model"].rstrip("/") == str(model)
    with pytest.raises(BertPipelineError, match="not a punkt_tab language directory"):
        segment.segment([str(tmp_path / "raw.txt")], str(tmp_path / "c"), SegmentConfig(punkt_model=str(tmp_path)))


def test_jsonl_gzip_and_bzip2_inputs(tmp_path):
    docs = documents(20, seed=3)
    lines = [json.dumps({"id": i, "text": " ".join(d)}) for i, d in enumerate(docs)]
    lines.insert(3, json.dumps({"text": "   "}))  # empty documents are dropped
    lines.insert(5, "")
    with gzip.open(tmp_path / "a.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    with bz2.open(tmp_path / "b.txt.bz2", "wt", encoding="utf-8") as f:
        f.write("\n\n".join(" ".join(d) for d in docs) + "\n")
    result = segment.segment([str(tmp_path / "*.gz"), str(tmp_path / "b.txt.bz2")], str(tmp_path / "out"))
    assert read_docs(tmp_path / "out" / "a.txt") == docs
    assert read_docs(tmp_path / "out" / "b.txt") == docs
    assert [f["dropped_empty_documents"] for f in result["files"]] == [1, 0]


def test_jsonl_paragraph_breaks_and_text_field(tmp_path):
    record = {"body": "First part has no period\n\nSecond part. It has two sentences."}
    (tmp_path / "d.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    segment.segment([str(tmp_path / "d.jsonl")], str(tmp_path / "out"), SegmentConfig(text_field="body"))
    assert read_docs(tmp_path / "out" / "d.txt") == [
        ["First part has no period", "Second part.", "It has two sentences."]
    ]


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"text": "ok"', r"bad\.jsonl:2: not valid JSON"),
        ('["a list"]', r"bad\.jsonl:2: expected a JSON object"),
        ('{"title": "no text"}', r"bad\.jsonl:2: no field 'text'"),
        ('{"text": null}', r"bad\.jsonl:2: field 'text' is NoneType"),
    ],
)
def test_jsonl_errors_name_file_line_and_field(tmp_path, line, message):
    (tmp_path / "bad.jsonl").write_text('{"text": "Fine."}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(BertPipelineError, match=message):
        segment.segment([str(tmp_path / "bad.jsonl")], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_chinese_sentence_final_punctuation(tmp_path):
    text = "今天天气很好。我们去公园散步吧！\n你觉得怎么样？他说：“我同意。”然后我们\n出发了。\n\n第二篇文章只有一句话\n"
    (tmp_path / "zh.txt").write_text(text, encoding="utf-8")
    segment.segment([str(tmp_path / "zh.txt")], str(tmp_path / "out"), SegmentConfig(language="zh"))
    assert read_docs(tmp_path / "out" / "zh.txt") == [
        ["今天天气很好。", "我们去公园散步吧！", "你觉得怎么样？", "他说：“我同意。”", "然后我们出发了。"],
        ["第二篇文章只有一句话"],
    ]


def test_line_breaks_split_keeps_each_line_a_paragraph(tmp_path):
    (tmp_path / "l.txt").write_text("A heading without a period\nThe body starts here. And ends here.\n")
    segment.segment([str(tmp_path / "l.txt")], str(tmp_path / "out"), SegmentConfig(line_breaks="split"))
    assert read_docs(tmp_path / "out" / "l.txt") == [
        ["A heading without a period", "The body starts here.", "And ends here."]
    ]


def test_non_utf8_input_names_file_and_byte_offset(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("First line.\nCaf\xe9 au lait.\n".encode("latin-1"))
    with pytest.raises(BertPipelineError, match=r"latin1\.txt: not UTF-8 text: invalid byte 0xe9 at byte offset "
                       r"15 \(line 2\)"):
        segment.segment([str(tmp_path / "latin1.txt")], str(tmp_path / "out"))


def test_binary_input_is_an_error_and_replace_mode_is_counted(tmp_path, caplog):
    (tmp_path / "blob.txt").write_bytes(b"Some text here.\n\x00\x01\x02\xff\xfe binary tail.\n")
    with pytest.raises(BertPipelineError, match=r"blob\.txt: binary data, not text: NUL byte at byte offset 16"):
        segment.segment([str(tmp_path / "blob.txt")], str(tmp_path / "out"))
    with caplog.at_level(logging.WARNING):
        result = segment.segment([str(tmp_path / "blob.txt")], str(tmp_path / "out"),
                                 SegmentConfig(on_decode_error="replace"))
    assert result["files"][0]["removed_nul_bytes"] == 1
    assert result["files"][0]["replaced_bytes"] == 2
    assert "replaced 2 undecodable" in caplog.text
    assert "\ufffd" in (tmp_path / "out" / "blob.txt").read_text(encoding="utf-8")


def test_empty_file_gives_empty_output_and_a_warning(tmp_path, caplog):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    (tmp_path / "full.txt").write_text(ABBREVIATION_TEXT + "\n")
    with caplog.at_level(logging.WARNING):
        result = segment.segment([str(tmp_path / "empty.txt"), str(tmp_path / "blank.txt"),
                                  str(tmp_path / "full.txt")], str(tmp_path / "out"))
    assert (tmp_path / "out" / "empty.txt").read_bytes() == b""
    assert (tmp_path / "out" / "blank.txt").read_bytes() == b""
    assert "empty.txt: empty input" in caplog.text and "blank.txt: no text" in caplog.text
    assert result["totals"]["documents"] == 1


def test_output_names_never_collide(tmp_path):
    assert segment.output_names(["a/x.txt", "b/x.jsonl.gz", "c/x", "s3://b/k/y.txt.bz2"]) == [
        "x.txt", "x-2.txt", "x-3.txt", "y.txt"]


def test_idempotent_rerun_and_refusal_to_overwrite_other_output(tmp_path):
    (tmp_path / "in.txt").write_text(ABBREVIATION_TEXT + "\n")
    first = segment.segment([str(tmp_path / "in.txt")], str(tmp_path / "out"))
    again = segment.segment([str(tmp_path / "in.txt")], str(tmp_path / "out"))
    assert again["finished_at"] == first["finished_at"]  # read back, nothing rewritten
    with pytest.raises(BertPipelineError, match="pass --overwrite"):
        segment.segment([str(tmp_path / "in.txt")], str(tmp_path / "out"), SegmentConfig(line_breaks="split"))
    segment.segment([str(tmp_path / "in.txt")], str(tmp_path / "out"), SegmentConfig(line_breaks="split"),
                    overwrite=True)
    assert manifest.read(tmp_path / "out")["config"]["line_breaks"] == "split"


def test_cli(tmp_path, capsys):
    (tmp_path / "in.txt").write_text(ABBREVIATION_TEXT + "\n")
    assert main(["segment", str(tmp_path / "in.txt"), "--output", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "manifest.json").is_file()
    assert main(["segment", str(tmp_path / "missing*.txt"), "--output", str(tmp_path / "o2")]) == 2
    assert "matches no file" in capsys.readouterr().err


def test_s3_inputs_and_output(tmp_path, monkeypatch):
    import moto

    for name, value in (("AWS_ACCESS_KEY_ID", "test"), ("AWS_SECRET_ACCESS_KEY", "test"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        import boto3

        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="corpus")
        s3.put_object(Bucket="corpus", Key="raw/one.txt.gz", Body=gzip.compress(ABBREVIATION_TEXT.encode()))
        s3.put_object(Bucket="corpus", Key="raw/skip.md", Body=b"not matched")
        result = segment.segment(["s3://corpus/raw/*.gz"], "s3://corpus/segmented")
        assert [i["uri"] for i in result["inputs"]] == ["s3://corpus/raw/one.txt.gz"]
        body = s3.get_object(Bucket="corpus", Key="segmented/one.txt")["Body"].read().decode()
        assert body.splitlines()[0] == "Dr. Alvarez met Mr. Okafor at the station."
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="corpus", Prefix="segmented/")["Contents"]}
        assert keys == {"segmented/one.txt", "segmented/manifest.json"}
