"""In-process pretraining: overfitting a tiny language, accumulation, exact resume, checkpoints, bad input."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import pytest
import torch

from bert_core.errors import BertPipelineError, CheckpointMismatchError
from bert_core.io import manifest
from bert_core.model.modeling import BertForPreTraining
from bert_core.pretrain.step import PretrainConfig, check_inputs, pretrain
from bert_core.pretrain.stream import PretrainStream, ShardSet, StreamConfig
from bert_core.train.loop import NonFiniteLossError
from tests.fault_injection import FailAtStep
from tests.recording_tracker import RecordingTracker
from tests.synthetic_shards import tiny_model_config, write_shards


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_shards(tmp_path_factory.mktemp("data") / "shards", num_shards=2, per_shard=32, max_seq_length=32)


@pytest.fixture
def cfg(data, tmp_path):
    model = tiny_model_config(tmp_path / "tiny.json")

    def make(**overrides) -> PretrainConfig:
        base = dict(data=str(data), output=str(tmp_path / "out"), model=str(model), batch_size=16,
                    num_steps=6, lr=1e-3, optimizer="adamw", warmup_ratio=0.1, log_interval=1,
                    ckpt_interval=0, progress=False, tracking=False,
                    dtype="float32")  # runs are compared number by number (accumulation, resume): float32 everywhere
        return PretrainConfig(**{**base, **overrides})

    return make


def test_tiny_model_overfits_the_tiny_language(cfg, tmp_path):
    model_json = tiny_model_config(tmp_path / "m64.json", hidden=64, heads=4)
    tracker = RecordingTracker()
    result = pretrain(cfg(model=str(model_json), num_steps=200, lr=3e-3, batch_size=16, warmup_ratio=0.05,
                          log_interval=20, weight_decay=0.0), tracker)
    metrics = result["metrics"]
    assert metrics["mlm_accuracy"] > 0.9, metrics
    assert metrics["nsp_accuracy"] > 0.95, metrics
    assert result["training"]["metrics_on"] == "training data"
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "manifest.json", "model.safetensors"]
    assert manifest.verify_outputs(out) == []
    assert len(result["inputs"]) == 2 and all(len(e["sha256"]) == 64 for e in result["inputs"])
    reloaded = BertForPreTraining.from_pretrained(str(out))
    assert reloaded.config.hidden_size == 64
    losses = tracker.losses()
    assert losses[-1] < losses[0] / 4
    assert {"learning_rate", "loss_scale", "grad_norm", "tokens_per_s", "mlm_accuracy", "nsp_accuracy"} <= set(
        tracker.metrics[0][1])


def test_pretrained_dir_is_the_starting_point(cfg, tmp_path):
    """--pretrained DIR continues from those weights: step 1's loss is the trained model's, not a fresh one's."""
    pretrain(cfg(num_steps=30, lr=3e-3, output=str(tmp_path / "first")))
    fresh, continued = RecordingTracker(), RecordingTracker()
    pretrain(cfg(num_steps=2, output=str(tmp_path / "fresh")), fresh)
    pretrain(cfg(num_steps=2, output=str(tmp_path / "continued"), model=None, pretrained=str(tmp_path / "first")),
             continued)
    assert continued.losses()[0] < fresh.losses()[0] - 0.3
    done = manifest.read(tmp_path / "continued")
    assert done["config"]["pretrained"] == str(tmp_path / "first")
    assert any(i["uri"].startswith(str(tmp_path / "first")) for i in done["inputs"])  # its weights are an input


def test_a_run_resolves_its_inputs_and_model_once(cfg, tmp_path, monkeypatch):
    """pretrain() plans its run at the entry (bert_core.pretrain.run_plan) and hands the plan down: the shards,
    the starting weights and the output are resolved once, not again by each helper."""
    from bert_core.pretrain import run_plan

    pretrain(cfg(num_steps=2, output=str(tmp_path / "first")))
    calls = {"shards": 0, "model_dir": 0, "plans": 0, "precision": 0}

    def counted(name, fn):
        def call(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)
        return call

    resolve = counted("model_dir", run_plan.resolve_model_dir)
    monkeypatch.setattr(run_plan, "ShardSet", counted("shards", run_plan.ShardSet))
    monkeypatch.setattr(run_plan, "resolve_model_dir", resolve)
    monkeypatch.setattr("bert_core.model.weights.resolve_model_dir", resolve)
    monkeypatch.setattr("bert_core.pretrain.step.plan_run", counted("plans", run_plan.plan_run))
    monkeypatch.setattr(run_plan, "resolve_precision", counted("precision", run_plan.resolve_precision))
    config = cfg(num_steps=2, output=str(tmp_path / "continued"), model=None, pretrained=str(tmp_path / "first"),
                 data_eval=cfg().data)
    result = pretrain(config)
    # data and data_eval; the starting weights; the precision
    assert calls == {"shards": 2, "model_dir": 1, "plans": 1, "precision": 1}
    assert result["config"]["pretrained"] == str(tmp_path / "first")


def test_accumulation_equals_the_doubled_batch(cfg, tmp_path):
    runs = {}
    for name, kwargs in {"accumulate": dict(batch_size=8, accumulate=2), "batch": dict(batch_size=16)}.items():
        tracker = RecordingTracker()
        pretrain(cfg(output=str(tmp_path / name), num_steps=5, **kwargs), tracker)
        runs[name] = tracker.losses()
    assert len(runs["batch"]) == 5
    torch.testing.assert_close(runs["accumulate"], runs["batch"], rtol=1e-5, atol=1e-6)


def test_kill_and_resume_equals_uninterrupted(cfg, tmp_path, monkeypatch):
    dropout_model = tiny_model_config(tmp_path / "dropout.json", dropout=0.1)  # RNG state must resume too
    common = dict(model=str(dropout_model), num_steps=7, ckpt_interval=2, optimizer="lamb")
    straight = RecordingTracker()
    pretrain(cfg(output=str(tmp_path / "straight"), ckpt_dir=str(tmp_path / "ck1"), **common), straight)

    killed = RecordingTracker()
    with pytest.raises(RuntimeError, match="injected failure at step 5"):
        pretrain(cfg(output=str(tmp_path / "resumed"), ckpt_dir=str(tmp_path / "ck2"), **common), killed,
                 hooks=[FailAtStep(5)])
    assert not (tmp_path / "resumed").exists()  # no final model from a killed run
    assert (tmp_path / "ck2" / "latest").read_text().strip() == "step-00000004"
    resumed = RecordingTracker()
    result = pretrain(cfg(output=str(tmp_path / "resumed"), ckpt_dir=str(tmp_path / "ck2"), resume="latest",
                          **common), resumed)
    assert result["training"]["resumed_from"].endswith("step-00000004")
    assert [s for s, m in resumed.metrics if "learning_rate" in m] == [5, 6, 7]
    assert killed.losses()[:4] + resumed.losses() == straight.losses()  # exactly, step by step
    assert result["metrics"] == pytest.approx(json.loads((tmp_path / "straight" / "manifest.json").read_text())[
        "metrics"], rel=0, abs=0)


class Held(Exception):
    def __init__(self, step: int):
        super().__init__(step)
        self.step = step


class DrainNotice:
    """A Preemption (bert_core.train.step_spec) whose notice comes after step `at` and leaves `left` more steps
    before the last checkpoint; its hold ends the run, as Ray Train stopping the workers does."""

    may_grow = False

    def __init__(self, at: int, left: int):
        self.at, self.left, self.asked = at, left, []

    def noticed(self, step: int) -> bool:
        self.asked.append(("noticed", step))
        return step >= self.at

    def steps_left(self, step_seconds: float, checkpoint_seconds: float) -> int:
        self.asked.append(("steps_left", step_seconds > 0, checkpoint_seconds > 0))
        return self.left

    def hold(self, step: int) -> None:
        raise Held(step)


@pytest.mark.parametrize("left, checkpoints", [(0, [3]), (2, [3, 5])])
def test_a_drain_notice_checkpoints_at_once_trains_on_while_there_is_time_then_checkpoints_and_holds(
        cfg, tmp_path, left, checkpoints):
    notice = DrainNotice(at=3, left=left)
    with pytest.raises(Held) as held:
        pretrain(cfg(ckpt_dir=str(tmp_path / "ck"), num_steps=10, keep_checkpoints=0), preemption=notice)
    assert held.value.step == checkpoints[-1]
    assert sorted(p.name for p in (tmp_path / "ck").glob("step-*")) == [f"step-{s:08d}" for s in checkpoints]
    # Asked after every step until the notice, then told how long the steps and the checkpoint take.
    assert notice.asked == [("noticed", 1), ("noticed", 2), ("noticed", 3), ("steps_left", True, True)]
    assert not (tmp_path / "out").exists()


class GrowNotice:
    """A Preemption whose group is below its maximum (`may_grow`) and could grow after step `at`."""

    def __init__(self, at: int, may_grow: bool = True):
        self.at, self.may_grow, self.steps = at, may_grow, 0

    def grow_possible(self) -> bool:
        self.steps += 1
        return self.steps == self.at

    def noticed(self, step: int) -> bool:
        return False


@pytest.mark.parametrize("may_grow, checkpoints", [(True, ["step-00000004"]), (False, [])])
def test_room_for_a_larger_group_makes_a_checkpoint_the_resize_continues_from(cfg, tmp_path, may_grow,
                                                                               checkpoints):
    notice = GrowNotice(at=4, may_grow=may_grow)
    result = pretrain(cfg(ckpt_dir=str(tmp_path / "ck"), num_steps=6, keep_checkpoints=0), preemption=notice)
    assert result["training"]["steps"] == 6  # training went on
    assert sorted(p.name for p in (tmp_path / "ck").glob("step-*")) == checkpoints
    assert notice.steps == (6 - 1 if may_grow else 0)  # asked after every step but the last; never when it cannot grow


def test_checkpoints_are_model_dirs_and_pruned(cfg, tmp_path):
    ck = tmp_path / "ck"
    pretrain(cfg(ckpt_dir=str(ck), ckpt_interval=1, num_steps=5, keep_checkpoints=2))
    assert sorted(p.name for p in ck.iterdir()) == ["latest", "step-00000003", "step-00000004"]
    assert sorted(p.name for p in (ck / "step-00000004").iterdir()) == [
        "config.json", "model.safetensors", "training_state.pt"]
    state = torch.load(ck / "step-00000004" / "training_state.pt", weights_only=True)
    assert state["step"] == 4 and state["data_position"]["batches"] == 4
    BertForPreTraining.from_pretrained(str(ck / "step-00000004"))


def test_rerun_is_a_no_op_and_output_is_protected(cfg, tmp_path):
    first = pretrain(cfg(num_steps=2))
    again = pretrain(cfg(num_steps=2, resume="latest", log_interval=5))  # launch settings do not matter
    assert again["started_at"] == first["started_at"]
    with pytest.raises(BertPipelineError, match="already exists and is not this run's result; pass --overwrite"):
        pretrain(cfg(num_steps=3))
    assert manifest.read(tmp_path / "out")["config"]["num_steps"] == 2
    assert pretrain(cfg(num_steps=3, overwrite=True))["config"]["num_steps"] == 3


def test_eval_data_epochs_and_auto_precision(cfg, data, tmp_path, monkeypatch, caplog):
    """--dtype auto on a CPU with AMX-BF16 (detection faked, so the test means the same on any machine) trains in
    bfloat16 and says so: one log line, the manifest's `precision`, the MLflow params."""
    monkeypatch.setattr("bert_core.train.precision._cpu_capabilities", lambda: {"avx512_bf16": False,
                                                                                "amx_bf16": True})
    eval_dir = write_shards(tmp_path / "eval", num_shards=1, per_shard=20, seed=9)
    tracker = RecordingTracker()
    with caplog.at_level(logging.INFO, logger="bert_core.pretrain.step"):
        result = pretrain(cfg(data_eval=str(eval_dir), epochs=2, num_steps=None, dtype="auto", eval_interval=2,
                              num_buckets=2), tracker)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision:")]
    assert lines == ["precision: bfloat16 autocast (--dtype auto: this CPU computes bfloat16 natively (amx_bf16)); "
                     "weights, optimizer state, losses, softmax sums and LayerNorm statistics stay float32"]
    assert result["precision"] == {"dtype": "bfloat16", "requested": "auto",
                                   "reason": "this CPU computes bfloat16 natively (amx_bf16)"}
    assert result["config"]["dtype"] == "auto"
    assert (tracker.params["precision"], tracker.params["dtype"]) == ("bfloat16", "auto")
    assert tracker.params["precision_reason"] == result["precision"]["reason"]
    stream = PretrainStream(ShardSet(str(data)), StreamConfig(16, 0, num_buckets=2))
    assert result["training"]["total_steps"] == stream.batches_in_epoch(0) + stream.batches_in_epoch(1)
    assert result["training"]["metrics_on"] == "data_eval"
    assert {"loss", "mlm_accuracy", "nsp_accuracy"} <= set(result["metrics"])
    assert any("eval_mlm_accuracy" in m for _, m in tracker.metrics)
    assert tracker.tags["data_sha256"]
    assert str(data / "manifest.json") in tracker.artifacts
    assert tracker.models == [["config.json", "manifest.json", "model.safetensors"]]


def test_fp16_runs_with_loss_scale(cfg):
    tracker = RecordingTracker()
    pretrain(cfg(dtype="float16", num_steps=3), tracker)
    assert tracker.metrics[0][1]["loss_scale"] == 2.0 ** 16


def test_no_shards_and_vocab_mismatch(cfg, tmp_path):
    with pytest.raises(BertPipelineError, match=r"^--data: no shards match .*missing/part-\*\.npz"):
        pretrain(cfg(data=str(tmp_path / "missing" / "part-*.npz")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BertPipelineError, match=r"^--data-eval: no shards match .*empty.* \(expected "
                                                r"part-NNNNN\.npz files from `bert-pipeline make-shards`\)"):
        pretrain(cfg(data_eval=str(tmp_path / "empty")))
    wide = write_shards(tmp_path / "wide", num_shards=1, manifest=False, vocab_size=300)
    with pytest.raises(BertPipelineError, match=r"wide/part-00000\.npz: token id \d+ is outside .*vocab_size=40"):
        pretrain(cfg(data=str(wide)))
    assert not (tmp_path / "out").exists()


def test_resume_from_another_architecture(cfg, tmp_path):
    pretrain(cfg(ckpt_dir=str(tmp_path / "ck"), ckpt_interval=2, num_steps=3))
    other = tiny_model_config(tmp_path / "other.json", hidden=48, heads=2)
    with pytest.raises(CheckpointMismatchError, match=r"step-00000002: checkpoint is from a different architecture: "
                                                      r"hidden_size=32 \(model: 48\)"):
        pretrain(cfg(output=str(tmp_path / "out2"), model=str(other), ckpt_dir=str(tmp_path / "ck"), resume="latest"))
    assert not (tmp_path / "out2").exists()
    with pytest.raises(BertPipelineError, match="--resume: no checkpoint in"):
        pretrain(cfg(output=str(tmp_path / "out3"), ckpt_dir=str(tmp_path / "none"), resume="latest"))
    fresh = pretrain(cfg(output=str(tmp_path / "out4"), ckpt_dir=str(tmp_path / "none"), resume="auto"))
    assert fresh["training"]["resumed_from"] is None


def test_nan_loss_in_fp32_names_the_step_and_overwrites_nothing(cfg, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "previous-model.txt").write_text("keep me")
    calls = {"n": 0}
    forward = BertForPreTraining.forward

    def poisoned(self, *args, **kwargs):
        result = forward(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 3:
            result.prediction_logits = result.prediction_logits * float("nan")
        return result

    monkeypatch.setattr(BertForPreTraining, "forward", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"step 3: the loss is nan .* in float32"):
        pretrain(cfg(overwrite=True))
    assert [p.name for p in out.iterdir()] == ["previous-model.txt"]
    assert not list(tmp_path.glob(".out.tmp-*"))


def test_config_validation(cfg):
    with pytest.raises(BertPipelineError, match="exactly one of --model"):
        pretrain(dataclasses.replace(cfg(), pretrained="x"))
    with pytest.raises(BertPipelineError, match="exactly one of --num-steps and --epochs"):
        pretrain(cfg(epochs=1))
    with pytest.raises(BertPipelineError, match="--optimizer must be one of"):
        pretrain(cfg(optimizer="sgd"))
    with pytest.raises(BertPipelineError, match=r"--watch-fraction must be in \(0, 1\), got 1.5"):
        pretrain(cfg(watch_fraction=1.5))
    with pytest.raises(BertPipelineError, match="--lr must be positive"):
        pretrain(cfg(lr=0.0))


def test_cli_help_and_runs(cfg, data, tmp_path, monkeypatch, capsys):
    import argparse

    from bert_pipeline.cli import main
    from bert_pipeline.commands import pretrain as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    flags = {a.option_strings[0]: a.help for a in parser._actions if a.option_strings and a.dest != "help"}
    assert {"--data", "--data-eval", "--model", "--pretrained", "--output", "--batch-size", "--accumulate", "--lr",
            "--warmup-ratio", "--num-steps", "--epochs", "--optimizer", "--weight-decay", "--max-grad-norm",
            "--dtype", "--ckpt-interval", "--ckpt-dir", "--resume", "--log-interval", "--num-buckets",
            "--use-avg-len", "--seed", "--num-workers", "--use-gpu", "--storage", "--max-failures",
            "--no-tracking", "--tracking-uri"} <= set(flags)
    assert all(flags.values())

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    model = cfg().model
    out = tmp_path / "cli-out"
    # Relative paths, as typed: the manifest says where the inputs were, whatever directory the command ran in.
    args = ["pretrain", "--data", f"{os.path.relpath(data, tmp_path)}/part-*.npz", "--model", model, "--output",
            "cli-out", "--num-steps", "2", "--batch-size", "8", "--no-tracking", "--no-progress", "--ckpt-interval", "0"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["output"] == str(out) and 0 <= printed["mlm_accuracy"] <= 1
    recorded = json.loads((out / "manifest.json").read_text())["config"]
    assert recorded["data"] == f"{os.path.abspath(data)}/part-*.npz" and recorded["output"] == str(out)
    assert main(args) == 0  # up to date: a no-op
    capsys.readouterr()  # (the tiny run's learning-check warnings)

    assert main(["pretrain", "--data", str(tmp_path / "none-*.npz"), "--model", model, "--output",
                 str(tmp_path / "x"), "--num-steps", "2", "--no-tracking"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --data: no shards match" in err[0]


def test_s3_shards_checkpoints_and_output(cfg, data, s3_bert_bucket, tmp_path, monkeypatch):
    s3 = s3_bert_bucket
    for path in sorted(data.iterdir()):
        s3.upload_file(path, f"s3://bert/shards/{path.name}")
    common = dict(data="s3://bert/shards/part-*.npz", output="s3://bert/models/tiny", ckpt_dir="s3://bert/ckpt",
                  ckpt_interval=2, num_steps=4)
    straight = RecordingTracker()
    pretrain(cfg(**{**common, "output": "s3://bert/models/straight", "ckpt_dir": "s3://bert/ck0"}), straight)
    with pytest.raises(RuntimeError, match="injected failure"):
        pretrain(cfg(**common), hooks=[FailAtStep(3)])
    assert not s3.exists("s3://bert/models/tiny")
    assert s3.exists("s3://bert/ckpt/step-00000002/training_state.pt")
    resumed = RecordingTracker()
    result = pretrain(cfg(**common, resume="latest"), resumed)
    assert result["training"]["resumed_from"] is not None
    assert resumed.losses() == straight.losses()[2:]
    assert {"config.json", "model.safetensors", "manifest.json"} <= set(s3.list_files("s3://bert/models/tiny"))
    assert BertForPreTraining.from_pretrained("s3://bert/models/tiny").config.hidden_size == 32
    # The same run again (a retried Airflow task): the output on S3 is this result, so nothing runs; other weights
    # named by the manifest missing there: another result, refused.
    assert check_inputs(cfg(**common, resume="latest"))[1] == manifest.read("s3://bert/models/tiny")
    # ... also on another machine (another local cache of the shards): the inputs are named by their URIs.
    monkeypatch.setenv("BERT_PIPELINE_CACHE", str(tmp_path / "another-machine-cache"))
    assert check_inputs(cfg(**common, resume="latest"))[1] == manifest.read("s3://bert/models/tiny")
    assert all(i["uri"].startswith("s3://bert/shards/") for i in manifest.read("s3://bert/models/tiny")["inputs"])
    bucket, key = s3.split_s3("s3://bert/models/tiny/model.safetensors")
    s3.s3_client().delete_object(Bucket=bucket, Key=key)
    with pytest.raises(BertPipelineError, match="already exists and is not this run's result"):
        check_inputs(cfg(**common, resume="latest"))


def _shards_with_their_vocab(tmp_path):
    """One shard whose make-shards manifest records the 40-token vocab it was made with: (dir, vocab, manifest)."""
    data = write_shards(tmp_path / "shards", num_shards=1)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"tok{i}\n" for i in range(40)))
    meta = json.loads((data / "manifest.json").read_text())
    meta["vocab"] = {"uri": str(vocab), "sha256": manifest.sha256_file(vocab), "size": 40}
    (data / "manifest.json").write_text(json.dumps(meta))
    return data, vocab, meta


def test_output_carries_the_vocab_the_shards_were_made_with(cfg, tmp_path):
    """make-shards records `vocab: {uri, sha256, size}` in its manifest: the size is checked against the
    model, and the file goes into the model directory."""
    data, vocab, meta = _shards_with_their_vocab(tmp_path)
    pretrain(cfg(data=str(data), num_steps=1, batch_size=8))
    assert (tmp_path / "out" / "vocab.txt").read_text() == vocab.read_text()
    meta["vocab"]["size"] = 30522
    (data / "manifest.json").write_text(json.dumps(meta))
    with pytest.raises(BertPipelineError, match="shards were made with a vocabulary of 30522 tokens"):
        pretrain(cfg(data=str(data), output=str(tmp_path / "out2"), num_steps=1, batch_size=8))


def test_an_architecture_name_is_sized_to_the_shards_vocab(cfg, tmp_path):
    """--model bert_LAYERS_HIDDEN_HEADS from scratch gets the vocab_size the shards' make-shards manifest
    records, not BERT's 30,522 (a softmax over ids that never occur, and a config.json that disagrees with the
    vocab.txt beside it); a CONFIG_JSON keeps the size it says."""
    from bert_core.pretrain.run_plan import plan_run

    data, vocab, _ = _shards_with_their_vocab(tmp_path)
    pretrain(cfg(data=str(data), model="bert_1_32_2", num_steps=1, batch_size=8))
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["vocab_size"] == 40 == len((tmp_path / "out" / "vocab.txt").read_text().splitlines())
    assert saved["hidden_size"] == 32 and saved["num_hidden_layers"] == 1
    wider = tiny_model_config(tmp_path / "wider.json", vocab_size=64)
    assert plan_run(cfg(data=str(data), model=str(wider))).model_config.vocab_size == 64
    unrecorded = write_shards(tmp_path / "unrecorded", num_shards=1, manifest=False)
    assert plan_run(cfg(data=str(unrecorded), model="bert_1_32_2")).model_config.vocab_size == 30522


def test_a_wrong_vocab_is_an_error_before_training(cfg, tmp_path, monkeypatch):
    """--vocab is checked with the shards, before any step: a missing file, one larger than the model's
    vocab_size, or another vocab than the shards' make-shards manifest records each name --vocab and the file;
    no step runs and nothing is written (it used to fail after the whole run, writing the model directory)."""
    data, _, _ = _shards_with_their_vocab(tmp_path)
    other = tmp_path / "other.txt"
    other.write_text("".join(f"word{i}\n" for i in range(40)))
    big = tmp_path / "big.txt"
    big.write_text("".join(f"tok{i}\n" for i in range(41)))
    monkeypatch.setattr("bert_core.pretrain.step.build_model",
                        lambda *a, **k: pytest.fail("a step ran with a wrong --vocab"))
    for bad, message in [(tmp_path / "missing.txt", r"--vocab .*missing\.txt: no such file; expected"),
                         (big, r"--vocab .*big\.txt: 41 tokens, more than the model's vocab_size \(40\)"),
                         (other, r"--vocab .*other\.txt \(sha256 \w+\) is not the vocab the shards were made "
                                 r"with: .*manifest\.json records .*vocab\.txt")]:
        with pytest.raises(BertPipelineError, match=message):
            check_inputs(cfg(data=str(data), vocab=str(bad), num_steps=1, batch_size=8))
        with pytest.raises(BertPipelineError, match=message):
            pretrain(cfg(data=str(data), vocab=str(bad), num_steps=1, batch_size=8))
    assert not (tmp_path / "out").exists()


def test_without_a_progress_bar_the_log_says_where_the_run_is(cfg, monkeypatch, caplog):
    """DAG tasks run with progress off (a bar would flood the task log): a line every PROGRESS_LINE_S instead, and
    always one for the last step, so that a run shorter than PROGRESS_LINE_S still says its loss (`pretrain
    --no-tracking` without a terminal logged none: no bar, no MLflow, no line)."""
    from bert_core.pretrain import step as pretrain_step

    monkeypatch.setattr(pretrain_step, "PROGRESS_LINE_S", 0.0)
    with caplog.at_level("INFO", logger="bert_core.pretrain.step"):
        pretrain(cfg(num_steps=4, log_interval=2))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().endswith("tokens/s")]
    steps = [line.split(":")[0] for line in lines]
    assert {"step 2 of 4", "step 4 of 4"} <= set(steps), lines
    assert "masked-LM accuracy" in lines[-1] and "(training)" in lines[-1]
    monkeypatch.setattr(pretrain_step, "PROGRESS_LINE_S", 3600.0)
    caplog.clear()
    with caplog.at_level("INFO", logger="bert_core.pretrain.step"):
        pretrain(cfg(num_steps=4, log_interval=2, output=cfg().output + "-2"))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().endswith("tokens/s")]
    # Only the last step's line: the one before it came less than PROGRESS_LINE_S after the start.
    assert [line.split(":")[0] for line in lines] == ["step 4 of 4"], lines
    assert "loss" in lines[0] and "masked-LM accuracy" in lines[0]


def _with_casing(data, do_lower_case: bool):
    """The shards' make-shards manifest records the casing they were tokenized with (make-shards --cased)."""
    meta = json.loads((data / "manifest.json").read_text())
    meta["config"]["do_lower_case"] = do_lower_case
    (data / "manifest.json").write_text(json.dumps(meta))
    return data


def test_the_casing_the_shards_give_the_model_is_logged_once_a_run(cfg, tmp_path, caplog):
    """`bert-pipeline pretrain` in this process: the launcher's check, then the run, each plan the run
    (run_plan.plan_run), and the line saying that the model takes the shards' casing came twice. Once now, from the
    plan that trains; as a Ray Train worker runs the step (the launcher's inputs handed over, the run planned again
    in the worker's process), the worker still says it."""
    from bert_core.launch.run import run_step
    from bert_core.pretrain.step import PRETRAIN

    cased = _with_casing(write_shards(tmp_path / "cased", num_shards=1), False)

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.getMessage().startswith("do_lower_case False, as the "
                                                                                      "shards were tokenized")]

    with caplog.at_level("INFO", logger="bert_core.pretrain.run_plan"):
        run_step(PRETRAIN, cfg(data=str(cased), num_steps=1, batch_size=8))
    assert len(said()) == 1, said()

    worker = cfg(data=str(cased), num_steps=1, batch_size=8, output=str(tmp_path / "worker"))
    inputs, _ = check_inputs(worker)  # the launcher's check (on Ray, in the driver's process)
    caplog.clear()
    with caplog.at_level("INFO", logger="bert_core.pretrain.run_plan"):
        pretrain(worker, inputs=inputs, device=torch.device("cpu"))
    assert len(said()) == 1, said()


def test_the_model_directory_records_the_casing_of_its_shards(cfg, tmp_path):
    """Shards made with --cased give a model whose config says do_lower_case false: finetune, embed and serving
    read it, and a model trained on cased text used to be written as lower-casing (the zoo's default), so every
    later step lower-cased its input. Weights of the other casing, or train/eval shards of different casings,
    are an error before training."""
    cased = _with_casing(write_shards(tmp_path / "cased", num_shards=1), False)
    pretrain(cfg(data=str(cased), num_steps=1, batch_size=8))
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["do_lower_case"] is False
    uncased = _with_casing(write_shards(tmp_path / "uncased", num_shards=1), True)
    with pytest.raises(BertPipelineError, match=r"tokenized with different casings .*cased.*do_lower_case False"):
        check_inputs(cfg(data=str(cased), data_eval=str(uncased), output=str(tmp_path / "o2")))
    lower = tmp_path / "lower"
    lower.mkdir()
    (lower / "config.json").write_text(json.dumps({**saved, "do_lower_case": True}))
    (lower / "model.safetensors").write_bytes((tmp_path / "out" / "model.safetensors").read_bytes())
    with pytest.raises(BertPipelineError, match=r"--pretrained .*lower is a lower-casing model .* made with "
                                                r"make-shards --cased"):
        check_inputs(cfg(data=str(cased), model=None, pretrained=str(lower), output=str(tmp_path / "o3")))
