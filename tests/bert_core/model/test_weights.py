"""Model directories: save/load round trips, strict loading rules, formats found in the wild, s3://."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from bert_core.errors import BertPipelineError, CheckpointMismatchError, ModelNotFoundError
from bert_core.model import modeling, zoo
from bert_core.model.config import BertConfig
from bert_core.model.weights import save_pretrained

TINY = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=48, max_position_embeddings=40)


def _ids():
    return torch.tensor([[2, 17, 33, 90, 3, 0], [2, 5, 3, 0, 0, 0]]), torch.tensor(
        [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(115)]) + "\n")
    return path


def test_save_and_load_round_trip_is_exact(tmp_path, vocab_file):
    model = modeling.BertForPreTraining(TINY).eval()
    save_pretrained(model, str(tmp_path / "m"), vocab_file=str(vocab_file))
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["config.json", "model.safetensors", "vocab.txt"]
    # The tied decoder is stored once (safetensors refuses shared storage).
    assert "cls.predictions.decoder.weight" not in load_file(str(tmp_path / "m" / "model.safetensors"))
    loaded = modeling.BertForPreTraining.from_pretrained(str(tmp_path / "m"))
    assert loaded.load_report.newly_initialized == [] and loaded.load_report.ignored == []
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight
    ids, mask = _ids()
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).prediction_logits,
                           loaded(ids, attention_mask=mask).prediction_logits)
    assert loaded.vocab_file == str(tmp_path / "m" / "vocab.txt")


def test_saved_directory_loads_in_transformers(tmp_path):
    model = modeling.BertForSequenceClassification(TINY.replace(num_labels=3)).eval()
    model.save_pretrained(str(tmp_path / "m"))
    hf = transformers.BertForSequenceClassification.from_pretrained(str(tmp_path / "m"),
                                                                    attn_implementation="eager").eval()
    ids, mask = _ids()
    with torch.no_grad():
        diff = (model(ids, attention_mask=mask).logits - hf(input_ids=ids, attention_mask=mask).logits).abs()
    assert diff.max() < 1e-5


def test_encoder_checkpoint_into_head_lists_new_head(minilm_dir, caplog):
    caplog.set_level("INFO")
    model = modeling.BertForSequenceClassification.from_pretrained(str(minilm_dir), num_labels=3)
    assert model.config.num_labels == 3 and model.classifier.out_features == 3
    assert model.load_report.newly_initialized == ["classifier.weight", "classifier.bias"]
    assert "newly initialised" in caplog.text and "classifier.weight" in caplog.text
    # Encoder weights really came from the checkpoint.
    state = load_file(str(minilm_dir / "model.safetensors"))
    assert torch.equal(model.bert.encoder.layer[5].output.dense.weight, state["encoder.layer.5.output.dense.weight"])


def test_head_checkpoint_into_encoder_and_other_heads(tmp_path):
    pre = modeling.BertForPreTraining(TINY)
    pre.save_pretrained(str(tmp_path / "pre"))
    enc = modeling.BertModel.from_pretrained(str(tmp_path / "pre"))
    assert sorted(enc.load_report.ignored)[:2] == ["cls.predictions.bias", "cls.predictions.transform.LayerNorm.bias"]
    assert torch.equal(enc.pooler.dense.weight, pre.bert.pooler.dense.weight)
    qa = modeling.BertForQuestionAnswering.from_pretrained(str(tmp_path / "pre"))
    assert qa.load_report.newly_initialized == ["qa_outputs.weight", "qa_outputs.bias"]
    assert "bert.pooler.dense.weight" in qa.load_report.ignored


def test_unused_weights_are_reported_only_when_unexpected(tmp_path, caplog):
    """A pretrained checkpoint's MLM/NSP heads (and, for a head without one, its pooler) are dropped by design when
    it is loaded as an encoder or for a task: nothing is said. A head trained for another task, dropped, is a
    warning that names it."""
    caplog.set_level("INFO", logger="bert_core")
    modeling.BertForPreTraining(TINY).save_pretrained(str(tmp_path / "pre"))
    modeling.BertModel.from_pretrained(str(tmp_path / "pre"))
    modeling.BertForQuestionAnswering.from_pretrained(str(tmp_path / "pre"))
    assert "not used by this model" not in caplog.text
    modeling.BertForSequenceClassification(TINY.replace(num_labels=2)).save_pretrained(str(tmp_path / "clf"))
    qa = modeling.BertForQuestionAnswering.from_pretrained(str(tmp_path / "clf"))
    assert sorted(qa.load_report.unexpected_unused) == ["classifier.bias", "classifier.weight"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "not used by this model" in warnings[0].message
    assert "classifier.weight" in warnings[0].message and "pooler" not in warnings[0].message


def test_missing_encoder_weights_refuse_to_load(tmp_path):
    model = modeling.BertModel(TINY)
    model.save_pretrained(str(tmp_path / "m"))
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    del state["encoder.layer.1.attention.self.key.weight"]
    save_file(state, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(CheckpointMismatchError, match=r"missing.*encoder\.layer\.1\.attention\.self\.key\.weight"):
        modeling.BertModel.from_pretrained(str(tmp_path / "m"))


def test_config_weights_mismatch_names_keys(tmp_path):
    modeling.BertModel(TINY).save_pretrained(str(tmp_path / "m"))
    # More layers in the checkpoint than in the config: unexpected weights, not a silent truncation.
    with pytest.raises(CheckpointMismatchError, match=r"no place for.*encoder\.layer\.1\."):
        modeling.BertModel.from_pretrained(str(tmp_path / "m"), num_hidden_layers=1)
    # A different hidden size: mis-shaped tensors, named with both shapes.
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    cfg["intermediate_size"] = 64
    (tmp_path / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointMismatchError, match=r"intermediate\.dense\.weight: checkpoint \(48, 32\) vs model \(64, 32\)"):
        modeling.BertModel.from_pretrained(str(tmp_path / "m"))


def test_fine_tuned_head_with_other_label_count_is_an_error(tmp_path):
    modeling.BertForSequenceClassification(TINY.replace(num_labels=2)).save_pretrained(str(tmp_path / "m"))
    with pytest.raises(CheckpointMismatchError, match="classifier.weight"):
        modeling.BertForSequenceClassification.from_pretrained(str(tmp_path / "m"), num_labels=5)


def test_google_config_and_legacy_pytorch_bin(tmp_path, vocab_file):
    """pytorch-pretrained-bert era: bert_config.json + pytorch_model.bin with LayerNorm gamma/beta."""
    model = modeling.BertForPreTraining(TINY).eval()
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
             for k, v in model.state_dict().items()}
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    d = tmp_path / "legacy"
    d.mkdir()
    torch.save(state, d / "pytorch_model.bin")
    TINY.save(d / "bert_config.json", google_format=True)
    shutil.copy(vocab_file, d / "vocab.txt")
    loaded = modeling.BertForPreTraining.from_pretrained(str(d))
    ids, mask = _ids()
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).prediction_logits,
                           loaded(ids, attention_mask=mask).prediction_logits)


def test_not_a_model_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY.to_hf_dict()))
    with pytest.raises(ModelNotFoundError, match="missing model.safetensors or pytorch_model.bin"):
        modeling.BertModel.from_pretrained(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors at all")
    with pytest.raises(CheckpointMismatchError, match="cannot read weights"):
        modeling.BertModel.from_pretrained(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="no such model directory"):
        modeling.BertModel.from_pretrained(str(tmp_path / "nope" / "x"))
    with pytest.raises(ModelNotFoundError, match="unknown model 'bert-enormous'"):
        modeling.BertModel.from_pretrained("bert-enormous")


def test_save_is_atomic_and_refuses_to_clobber(tmp_path, monkeypatch):
    target = tmp_path / "out"
    model = modeling.BertModel(TINY)
    save_pretrained(model, str(target), overwrite=False)
    before = (target / "model.safetensors").read_bytes()
    with pytest.raises(BertPipelineError, match="already exists"):
        save_pretrained(modeling.BertModel(TINY), str(target), overwrite=False)

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("bert_core.model.weights.save_file", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        save_pretrained(modeling.BertModel(TINY), str(target), overwrite=True)
    # The old model is untouched and no temp dir is left behind.
    assert (target / "model.safetensors").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_zoo_name_resolves_in_the_model_store(tmp_path, monkeypatch, minilm_dir):
    monkeypatch.setenv("BERT_MODEL_STORE", str(tmp_path / "store"))
    with pytest.raises(ModelNotFoundError) as err:
        modeling.BertModel.from_pretrained("bert-base-uncased")
    msg = str(err.value)
    assert str(tmp_path / "store" / "bert-base-uncased") in msg
    assert "model.safetensors" in msg and "vocab.txt" in msg and "convert-tf-checkpoint" in msg
    # A model of another shape placed under the name is refused, not loaded under a wrong name.
    shutil.copytree(minilm_dir, tmp_path / "store" / "bert-base-uncased")
    with pytest.raises(CheckpointMismatchError, match=r"holds another model: hidden_size=384 \(expected 768\)"):
        modeling.BertModel.from_pretrained("bert-base-uncased")
    # Placing the right files where the message says makes the name load (a tiny stand-in architecture
    # keeps the test fast; resolution is what is under test).
    monkeypatch.setitem(zoo.ARCHITECTURES, "bert_12_768_12", dict(
        num_hidden_layers=TINY.num_hidden_layers, hidden_size=TINY.hidden_size,
        num_attention_heads=TINY.num_attention_heads, intermediate_size=TINY.intermediate_size))
    monkeypatch.setitem(zoo.DATASETS, "book_corpus_wiki_en_uncased", (TINY.vocab_size, True, "x"))
    shutil.rmtree(tmp_path / "store" / "bert-base-uncased")
    saved = modeling.BertModel(TINY)
    saved.save_pretrained(str(tmp_path / "store" / "bert-base-uncased"))
    loaded = modeling.BertModel.from_pretrained("bert-base-uncased")
    assert torch.equal(loaded.embeddings.word_embeddings.weight, saved.embeddings.word_embeddings.weight)


@pytest.fixture(scope="module")
def s3_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def test_from_pretrained_and_save_over_s3(s3_server, monkeypatch, tmp_path):
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    boto3.client("s3").create_bucket(Bucket="models")
    model = modeling.BertForSequenceClassification(TINY).eval()
    model.save_pretrained("s3://models/runs/7/model")
    keys = sorted(o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="models")["Contents"])
    assert keys == ["runs/7/model/config.json", "runs/7/model/model.safetensors"]
    loaded = modeling.BertForSequenceClassification.from_pretrained("s3://models/runs/7/model")
    ids, mask = _ids()
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=mask).logits, loaded(ids, attention_mask=mask).logits)
    # A changed object is fetched again, not served stale from the cache.
    other = modeling.BertForSequenceClassification(TINY).eval()
    other.save_pretrained("s3://models/runs/7/model")
    reloaded = modeling.BertForSequenceClassification.from_pretrained("s3://models/runs/7/model")
    assert torch.equal(reloaded.classifier.weight, other.classifier.weight)
