"""BertEmbedding: equal to the model's hidden states; long inputs stitched, never cut; odd input handled."""

import json

import numpy as np
import pytest
import torch

from bert_core.deploy.embedding import BertEmbedding
from bert_core.errors import BertPipelineError
from bert_core.model.modeling import BertModel
from bert_core.model.tokenization import BertTokenizer
from bert_pipeline.cli import main


@pytest.fixture(scope="module")
def embedder(minilm_dir):
    return BertEmbedding(str(minilm_dir), max_seq_length=32, batch_size=3)


def _hidden(model, tokenizer, text, layer=-1):
    enc = tokenizer.encode(text)
    with torch.no_grad():
        out = model(torch.tensor([enc.ids]), output_all_encoded_layers=True)
    return out.all_encoder_layers[layer][0].numpy()


def test_short_sentences_equal_the_models_hidden_states(embedder):
    sentences = ["The lighthouse keeper counted ships.", "Rain again!", "A short one about bread and jam."]
    results = embedder(sentences)
    assert [r.sentence for r in results] == sentences  # input order survives length batching
    for r in results:
        reference = _hidden(embedder.model, embedder.tokenizer, r.sentence)
        assert r.tokens == embedder.tokenizer.tokenize(r.sentence)
        np.testing.assert_allclose(r.token_vectors, reference[1:-1], atol=1e-5)
        np.testing.assert_allclose(r.sentence_vector, reference[0], atol=1e-5)


def test_layer_average_and_mean_pooling(minilm_dir):
    emb = BertEmbedding(str(minilm_dir), layer=[-1, -2], pooling="mean")
    (r,) = emb(["Two layers averaged."])
    ref = (_hidden(emb.model, emb.tokenizer, r.sentence, -1) + _hidden(emb.model, emb.tokenizer, r.sentence, -2)) / 2
    np.testing.assert_allclose(r.token_vectors, ref[1:-1], atol=1e-5)
    np.testing.assert_allclose(r.sentence_vector, ref[1:-1].mean(0), atol=1e-5)


def test_long_sentence_is_windowed_and_stitched_not_cut(embedder):
    long = " ".join(f"station{i % 7} signal{i}" for i in range(40))
    (r,) = embedder([long])
    tokens = embedder.tokenizer.tokenize(long)
    assert r.tokens == tokens and len(tokens) > 100 and r.token_vectors.shape == (len(tokens), 384)
    # Each token's vector is its hidden state in the window where it sits most centrally.
    window, stride = 30, embedder.stride
    ids = embedder.tokenizer.convert_tokens_to_ids(tokens)
    for position in (0, 17, len(tokens) // 2, len(tokens) - 1):
        starts = list(range(0, max(1, len(tokens) - window + stride), stride))
        best = max((s for s in starts if s <= position < s + window),
                   key=lambda s: min(position - s, min(s + window, len(tokens)) - 1 - position))
        chunk = ids[best:best + window]
        with torch.no_grad():
            out = embedder.model(torch.tensor([[embedder.tokenizer.cls_token_id, *chunk,
                                                embedder.tokenizer.sep_token_id]])).sequence_output[0]
        np.testing.assert_allclose(r.token_vectors[position], out[1 + position - best].numpy(), atol=1e-5)


def test_empty_and_whitespace_sentences(embedder):
    results = embedder(["", "   \t ", "words"])
    for r in results[:2]:
        assert r.tokens == [] and r.token_vectors.shape == (0, 384)
        assert np.isfinite(r.sentence_vector).all() and r.sentence_vector.shape == (384,)


def test_bad_arguments(minilm_dir):
    model = BertModel.from_pretrained(str(minilm_dir))
    tok = BertTokenizer.from_model_dir(minilm_dir)
    with pytest.raises(BertPipelineError, match="layer 9 does not exist"):
        BertEmbedding(model, tok, layer=9)
    with pytest.raises(BertPipelineError, match="max_seq_length must be in"):
        BertEmbedding(model, tok, max_seq_length=1000)
    with pytest.raises(BertPipelineError, match="needs a tokenizer"):
        BertEmbedding(model)


def test_cli_outputs(minilm_dir, tmp_path, capsys):
    assert main(["embed", "--model", str(minilm_dir), "--sentences", "Hello there.", "Bye."]) == 0
    assert "384 dims" in capsys.readouterr().out
    (tmp_path / "in.txt").write_text("One line.\n\nThird line.\n")
    assert main(["embed", "--model", str(minilm_dir), "--file", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.npy")]) == 0
    assert np.load(tmp_path / "out.npy").shape == (3, 384)
    assert main(["embed", "--model", str(minilm_dir), "--file", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.jsonl"), "--pooling", "mean"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in rows] == [["one", "line", "."], [], ["third", "line", "."]]
    assert main(["embed", "--model", str(minilm_dir), "--sentences", "x", "--output", str(tmp_path / "o.csv")]) == 2
