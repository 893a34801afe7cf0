"""GLUE/XNLI readers: texts, labels and exact row counts on format-faithful fixtures (our own text)."""


import pytest

from bert_core.errors import BertPipelineError
from bert_core.tasks.glue import GLUE_TASKS, read_examples, task_key
from tests.paths import FIXTURES

GLUE = FIXTURES / "glue"


def test_mrpc_keeps_bare_quotes_inside_fields_and_drops_the_bom():
    examples = read_examples("MRPC", GLUE / "MRPC" / "dev.tsv")
    assert len(examples) == 6  # 7 lines: header + 6 rows, none merged by a quote
    first = examples[0]
    assert first.text_a.startswith('"The bakery will not open on Sundays')  # an unclosed quote stays text
    assert first.text_b.startswith("The owner said")
    assert first.label == "1" and first.line == 2
    assert examples[1].text_b == 'the forecaster added that "winds will pick up" later.'


def test_cola_has_no_header_and_single_sentences():
    examples = read_examples("cola", GLUE / "CoLA" / "dev.tsv")
    assert len(examples) == 8 and examples[0].line == 1
    assert examples[0].text_a == "The kettle boiled over twice." and examples[0].text_b is None


def test_cola_test_file_has_a_header_and_no_labels(tmp_path):
    (tmp_path / "test.tsv").write_text("index\tsentence\n0\tThe lamp flickered.\n1\tWe ran home.\n")
    examples = read_examples("cola", tmp_path / "test.tsv")
    assert [(e.guid, e.text_a, e.label) for e in examples] == [("0", "The lamp flickered.", None),
                                                               ("1", "We ran home.", None)]


def test_sts_b_labels_are_floats():
    examples = read_examples("STS-B", GLUE / "STS-B" / "dev.tsv")
    assert all(isinstance(e.label, float) for e in examples) and examples[0].text_b


@pytest.mark.parametrize("task, path", [
    ("mnli", "MNLI/dev_matched.tsv"), ("mnli-mm", "MNLI/dev_mismatched.tsv"), ("qnli", "QNLI/dev.tsv"),
    ("qqp", "QQP/dev.tsv"), ("rte", "RTE/dev.tsv"), ("wnli", "WNLI/dev.tsv"), ("sst-2", "SST-2/dev.tsv"),
])
def test_every_line_is_one_example_with_a_valid_label(task, path):
    lines = [line for line in (GLUE / path).read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    examples = read_examples(task, GLUE / path)
    assert len(examples) == len(lines) - 1
    spec = GLUE_TASKS[task_key(task)]
    assert all(e.label in spec.labels for e in examples)
    assert all(e.text_a for e in examples)
    assert all((e.text_b is not None) == (spec.text_b is not None) for e in examples)


def test_xnli_layouts():
    zh = read_examples("xnli", GLUE / "XNLI" / "xnli.dev.tsv")  # original layout, zh rows by default
    en = read_examples("xnli", GLUE / "XNLI" / "xnli.dev.tsv", language="en")
    assert zh and en and {e.label for e in zh + en} <= {"contradiction", "entailment", "neutral"}
    assert en[0].text_a == "The shop opens at nine."
    ernie = read_examples("xnli", GLUE / "XNLI" / "dev_ernie.tsv")
    assert len(ernie) == 4 and ernie[0].text_b
    with pytest.raises(BertPipelineError, match="no rows with language 'xx'; languages present: .*en"):
        read_examples("xnli", GLUE / "XNLI" / "xnli.dev.tsv", language="xx")


def test_xnli_mt_training_layout_maps_contradictory(tmp_path):
    (tmp_path / "multinli.train.zh.tsv").write_text("premise\thypo\tlabel\n甲\t乙\tcontradictory\n丙\t丁\tneutral\n",
                                                    encoding="utf-8")
    examples = read_examples("xnli", tmp_path / "multinli.train.zh.tsv")
    assert [e.label for e in examples] == ["contradiction", "neutral"]


@pytest.mark.parametrize("content, message", [
    ("sentence\tlabel\nfine\t1\nstray\ttab\t0\n", r"line 3: 3 tab-separated column\(s\), expected 2"),
    ("sentence\tlabel\nfine\t2\n", r"line 2: label '2' is not a SST-2 label; expected one of 0, 1"),
    ("", "is empty"),
    ("text\tlabel\nfine\t1\n", r"line 1: no 'sentence' column"),
    # A blank line (empty, spaces, or tabs only) inside the file is an error, not a skipped row.
    ("sentence\tlabel\nfine\t1\n\t\nnext\t0\n", r"line 3: blank line before the row at line 4"),
    ("sentence\tlabel\nfine\t1\n \t \r\n\nnext\t0\n", r"line 3: blank line before the row at line 5"),
    ("sentence\tlabel\nfine\t1\n\nnext\t0\n\n", r"line 3: blank line before the row at line 4"),
    ("\nsentence\tlabel\nfine\t1\n", r"line 1: blank line before the row at line 2"),
])
def test_malformed_files_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "train.tsv"
    path.write_text(content)
    with pytest.raises(BertPipelineError, match=message) as err:
        read_examples("sst-2", path)
    assert str(path) in str(err.value)


def test_blank_lines_at_the_end_of_the_file_are_not_rows(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\r\nfine\t1\r\nnext\t0\r\n\r\n\t\n  \n")
    assert [(e.text_a, e.label, e.line) for e in read_examples("sst-2", path)] == [("fine", "1", 2), ("next", "0", 3)]


def test_not_utf8_and_unknown_task(tmp_path):
    path = tmp_path / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\n\xff\xfe bad\t1\n")
    with pytest.raises(BertPipelineError, match="line 2: not UTF-8"):
        read_examples("sst-2", path)
    with pytest.raises(BertPipelineError, match="unknown GLUE task 'mrcp'; valid tasks: .*mrpc"):
        read_examples("mrcp", path)
