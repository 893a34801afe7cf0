import json

import pytest

from bert_core.errors import BertPipelineError
from bert_core.model.config import BertConfig

GOOGLE_BASE = {
    "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 512,
    "num_attention_heads": 12, "num_hidden_layers": 12, "type_vocab_size": 2, "vocab_size": 30522,
}


def test_reads_google_bert_config_with_extra_fields(tmp_path):
    # Google's Chinese release carries pooler_* and directionality fields.
    data = dict(GOOGLE_BASE, vocab_size=21128, directionality="bidi", pooler_fc_size=768, pooler_type="first_token_transform")
    (tmp_path / "bert_config.json").write_text(json.dumps(data))
    cfg = BertConfig.from_json_file(tmp_path / "bert_config.json")
    assert cfg.vocab_size == 21128 and cfg.layer_norm_eps == 1e-12 and cfg.head_dim == 64
    assert cfg.to_google_dict() == dict(GOOGLE_BASE, vocab_size=21128)


def test_hf_round_trip_with_labels(tmp_path):
    cfg = BertConfig(num_labels=3, id2label={0: "contradiction", 1: "entailment", 2: "neutral"}, do_lower_case=False)
    cfg.save(tmp_path / "config.json")
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["model_type"] == "bert" and data["label2id"] == {"contradiction": 0, "entailment": 1, "neutral": 2}
    again = BertConfig.from_json_file(tmp_path / "config.json")
    assert again == cfg


def test_real_hf_config_loads(minilm_dir):
    cfg = BertConfig.from_json_file(minilm_dir / "config.json")
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size) == (6, 384, 12, 30522)


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": 100}, "multiple of num_attention_heads"),
    ({"hidden_act": "mish"}, "hidden_act 'mish'"),
    ({"num_hidden_layers": 0}, "num_hidden_layers must be a positive integer"),
    ({"position_embedding_type": "relative_key"}, "position_embedding_type"),
    ({"model_type": "roberta"}, "not a BERT model"),
])
def test_invalid_configs_name_the_field(tmp_path, change, message):
    (tmp_path / "c.json").write_text(json.dumps(dict(GOOGLE_BASE, **change)))
    with pytest.raises(BertPipelineError, match=message) as err:
        BertConfig.from_json_file(tmp_path / "c.json")
    assert str(tmp_path / "c.json") in str(err.value)


def test_not_json_or_not_a_config(tmp_path):
    (tmp_path / "c.json").write_text("{oops")
    with pytest.raises(BertPipelineError, match="not valid JSON"):
        BertConfig.from_json_file(tmp_path / "c.json")
    (tmp_path / "c.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(BertPipelineError, match="missing field.*vocab_size"):
        BertConfig.from_json_file(tmp_path / "c.json")
    with pytest.raises(FileNotFoundError, match="config file not found"):
        BertConfig.from_json_file(tmp_path / "none.json")


def test_replace_rejects_unknown_fields():
    with pytest.raises(BertPipelineError, match="unknown config field.*num_lables"):
        BertConfig().replace(num_lables=3)
