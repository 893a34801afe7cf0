import pytest

from bert_core.errors import BertPipelineError
from bert_core.model import zoo
from bert_pipeline.cli import main


@pytest.mark.parametrize("name, arch, vocab, lower", [
    ("bert-base-uncased", (12, 768, 12), 30522, True),
    ("bert-large-cased", (24, 1024, 16), 28996, False),
    ("bert-base-multilingual-cased", (12, 768, 12), 119547, False),
    ("bert-base-chinese", (12, 768, 12), 21128, False),
    ("bert_12_768_12_wiki_multilingual_uncased", (12, 768, 12), 105879, True),
    ("bert_24_1024_16/book_corpus_wiki_en_uncased", (24, 1024, 16), 30522, True),
    ("bert_12_768_12_wiki_cn_cased", (12, 768, 12), 21128, False),
])
def test_names_resolve_to_architecture_and_casing(name, arch, vocab, lower):
    cfg = zoo.architecture_config(name)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == arch
    assert cfg.vocab_size == vocab and cfg.do_lower_case is lower
    assert cfg.intermediate_size == 4 * cfg.hidden_size


def test_all_gluonnlp_datasets_are_covered():
    assert {e.dataset for e in zoo.entries()} == set(zoo.DATASETS)


def test_generic_architecture_names():
    cfg = zoo.architecture_config("bert_2_128_2")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size) == (2, 128, 2, 512)


def test_unreleased_and_unknown_names():
    with pytest.raises(BertPipelineError, match="Google released no bert_24_1024_16 model on wiki_cn_cased"):
        zoo.lookup("bert_24_1024_16_wiki_cn_cased")
    with pytest.raises(BertPipelineError, match="unknown model 'roberta-base'.*bert-base-uncased"):
        zoo.architecture_config("roberta-base")


def test_zoo_command_lists_locations(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BERT_MODEL_STORE", str(tmp_path))
    assert main(["zoo"]) == 0
    out = capsys.readouterr().out
    assert f"model store: {tmp_path}" in out
    assert "bert-base-chinese" in out and "missing" in out and str(tmp_path / "bert-large-cased") in out
