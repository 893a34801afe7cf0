"""The TF checkpoint reader and `convert-tf-checkpoint`, against checkpoints written by TensorFlow itself.

The checkpoints are tiny but have Google's exact variable names and layouts, with Adam slots and an
int64 global_step, and are saved with tf.compat.v1.train.Saver in graph mode, as run_pretraining.py
and run_classifier.py saved the released ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import tensorflow as tf
import torch
import transformers

from bert_core.errors import BertPipelineError, CheckpointMismatchError
from bert_core.model import tf_checkpoint
from bert_core.model.config import BertConfig
from bert_core.model.tf_checkpoint import TFCheckpointReader, convert_tf_state, list_variables, load_variables
from bert_pipeline.cli import main

TINY = {
    "vocab_size": 99,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "initializer_range": 0.02,
}
PRETRAINING_TENSORS = 5 + 16 * TINY["num_hidden_layers"] + 2 + 7  # embeddings, layers, pooler, heads


# ------------------------------------------------------------------------------------------ helpers


def google_bert_variables(
    cfg: dict, rng: np.random.Generator, head: str = "pretraining"
) -> dict[str, np.ndarray]:
    """Variables named and shaped exactly as google-research/bert's modeling.py creates them."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    v = {
        "bert/embeddings/word_embeddings": rand(cfg["vocab_size"], h),
        "bert/embeddings/token_type_embeddings": rand(cfg["type_vocab_size"], h),
        "bert/embeddings/position_embeddings": rand(cfg["max_position_embeddings"], h),
        "bert/embeddings/LayerNorm/gamma": rand(h),
        "bert/embeddings/LayerNorm/beta": rand(h),
        "bert/pooler/dense/kernel": rand(h, h),
        "bert/pooler/dense/bias": rand(h),
    }
    for n in range(cfg["num_hidden_layers"]):
        p = f"bert/encoder/layer_{n}"
        for name in (
            "attention/self/query",
            "attention/self/key",
            "attention/self/value",
            "attention/output/dense",
        ):
            v[f"{p}/{name}/kernel"], v[f"{p}/{name}/bias"] = rand(h, h), rand(h)
        v[f"{p}/intermediate/dense/kernel"], v[f"{p}/intermediate/dense/bias"] = rand(h, i), rand(i)
        v[f"{p}/output/dense/kernel"], v[f"{p}/output/dense/bias"] = rand(i, h), rand(h)
        for name in ("attention/output/LayerNorm", "output/LayerNorm"):
            v[f"{p}/{name}/gamma"], v[f"{p}/{name}/beta"] = rand(h), rand(h)
    if head == "pretraining":
        v["cls/predictions/transform/dense/kernel"] = rand(h, h)
        v["cls/predictions/transform/dense/bias"] = rand(h)
        v["cls/predictions/transform/LayerNorm/gamma"] = rand(h)
        v["cls/predictions/transform/LayerNorm/beta"] = rand(h)
        v["cls/predictions/output_bias"] = rand(cfg["vocab_size"])
        v["cls/seq_relationship/output_weights"] = rand(2, h)
        v["cls/seq_relationship/output_bias"] = rand(2)
    elif head == "classifier":
        v["output_weights"], v["output_bias"] = rand(3, h), rand(3)
    elif head == "squad":
        v["cls/squad/output_weights"], v["cls/squad/output_bias"] = rand(2, h), rand(2)
    return v


def save_tf1_checkpoint(prefix: Path, variables: dict[str, np.ndarray], adam_slots: bool = True) -> str:
    """Save with tf.compat.v1.train.Saver in graph mode; adds Adam slots and an int64 global_step."""
    tf1 = tf.compat.v1
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with tf.Graph().as_default() as graph:
        for name, value in variables.items():
            tf1.get_variable(name, initializer=tf.constant(value))
            if adam_slots and value.dtype == np.float32:
                tf1.get_variable(f"{name}/adam_m", initializer=tf.constant(np.zeros_like(value)))
                tf1.get_variable(f"{name}/adam_v", initializer=tf.constant(np.full_like(value, 0.5)))
        if adam_slots:
            tf1.get_variable("global_step", initializer=tf.constant(np.int64(2**40 + 7)))
        with tf1.Session(graph=graph) as session:
            session.run(tf1.global_variables_initializer())
            return tf1.train.Saver().save(session, str(prefix))


def write_model_files(directory: Path, cfg: dict) -> tuple[Path, Path]:
    (directory / "bert_config.json").write_text(json.dumps(cfg))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [
        f"tok{n}" for n in range(cfg["vocab_size"] - 5)
    ]
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n")
    return directory / "bert_config.json", directory / "vocab.txt"


def hf_expected(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The conversion, spelled out independently: names, and kernels [in, out] -> weights [out, in]."""
    out = {}
    renames = {
        "cls/predictions/output_bias": "cls.predictions.bias",
        "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
        "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
        "cls/squad/output_weights": "qa_outputs.weight",
        "cls/squad/output_bias": "qa_outputs.bias",
        "output_weights": "classifier.weight",
        "output_bias": "classifier.bias",
    }
    for name, value in variables.items():
        if name in renames:
            out[renames[name]] = value
            continue
        hf = name.replace("/", ".").replace("layer_", "layer.")
        if hf.endswith(".kernel"):
            out[hf[: -len("kernel")] + "weight"] = value.T
        elif hf.endswith(".gamma"):
            out[hf[: -len("gamma")] + "weight"] = value
        elif hf.endswith(".beta"):
            out[hf[: -len("beta")] + "bias"] = value
        elif "embeddings" in hf and not hf.endswith(".bias"):
            out[hf + ".weight"] = value
        else:
            out[hf] = value
    return out


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def convert(*argv: str | os.PathLike) -> int:
    return main(["convert-tf-checkpoint", *map(str, argv)])


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("tf_ckpts")
    rng = np.random.default_rng(1234)
    made: dict = {"root": root}

    # Named like Google's release so that casing is inferred: uncased.
    pre_dir = root / "uncased_L-2_H-32_A-4"
    pre_vars = google_bert_variables(TINY, rng)
    made["pretraining"] = save_tf1_checkpoint(pre_dir / "bert_model.ckpt", pre_vars)
    made["pretraining_vars"] = pre_vars
    made["config"], made["vocab"] = write_model_files(pre_dir, TINY)

    cls_dir = root / "cased_L-2_H-32_A-4_mrpc"
    cls_vars = google_bert_variables(TINY, rng, head="classifier")
    made["classifier"] = save_tf1_checkpoint(cls_dir / "model.ckpt-343", cls_vars)
    made["classifier_vars"] = cls_vars
    write_model_files(cls_dir, TINY)

    squad_vars = google_bert_variables(TINY, rng, head="squad")
    made["squad"] = save_tf1_checkpoint(root / "squad" / "model.ckpt-100", squad_vars, adam_slots=False)
    made["squad_vars"] = squad_vars

    # Every dtype a BERT checkpoint may hold (fp16/bf16 from mixed-precision forks), plus odd shapes.
    made["dtypes"] = save_tf1_checkpoint(
        root / "dtypes" / "model.ckpt",
        {
            "half": rng.standard_normal((3, 5)).astype(np.float16),
            "int32": np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
            "int64": np.array([-(2**62), 0, 2**62 + 3], dtype=np.int64),
            "float64": rng.standard_normal(4),
            "scalar": np.float32(3.5),
            "empty": np.zeros((0, 4), np.float32),
        },
        adam_slots=False,
    )
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        bf16 = tf.compat.v1.get_variable(
            "bf16", initializer=tf.constant(rng.standard_normal(9), dtype=tf.bfloat16)
        )
        session.run(bf16.initializer)
        made["bf16"] = tf.compat.v1.train.Saver().save(session, str(root / "bf16" / "model.ckpt"))

    unknown_vars = dict(google_bert_variables(TINY, rng))
    unknown_vars["bert/encoder/layer_0/attention/self/relative_positions"] = rng.standard_normal((5,)).astype(
        np.float32
    )
    made["unknown"] = save_tf1_checkpoint(
        root / "unknown" / "bert_model.ckpt", unknown_vars, adam_slots=False
    )

    # TF2 object-based checkpoint: different key names and a string object-graph tensor.
    module = tf.Module()
    module.w = tf.Variable(rng.standard_normal((4, 3)).astype(np.float32))
    made["tf2"] = tf.train.Checkpoint(model=module).write(str(root / "tf2" / "ckpt"))
    return made


# ------------------------------------------------------------------------------------------ (a) reader


@pytest.mark.parametrize("which", ["pretraining", "classifier", "dtypes", "bf16", "tf2"])
def test_reader_lists_what_tensorflow_lists(ckpts: dict, which: str) -> None:
    prefix = ckpts[which]
    tf_dtypes = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
    expected = {name: (tf_dtypes[name].name, tuple(shape)) for name, shape in tf.train.list_variables(prefix)}
    assert list_variables(prefix) == expected


@pytest.mark.parametrize("which", ["pretraining", "dtypes", "bf16"])
def test_reader_values_equal_tensorflow_bit_for_bit(ckpts: dict, which: str) -> None:
    prefix = ckpts[which]
    ours = load_variables(prefix, verify=True)  # also checks every tensor's CRC32C
    assert ours.keys() == dict(tf.train.list_variables(prefix)).keys()
    for name, array in ours.items():
        theirs = np.asarray(tf.train.load_variable(prefix, name))
        if theirs.dtype.name == "bfloat16":
            # No numpy bfloat16: the reader widens to float32, which is exact.
            assert array.dtype == np.float32
            theirs = theirs.astype(np.float32)
        assert array.dtype == theirs.dtype, name
        assert array.shape == theirs.shape, name
        assert array.tobytes() == theirs.tobytes(), name
    if which == "pretraining":
        assert ours["global_step"].dtype == np.int64 and int(ours["global_step"]) == 2**40 + 7


def test_reader_is_lazy_and_accepts_index_path_or_directory(ckpts: dict) -> None:
    prefix = ckpts["pretraining"]
    reader = TFCheckpointReader(prefix + ".index")
    assert reader.prefix == prefix
    assert TFCheckpointReader(os.path.dirname(prefix)).prefix == prefix
    assert reader.variables["bert/encoder/layer_1/output/dense/kernel"].shape == (37, 32)
    assert len(reader) == 3 * PRETRAINING_TENSORS + 1
    np.testing.assert_array_equal(
        reader["bert/pooler/dense/kernel"], ckpts["pretraining_vars"]["bert/pooler/dense/kernel"]
    )
    with pytest.raises(KeyError):
        reader.read("no/such/variable")


def test_reader_refuses_string_tensors(ckpts: dict) -> None:
    with pytest.raises(BertPipelineError, match="string tensor"):
        TFCheckpointReader(ckpts["tf2"]).read("_CHECKPOINTABLE_OBJECT_GRAPH")


def test_crc32c_matches_known_vectors() -> None:
    # RFC 3720 (iSCSI) test vectors for CRC32C.
    assert tf_checkpoint.crc32c(b"123456789") == 0xE3069283
    assert tf_checkpoint.crc32c(bytes(32)) == 0x8A9136AA
    assert tf_checkpoint.crc32c(bytes([0xFF] * 32)) == 0x62A8AB43


# ------------------------------------------------------------------------------------------ (b) mapping


@pytest.mark.parametrize("which", ["pretraining", "classifier", "squad"])
def test_converted_state_equals_tf_values_with_transposes(ckpts: dict, which: str) -> None:
    prefix = ckpts[which]
    config = BertConfig.from_dict(TINY)
    state = convert_tf_state(TFCheckpointReader(prefix), config)
    expected = hf_expected({n: np.asarray(tf.train.load_variable(prefix, n)) for n in ckpts[f"{which}_vars"]})
    assert state.keys() == expected.keys()
    for name, value in expected.items():
        assert state[name].dtype == np.float32
        np.testing.assert_array_equal(state[name], value, err_msg=name)
    # Spot-check the layouts HF expects: torch Linear weight is [out, in]; Google's output_weights
    # are [out, hidden] already and must not be transposed.
    if which == "pretraining":
        assert state["bert.encoder.layer.0.intermediate.dense.weight"].shape == (37, 32)
        assert state["bert.encoder.layer.0.output.dense.weight"].shape == (32, 37)
        np.testing.assert_array_equal(
            state["cls.seq_relationship.weight"],
            ckpts["pretraining_vars"]["cls/seq_relationship/output_weights"],
        )
        assert state["bert.embeddings.word_embeddings.weight"].shape == (99, 32)
    if which == "classifier":
        assert state["classifier.weight"].shape == (3, 32)


def test_convert_skips_optimizer_slots_without_reading_them(ckpts: dict) -> None:
    read: list[str] = []

    class Spy(TFCheckpointReader):
        def read(self, name: str) -> np.ndarray:
            read.append(name)
            return super().read(name)

    state = convert_tf_state(Spy(ckpts["pretraining"]), BertConfig.from_dict(TINY))
    assert len(state) == PRETRAINING_TENSORS
    assert not any(n.endswith(("adam_m", "adam_v")) or n == "global_step" for n in read)


def test_shape_mismatch_names_variable_in_tf_layout(ckpts: dict) -> None:
    variables = load_variables(ckpts["pretraining"])
    del variables["bert/encoder/layer_0/intermediate/dense/bias"]
    with pytest.raises(CheckpointMismatchError) as err:
        convert_tf_state(variables, BertConfig.from_dict({**TINY, "intermediate_size": 40}))
    message = str(err.value)
    assert "'bert/encoder/layer_0/intermediate/dense/kernel'" in message
    assert "[32, 37]" in message and "[32, 40]" in message


def test_config_with_more_or_fewer_layers_is_a_mismatch(ckpts: dict) -> None:
    reader = TFCheckpointReader(ckpts["pretraining"])
    with pytest.raises(CheckpointMismatchError, match="layer_2/attention/self/query/kernel"):
        convert_tf_state(reader, BertConfig.from_dict({**TINY, "num_hidden_layers": 3}))
    with pytest.raises(CheckpointMismatchError, match="unknown variable 'bert/encoder/layer_1/"):
        convert_tf_state(reader, BertConfig.from_dict({**TINY, "num_hidden_layers": 1}))


# ------------------------------------------------------------------------------------------ (c) CLI


def test_cli_end_to_end_loads_into_hf_and_ours(
    ckpts: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "models" / "tiny"
    assert convert(ckpts["pretraining"], ckpts["config"], out) == 0
    summary = capsys.readouterr().out
    assert f"Converted {PRETRAINING_TENSORS} tensors" in summary
    assert f"skipped {2 * PRETRAINING_TENSORS + 1}" in summary and str(out) in summary
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"} <= set(os.listdir(out))
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]  # no temp dir left behind
    assert (out / "vocab.txt").read_bytes() == ckpts["vocab"].read_bytes()
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is True

    hf_config = transformers.BertConfig.from_json_file(str(out / "config.json"))
    assert (hf_config.vocab_size, hf_config.hidden_size, hf_config.intermediate_size) == (99, 32, 37)
    hf = transformers.BertForPreTraining(hf_config).eval()
    weights = {
        k: torch.from_numpy(v) for k, v in safetensors.numpy.load_file(out / "model.safetensors").items()
    }
    result = hf.load_state_dict(weights, strict=False)
    assert set(result.missing_keys) == {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}
    assert result.unexpected_keys == []
    # ...and those two are tied in HF, so they now hold the checkpoint's values.
    torch.testing.assert_close(
        hf.cls.predictions.decoder.weight, weights["bert.embeddings.word_embeddings.weight"]
    )
    torch.testing.assert_close(hf.cls.predictions.decoder.bias, weights["cls.predictions.bias"])

    input_ids = torch.tensor([[2, 10, 11, 12, 3, 20, 21, 3], [2, 30, 31, 32, 33, 3, 40, 3]])
    token_type_ids = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1]])
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, token_type_ids=token_type_ids)
    assert theirs.prediction_logits.shape == (2, 8, 99) and torch.isfinite(theirs.prediction_logits).all()

    from bert_core.model.modeling import BertForPreTraining

    ours = BertForPreTraining.from_pretrained(str(out)).eval()
    with torch.no_grad():
        mine = ours(input_ids, token_type_ids=token_type_ids)
    torch.testing.assert_close(mine.prediction_logits, theirs.prediction_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        mine.seq_relationship_logits, theirs.seq_relationship_logits, atol=1e-5, rtol=1e-5
    )


def test_cli_classifier_checkpoint_infers_cased_and_num_labels(ckpts: dict, tmp_path: Path) -> None:
    vocab = tmp_path / "my_vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n")
    cls_dir = Path(ckpts["classifier"]).parent
    assert convert(ckpts["classifier"], cls_dir / "bert_config.json", tmp_path / "out", "--vocab", vocab) == 0
    assert (tmp_path / "out" / "vocab.txt").read_text() == "[PAD]\n[UNK]\n"
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    assert transformers.BertConfig.from_json_file(str(tmp_path / "out" / "config.json")).num_labels == 3
    hf = transformers.BertForSequenceClassification.from_pretrained(str(tmp_path / "out"))
    np.testing.assert_array_equal(
        hf.classifier.weight.detach().numpy(), ckpts["classifier_vars"]["output_weights"]
    )

    # --do-lower-case overrides the directory name.
    out2 = tmp_path / "out2"
    assert convert(ckpts["classifier"], cls_dir / "bert_config.json", out2, "--do-lower-case") == 0
    assert json.loads((out2 / "tokenizer_config.json").read_text())["do_lower_case"] is True


def test_cli_overwrite(ckpts: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    before = snapshot(tmp_path)
    assert convert(ckpts["pretraining"], ckpts["config"], out) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(tmp_path) == before

    assert convert(ckpts["pretraining"], ckpts["config"], out, "--overwrite") == 0
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]

    empty = tmp_path / "empty"
    empty.mkdir()
    assert convert(ckpts["pretraining"], ckpts["config"], empty) == 0  # an empty dir is not "existing output"


# ------------------------------------------------------------------------------------------ (d) bad input


def _fails(capsys: pytest.CaptureFixture, *argv: str | os.PathLike) -> str:
    assert convert(*argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    return err


def test_missing_files(ckpts: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    err = _fails(capsys, tmp_path / "nope" / "bert_model.ckpt", ckpts["config"], out)
    assert "bert_model.ckpt.index does not exist" in err
    err = _fails(capsys, ckpts["pretraining"], tmp_path / "bert_config.json", out)
    assert "bert_config.json" in err
    err = _fails(capsys, ckpts["pretraining"], ckpts["config"], out, "--vocab", tmp_path / "vocab.txt")
    assert "vocab" in err

    # Index present, data shard gone.
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(ckpts["pretraining"] + ".index", broken / "bert_model.ckpt.index")
    err = _fails(capsys, broken / "bert_model.ckpt", ckpts["config"], out)
    assert "bert_model.ckpt.data-00000-of-00001 is missing" in err
    assert not out.exists()


def test_shape_mismatch_with_bert_config(ckpts: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({**TINY, "vocab_size": 100}))
    err = _fails(capsys, ckpts["pretraining"], config, tmp_path / "out")
    assert "'bert/embeddings/word_embeddings' has shape [99, 32]" in err and "[100, 32]" in err
    assert not (tmp_path / "out").exists()


def test_unknown_variable(ckpts: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    err = _fails(capsys, ckpts["unknown"], ckpts["config"], tmp_path / "out")
    assert "unknown variable 'bert/encoder/layer_0/attention/self/relative_positions'" in err
    assert [p.name for p in tmp_path.iterdir()] == []


def test_tf2_object_checkpoint_is_explained(
    ckpts: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = _fails(capsys, ckpts["tf2"], ckpts["config"], tmp_path / "out")
    assert "TF2 object-based checkpoint" in err


def test_not_a_checkpoint(ckpts: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "model.ckpt.index").write_text('{"this": "is json, not an SSTable"}\n' * 3)
    err = _fails(capsys, tmp_path / "model.ckpt", ckpts["config"], tmp_path / "out")
    assert "not a TensorFlow checkpoint index" in err
    (tmp_path / "tiny.index").write_bytes(b"x")
    with pytest.raises(BertPipelineError, match="not a TensorFlow checkpoint index"):
        TFCheckpointReader(tmp_path / "tiny")


def _index_block_trailer(index: bytes) -> int:
    """Offset of the index block's 5-byte trailer (compression type + masked CRC)."""
    footer = index[-48:]
    pos = 0
    handle = []
    for _ in range(4):
        value, pos = tf_checkpoint._read_varint(footer, pos)
        handle.append(value)
    return handle[2] + handle[3]


def test_corrupt_and_compressed_index_blocks(ckpts: dict, tmp_path: Path) -> None:
    index = bytearray(Path(ckpts["pretraining"] + ".index").read_bytes())
    trailer = _index_block_trailer(bytes(index))
    assert index[trailer] == 0  # TF writes uncompressed blocks

    flipped = bytearray(index)
    flipped[trailer - 1] ^= 0xFF
    (tmp_path / "flipped.index").write_bytes(flipped)
    with pytest.raises(BertPipelineError, match="checksum mismatch"):
        TFCheckpointReader(tmp_path / "flipped")

    snappy = bytearray(index)
    snappy[trailer] = 1
    (tmp_path / "snappy.index").write_bytes(snappy)
    with pytest.raises(BertPipelineError, match="snappy-compressed"):
        TFCheckpointReader(tmp_path / "snappy")


def test_verify_detects_corrupt_tensor_data(ckpts: dict, tmp_path: Path) -> None:
    prefix = ckpts["squad"]
    shutil.copy(prefix + ".index", tmp_path / "m.index")
    data = bytearray(Path(prefix + ".data-00000-of-00001").read_bytes())
    info = TFCheckpointReader(prefix).variables["bert/pooler/dense/bias"]
    data[info.offset] ^= 0x01
    (tmp_path / "m.data-00000-of-00001").write_bytes(data)
    assert TFCheckpointReader(tmp_path / "m").read("bert/pooler/dense/bias").shape == (32,)  # not checked
    with pytest.raises(BertPipelineError, match="checksum mismatch"):
        TFCheckpointReader(tmp_path / "m", verify=True).read("bert/pooler/dense/bias")

    (tmp_path / "m.data-00000-of-00001").write_bytes(data[: info.offset + 10])
    with pytest.raises(BertPipelineError, match="truncated"):
        TFCheckpointReader(tmp_path / "m").read("bert/pooler/dense/bias")
