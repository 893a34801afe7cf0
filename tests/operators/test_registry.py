"""Registry promotion against a real MLflow sqlite store: first model, better, equal, worse, below floor."""

from __future__ import annotations

import json

import pytest

from operators import registry
from tests.paths import FIXTURES
from tests.tiny_bert import write_tiny_bert


@pytest.fixture()
def store(registry_store):
    return registry_store


def _aliases(name: str) -> dict[str, str]:
    client = registry._client(None)
    return {a: str(client.get_model_version_by_alias(name, a).version)
            for a in (registry.CHAMPION, registry.PREVIOUS) if registry.current_version(client, name, a)}


def test_promotion_sequence(store, tmp_path):
    first = store({"accuracy": 0.8})
    report = registry.promote("bert-sst-2", first, report_path=tmp_path / "r1.json")
    assert report["promoted"] and report["champion_before"] is None
    assert report["reasons"] == ["first model: no champion yet"]
    assert json.loads((tmp_path / "r1.json").read_text())["champion_after"] == first
    assert _aliases("bert-sst-2") == {"champion": first}

    better = store({"accuracy": 0.9})
    assert registry.promote("bert-sst-2", better)["promoted"]
    assert _aliases("bert-sst-2") == {"champion": better, "previous": first}

    worse = store({"accuracy": 0.85})
    report = registry.promote("bert-sst-2", worse)
    assert not report["promoted"] and "worse than the champion's 0.9" in report["reasons"][0]
    assert _aliases("bert-sst-2") == {"champion": better, "previous": first}

    equal = store({"accuracy": 0.9})
    assert registry.promote("bert-sst-2", equal)["promoted"]  # no worse: ties promote
    assert _aliases("bert-sst-2") == {"champion": equal, "previous": better}

    client = registry._client(None)
    tags = client.get_model_version("bert-sst-2", worse).tags
    assert tags["promotion.decision"] == "rejected" and tags["promotion.compared_to"] == better
    assert tags["metric.accuracy"] == "0.85" and tags["origin"] == "test"
    assert client.get_model_version("bert-sst-2", equal).tags["promotion.decision"] == "promoted"
    assert client.get_model_version("bert-sst-2", better).tags["promotion.superseded_by"] == equal
    # Promoting the champion again is a no-op that says so.
    assert registry.promote("bert-sst-2", equal)["reasons"] == ["already the champion"]


def test_below_floor_and_missing_metric(store):
    low = store({"accuracy": 0.4})
    report = registry.promote("bert-sst-2", low)  # default floor for sst-2: chance (0.5)
    assert not report["promoted"] and report["reasons"] == ["accuracy: 0.4 is below the floor 0.5"]
    assert _aliases("bert-sst-2") == {}
    other = store({"f1": 0.7})
    report = registry.promote("bert-sst-2", other, gates=["accuracy"], floors={})
    assert not report["promoted"] and "no value" in report["reasons"][0]


def test_metrics_of_another_dev_file_are_not_compared(store):
    """bert-squad holds SQuAD 1.1 and 2.0 models alike: a 2.0 candidate at f1 64 replaced a 1.1 champion at f1 50
    (other data, and its exact gate skipped) with "every gate metric is no worse". Scored on another dev file, a
    candidate is not promoted, whatever its figures; one scored on the same file is judged as before."""
    first = store({"accuracy": 0.80}, tags={registry.DEV_DATA_TAG: "a" * 64})
    assert registry.promote("bert-sst-2", first, check_serving=False)["promoted"]
    other = store({"accuracy": 0.95}, tags={registry.DEV_DATA_TAG: "b" * 64})
    report = registry.promote("bert-sst-2", other, check_serving=False)
    assert not report["promoted"] and _aliases("bert-sst-2") == {"champion": first}
    assert report["reasons"][-1].startswith(f"it was scored on another dev file than champion v{first} (sha256 "
                                            f"{'b' * 12} against {'a' * 12}")
    same = store({"accuracy": 0.90}, tags={registry.DEV_DATA_TAG: "a" * 64})
    assert registry.promote("bert-sst-2", same, check_serving=False)["promoted"]


def test_lower_is_better_and_names(store):
    heldout = {"metrics_on": "held-out"}
    first = store({"loss": 2.0, "mlm_accuracy": 0.3, "mlm_accuracy_over_chance": 0.24}, name="bert-pretrained",
                  tags=heldout)
    assert registry.promote("bert-pretrained", first, gates=["loss"])["promoted"]
    higher_loss = store({"loss": 2.5, "mlm_accuracy": 0.3, "mlm_accuracy_over_chance": 0.24},
                        name="bert-pretrained", tags=heldout)
    assert not registry.promote("bert-pretrained", higher_loss, gates=["loss"])["promoted"]
    assert registry.model_name("SST-2") == "bert-sst-2" and registry.model_name(None) == "bert-pretrained"
    # Each SQuAD version has its own model (and champion): their dev files and metrics differ.
    assert [registry.model_name("squad", v) for v in (False, True)] == ["bert-squad", "bert-squad2"]
    assert registry.model_name("sst-2", version_2=True) == "bert-sst-2"
    assert registry.default_gates("bert-cola") == ("mcc",)
    assert registry.decide({"f1": 1.0}, None, ("f1",), {"f1": 1.0}) == (True, [])


def test_a_first_model_must_beat_chance_on_its_gate_metrics():
    """A task without a floor (STS-B, MRPC, CoLA ...) and no champion yet: a model no better than one that ignores
    its input (the dev set's majority label; a constant score's correlation 0) is not promoted. Seen: a bert-sts-b
    at pearson -0.03 became champion."""
    chance = {"pearson": 0.0, "spearman": 0.0}
    promoted, reasons = registry.decide({"pearson": -0.0339, "spearman": 0.0714}, None, ("pearson", "spearman"), {},
                                        chance)
    assert not promoted and reasons == [
        "pearson: -0.0339 is no better than chance 0 (a model that ignores its input: the dev set's most "
        "frequent label, a constant score, no answer or no entity)"]
    # MRPC's majority answer scores F1 0.812: a model at 0.822 / 0.708 beats it on both gates.
    mrpc = {"accuracy": 0.6838, "f1": 0.8122}
    assert registry.decide({"f1": 0.822, "accuracy": 0.708}, None, ("f1", "accuracy"), {}, mrpc) == (True, [])
    assert not registry.decide({"f1": 0.8122, "accuracy": 0.708}, None, ("f1", "accuracy"), {}, mrpc)[0]
    # Chance is no bar for a metric that is not a gate, nor where none was measured.
    assert registry.decide({"f1": 0.9, "accuracy": 0.5}, None, ("f1",), {}, mrpc) == (True, [])
    assert registry.decide({"f1": 0.5}, None, ("f1",), {}, None) == (True, [])


def test_chance_recorded_at_registration_gates_every_later_promotion(store):
    """The chance level of a version's dev data is a tag of the version, so a promotion made later (by hand,
    `bert-pipeline promote`) refuses a first model at chance as the DAG's own promotion does."""
    mrpc = {"accuracy": 0.6838, "f1": 0.8122}
    at_chance = store({"f1": 0.8122, "accuracy": 0.6838}, name="bert-mrpc", chance=mrpc)
    report = registry.promote("bert-mrpc", at_chance, check_serving=False)
    assert not report["promoted"] and report["chance"] == mrpc
    assert report["reasons"][0].startswith("f1: 0.8122 is no better than chance 0.8122")
    better = store({"f1": 0.85, "accuracy": 0.75}, name="bert-mrpc", chance=mrpc)
    assert registry.promote("bert-mrpc", better, check_serving=False)["promoted"]


def test_override_promotes_over_the_gates_and_reject_records_a_decision(store):
    """A rollback: the champion before is put back by hand over the gates (it scores lower), with the reason and
    the gates' findings recorded; a worse candidate is rejected by hand; the champion cannot be."""
    from bert_core.errors import BertPipelineError

    old, new, worse = store({"accuracy": 0.8}), store({"accuracy": 0.9}), store({"accuracy": 0.7})
    for version in (old, new):
        assert registry.promote("bert-sst-2", version, check_serving=False)["promoted"]
    report = registry.promote("bert-sst-2", old, override="v2 answers badly in production")
    assert report["promoted"] and report["serving_check"]["problems"] == []
    assert report["reasons"] == ["promoted by hand (v2 answers badly in production) over the gates: accuracy: 0.8 is "
                                 "worse than the champion's 0.9"]
    assert _aliases("bert-sst-2") == {"champion": old, "previous": new}

    report = registry.reject("bert-sst-2", worse, "0.7 on SST-2")
    tags = registry._client(None).get_model_version("bert-sst-2", worse).tags
    assert tags["promotion.decision"] == "rejected" and tags["promotion.reasons"] == "rejected by hand: 0.7 on SST-2"
    assert report["champion_after"] == old and _aliases("bert-sst-2") == {"champion": old, "previous": new}
    with pytest.raises(BertPipelineError, match=f"bert-sst-2 v{old} is the champion: it cannot be rejected while "
                                                f"it is served.*bert-pipeline promote bert-sst-2 {new} --override"):
        registry.reject("bert-sst-2", old, "oops")
    with pytest.raises(BertPipelineError, match=r"bert-sst-2 v9: no such registered model version in sqlite:.*"
                                                r"\(its versions: 1, 2, 3\)"):
        registry.promote("bert-sst-2", "9")
    with pytest.raises(BertPipelineError, match=r"bert-nope v1: .*no model of that name; registered: bert-sst-2\)$"):
        registry.reject("bert-nope", "1", "x")
    # A rejection by hand holds against a later promotion that passes the gates; an override lifts it.
    registry.reject("bert-sst-2", new, "answers badly in production")
    registry.promote("bert-sst-2", worse, override="x")
    report = registry.promote("bert-sst-2", new, check_serving=False)
    assert not report["promoted"] and report["reasons"] == [
        "it was rejected by hand: answers badly in production; only a promotion with an override serves it"]
    assert registry.promote("bert-sst-2", new, check_serving=False, override="fixed upstream")["promoted"]


def test_chance_levels_score_a_constant_answer():
    from bert_core.metrics.scoring import chance_metrics

    mrpc = chance_metrics("mrpc", FIXTURES / "glue" / "MRPC" / "dev.tsv")
    assert set(mrpc) == {"accuracy", "f1"} and 0 < mrpc["accuracy"] < 1
    assert chance_metrics("sts-b", FIXTURES / "glue" / "STS-B" / "dev.tsv") == {"pearson": 0.0, "spearman": 0.0}
    # SQuAD: no answer to any question, scored as the official scripts score it (on v2.0, the file of
    # never-answering predictions and its official output).
    squad = FIXTURES / "squad"
    assert chance_metrics("squad", squad / "data-v1.1.json") == {"exact_match": 0.0, "f1": 0.0}
    official = json.loads((squad / "expected" / "v2.0-never_answer.json").read_text())
    v2 = chance_metrics("squad", squad / "data-v2.0.json")
    assert v2 == {k: v for k, v in official.items() if not k.endswith("total")} and 0 < v2["f1"] < 100
    # NER: no entity at all: no F1, but every "O" tag right.
    ner = chance_metrics("ner", FIXTURES / "conll" / "dev.txt")
    assert ner["f1"] == ner["precision"] == ner["recall"] == 0.0 and 0.5 < ner["accuracy"] < 1


def test_squad_2_candidates_are_gated_on_its_scorer_s_names():
    """SQuAD 2.0's official scorer calls exact match "exact" (v1.1: "exact_match"); bert-squad2 is gated on it, and
    so is a 2.0 version that a registry older than bert-squad2 holds under bert-squad, so a 2.0 model is judged,
    not refused for a metric it cannot have. An all-unanswerable model scores the share of unanswerable questions
    and is not promoted."""
    v1 = {"exact_match": 40.0, "f1": 50.0}
    v2 = {"exact": 55.0, "f1": 60.0, "HasAns_f1": 40.0, "NoAns_f1": 80.0}
    assert registry.default_gates("bert-squad2") == registry.default_gates("bert-squad2", v2) == ("f1", "exact")
    assert registry._chance_answer("bert-squad2") == registry._chance_answer("bert-squad")
    assert registry.default_gates("bert-squad", v1) == ("f1", "exact_match")
    assert registry.default_gates("bert-squad", v2) == ("f1", "exact")
    chance = {"exact": 50.0, "f1": 50.0}
    assert registry.decide(v2, None, registry.default_gates("bert-squad", v2), {"f1": 0.0}, chance) == (True, [])
    never = {"exact": 50.0, "f1": 50.0, "HasAns_f1": 0.0, "NoAns_f1": 100.0}
    promoted, reasons = registry.decide(never, None, registry.default_gates("bert-squad", never), {}, chance,
                                        **registry._chance_answer("bert-squad"))
    assert not promoted and reasons[0] == ("f1: 50 is no better than chance 50 (a model that ignores its input: no "
                                           "answer to any question)")
    assert registry._chance_answer("bert-sts-b") == {"chance_answer": "a constant score"}
    assert registry._chance_answer("bert-pretrained") == {}


def test_pretrained_gate_refuses_chance_level_and_training_data_scores(store, tmp_path, caplog):
    """bert-pretrained: held-out masked-LM accuracy must be clearly above chance (the majority baseline of the
    same data) and no worse than the champion's; a chance-level model is registered but never promoted."""
    from operators.tasks import register_and_promote

    heldout = {"metrics_on": "held-out"}
    # The failure seen in the field: 0.08 masked-LM accuracy where always predicting "the" scores 0.063.
    stuck = store({"mlm_accuracy": 0.08, "mlm_accuracy_chance": 0.063, "mlm_accuracy_over_chance": 0.017},
                  name="bert-pretrained", tags=heldout)
    report = registry.promote("bert-pretrained", stuck)
    assert not report["promoted"]
    assert report["reasons"] == ["mlm_accuracy_over_chance: 0.017 is below the floor 0.05"]
    assert _aliases("bert-pretrained") == {}
    client = registry._client(None)
    assert client.get_model_version("bert-pretrained", stuck).tags["promotion.decision"] == "rejected"

    # Scored on its own training data: not evidence, whatever the number.
    memorised = store({"mlm_accuracy": 0.9, "mlm_accuracy_over_chance": 0.84}, name="bert-pretrained",
                      tags={"metrics_on": "training data"})
    report = registry.promote("bert-pretrained", memorised)
    assert not report["promoted"] and "not on held-out data" in report["reasons"][-1]

    good = store({"mlm_accuracy": 0.31, "mlm_accuracy_over_chance": 0.25}, name="bert-pretrained", tags=heldout)
    assert registry.promote("bert-pretrained", good)["promoted"]
    worse = store({"mlm_accuracy": 0.29, "mlm_accuracy_over_chance": 0.23}, name="bert-pretrained", tags=heldout)
    report = registry.promote("bert-pretrained", worse)
    assert not report["promoted"] and "worse than the champion's 0.31" in report["reasons"][0]
    assert _aliases("bert-pretrained") == {"champion": good}

    # The DAG's task: registers the chance-level run, does not promote it, and says why.
    tracker_run = registry._client(None).get_model_version("bert-pretrained", stuck).run_id
    result = register_and_promote({"output": "x", "mlflow_run_id": tracker_run, "metrics_on": "held-out",
                                   "metrics": {"mlm_accuracy": 0.08, "mlm_accuracy_over_chance": 0.017}},
                                  str(tmp_path / "reports"))
    assert result["promoted"] is False and any("below the floor" in r for r in result["reasons"])
    # The task log says how to decide on it by hand.
    assert (f"bert-pretrained version {result['candidate']} was registered but not promoted: " in caplog.text
            and f"(to decide by hand: bert-pipeline promote bert-pretrained {result['candidate']} --override 'WHY' or "
                "--reject 'WHY')" in caplog.text)
    assert _aliases("bert-pretrained") == {"champion": good}


# Messages a clean registration used to print (issue 27), each caused by how the model was logged, registered or
# loaded, not by anything wrong: each must stay gone. Searched in everything a registration says (stdout/stderr,
# every logger including MLflow's own, which does not propagate, and Python warnings).
FALSE_ALARMS = {
    "registered model exists": "already exists. Creating a new version",  # mlflow.register_model's own create
    "registered from a run path": "has no artifacts at artifact path",  # runs:/ URI of an MLflow 3 logged model
    "predict type hints": "Add type hints to the `predict` method",
    "cloudpickle": "CloudPickle",  # a python_model object instead of models-from-code
    "pretraining heads unused": "not used by this model",  # an encoder loading a pretrained checkpoint
}


@pytest.fixture(scope="module")
def registration_output(tmp_path_factory):
    """Everything said while a pretrained model (its checkpoint carries the MLM/NSP heads) is logged, registered
    and promoted (serving check included) on a store created seconds earlier; twice, so the second registration
    meets an existing registered model."""
    import logging
    import sys
    import warnings

    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.io.tracking import MlflowTracker

    tmp = tmp_path_factory.mktemp("fresh-store")
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            said.append(f"{record.levelname} {record.name}: {record.getMessage()}")

    keep, loggers = Keep(level=logging.DEBUG), [logging.getLogger(), logging.getLogger("mlflow")]
    levels = [lg.level for lg in loggers]
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.setenv("BERT_PIPELINE_HOME", str(tmp / "home"))
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        for lg in loggers:
            lg.addHandler(keep)
            lg.setLevel(logging.INFO)
        out, err = __import__("io").StringIO(), __import__("io").StringIO()
        mp.setattr(sys, "stdout", out)
        mp.setattr(sys, "stderr", err)
        try:
            model_dir = write_tiny_bert(tmp / "model")
            for _ in range(2):
                tracker = MlflowTracker("bert-pretrain", pyfunc=pyfunc_spec)
                tracker.log_model_dir(model_dir)
                tracker.end()
                version = registry.register(tracker.run_id, "bert-pretrained", {"mlm_accuracy": 0.3,
                                            "mlm_accuracy_over_chance": 0.2}, tags={"metrics_on": "held-out"})
                report = registry.promote("bert-pretrained", version["version"])
        finally:
            for lg, level in zip(loggers, levels):
                lg.removeHandler(keep)
                lg.setLevel(level)
    assert report["promoted"] and report["serving_check"]["examples"] == 1 and version["version"] == "2"
    assert version["source"].startswith("models:/m-")  # registered from the logged model's own URI
    return "\n".join([out.getvalue(), err.getvalue(), *said, *(str(w.message) for w in caught)])


@pytest.mark.parametrize("message", FALSE_ALARMS.values(), ids=FALSE_ALARMS.keys())
def test_a_clean_registration_raises_no_false_alarm(registration_output, message):
    assert "registered bert-pretrained version 2" in registration_output  # the capture did capture
    assert message not in registration_output
