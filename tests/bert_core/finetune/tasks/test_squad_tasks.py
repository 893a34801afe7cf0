"""SQuAD windowing and post-processing; the span round trip through character offsets."""

import json

import pytest

from bert_core.finetune.config import SquadOptions
from bert_core.finetune.tasks.squad import char_span, make_features, postprocess
from bert_core.metrics.squad import evaluate_squad_v1, evaluate_squad_v2
from bert_core.model.tokenization import BertTokenizer
from bert_core.tasks.squad import SquadExample, read_squad
from tests.paths import FIXTURES

FIXTURES = FIXTURES
SQUAD = FIXTURES / "squad"


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizer(FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt", do_lower_case=True)


def _squad_file(tmp_path, context, answers, question="Where?", impossible=None):
    qa = {"id": "q1", "question": question, "answers": answers}
    if impossible is not None:
        qa["is_impossible"] = impossible
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": [qa]}]}]}), encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["data-v1.1.json", "data-v2.0.json"])
def test_gold_span_round_trips_through_tokens(tokenizer, name):
    """gold char span -> token span (in every window that holds it) -> char span == gold text."""
    _, examples = read_squad(SQUAD / name)
    # Small windows force several per context, so the round trip is checked across window borders.
    features = make_features(examples, tokenizer, max_seq_length=48, doc_stride=16, max_query_length=16,
                             training=True)
    checked = set()
    for f in features:
        example = examples[f.example_index]
        if f.start_position:
            assert char_span(example, f, f.start_position, f.end_position) == example.answers[0][0]
            checked.add(example.qas_id)
    assert checked == {e.qas_id for e in examples if e.answers}


def test_round_trip_with_unicode_and_odd_whitespace(tokenizer, tmp_path):
    context = "Le  café\tde Zoë ouvre\u00a0à 7h30 — 東京の店 🙂 was built in\n1998 by Ana-María Núñez."
    answers = ["café\tde Zoë", "東京", "Ana-María Núñez", "1998", "7h30"]
    path = _squad_file(tmp_path, context, [{"text": a, "answer_start": context.index(a)} for a in answers])
    _, (example,) = read_squad(path)
    for text in answers:
        single = SquadExample("q", "which?", context, ((text, context.index(text)),))
        (feature,) = make_features([single], tokenizer, max_seq_length=128, training=True)
        assert char_span(single, feature, feature.start_position, feature.end_position) == text


def test_windows_cover_every_token_once_as_max_context(tokenizer):
    context = " ".join(f"word{i}" for i in range(120))
    example = SquadExample("q", "what is it?", context, (("word77", context.index("word77")),))
    features = make_features([example], tokenizer, max_seq_length=40, doc_stride=12, training=True)
    assert len(features) > 3
    owners = {}
    for fi, f in enumerate(features):
        assert len(f.input_ids) <= 40 and f.input_ids[0] == tokenizer.cls_token_id
        assert f.input_ids[-1] == tokenizer.sep_token_id and len(f.segment_ids) == len(f.input_ids)
        for offset, is_max in zip(f.token_offsets, f.token_is_max_context):
            if offset is not None and is_max:
                assert offset not in owners
                owners[offset] = fi
    n_tokens = len(tokenizer.encode(context, add_special_tokens=False).ids)
    assert len(owners) == n_tokens
    # Windows that do not hold the whole answer point at [CLS].
    labelled = [f for f in features if f.start_position]
    assert labelled and any(f.start_position == 0 for f in features)


def _logits_for(features, examples, targets, tokenizer):
    """Logits that put the most mass on the given answer text (or on [CLS] for None)."""
    starts, ends = [], []
    for f in features:
        s, e = [0.0] * len(f.input_ids), [0.0] * len(f.input_ids)
        target = targets[examples[f.example_index].qas_id]
        if target is None:
            s[0] = e[0] = 8.0
        else:
            lo = examples[f.example_index].context.index(target)
            hi = lo + len(target)
            toks = [i for i, o in enumerate(f.token_offsets) if o is not None and o[1] > lo and o[0] < hi]
            if toks:
                s[toks[0]], e[toks[-1]] = 5.0, 5.0
        starts.append(s)
        ends.append(e)
    return starts, ends


def test_postprocess_v1_predicts_the_span_and_scores_100(tokenizer):
    _, examples = read_squad(SQUAD / "data-v1.1.json")
    features = make_features(examples, tokenizer, max_seq_length=64, doc_stride=24)
    targets = {e.qas_id: e.answers[0][0] for e in examples}
    starts, ends = _logits_for(features, examples, targets, tokenizer)
    out = postprocess(examples, features, starts, ends, SquadOptions(n_best_size=5))
    assert out.predictions == targets
    for nbest in out.nbest.values():
        assert abs(sum(n["probability"] for n in nbest) - 1) < 1e-9 and len(nbest) <= 5
    dataset = json.loads((SQUAD / "data-v1.1.json").read_text())["data"]
    assert evaluate_squad_v1(dataset, out.predictions) == {"exact_match": 100.0, "f1": 100.0}


def test_postprocess_v2_null_decision_and_threshold(tokenizer):
    _, examples = read_squad(SQUAD / "data-v2.0.json")
    features = make_features(examples, tokenizer, max_seq_length=64, doc_stride=24)
    targets = {e.qas_id: (e.answers[0][0] if e.answers else None) for e in examples}
    starts, ends = _logits_for(features, examples, targets, tokenizer)
    out = postprocess(examples, features, starts, ends, SquadOptions(version_2=True))
    assert out.predictions == {q: (t or "") for q, t in targets.items()}
    assert set(out.null_odds) == set(targets)
    assert all((out.null_odds[q] > 0) == (t is None) for q, t in targets.items())
    dataset = json.loads((SQUAD / "data-v2.0.json").read_text())["data"]
    result = evaluate_squad_v2(dataset, out.predictions, na_probs=out.null_odds)
    assert result["exact"] == 100.0 and result["best_exact"] == 100.0
    # A threshold above every null margin answers every question.
    always = postprocess(examples, features, starts, ends,
                         SquadOptions(version_2=True, null_score_diff_threshold=1e9))
    assert all(always.predictions.values())


def test_postprocess_respects_max_answer_length_and_context_only(tokenizer):
    context = "alpha beta gamma delta epsilon zeta"
    example = SquadExample("q", "which?", context, ())
    (feature,) = make_features([example], tokenizer, max_seq_length=32)
    n = len(feature.input_ids)
    starts, ends = [0.0] * n, [0.0] * n
    first_ctx = feature.token_offsets.index((0, 5))
    starts[1] = ends[1] = 50.0  # a question token: never an answer
    starts[first_ctx], ends[first_ctx + 5] = 9.0, 9.0  # 6 tokens long
    ends[first_ctx + 1] = 4.0
    out = postprocess([example], [feature], [starts], [ends], SquadOptions(max_answer_length=3))
    assert out.predictions["q"] == "alpha beta"
    out = postprocess([example], [feature], [starts], [ends], SquadOptions(max_answer_length=30))
    assert out.predictions["q"] == context


def test_padding_past_a_feature_never_takes_an_n_best_place(tokenizer):
    """Logits past a feature's own length are padding, as many as the caller's batch had: the answer and the
    n-best list are the same with or without them, even when they are the largest logits."""
    context = "alpha beta gamma delta epsilon zeta"
    example = SquadExample("q", "which?", context, ())
    (feature,) = make_features([example], tokenizer, max_seq_length=32)
    n = len(feature.input_ids)
    starts, ends = [0.0] * n, [0.0] * n
    first_ctx = feature.token_offsets.index((0, 5))
    starts[first_ctx], ends[first_ctx + 1] = 9.0, 9.0
    options = SquadOptions(n_best_size=1)
    plain = postprocess([example], [feature], [starts], [ends], options)
    padded = postprocess([example], [feature], [starts + [99.0] * 8], [ends + [99.0] * 8], options)
    assert plain.predictions == padded.predictions == {"q": "alpha beta"}
    assert plain.nbest == padded.nbest


@pytest.mark.parametrize("version_2", [False, True])
def test_unversioned_squad_files_are_found_and_a_missing_version_says_which_flag(tokenizer, tmp_path, version_2):
    """train.json/dev.json serve either version (dev.json was never found: its name has a "v"); with only the
    other version's files, the error says which flag picks them instead of only what was looked for."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune.config import FinetuneConfig
    from bert_core.finetune.tasks.adapters import SquadAdapter
    from bert_core.tasks import catalog

    def adapter(data_dir):
        cfg = FinetuneConfig(task="squad", data_dir=str(data_dir), model="m", output="", version_2=version_2)
        return SquadAdapter(catalog.get("squad"), data_dir, tokenizer, cfg)

    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("train.json", "dev.json"):
        (plain / name).write_text("{}", encoding="utf-8")
    assert adapter(plain).train_file() == plain / "train.json"
    assert [path for _, path in adapter(plain).eval_files()] == [plain / "dev.json"]

    other = tmp_path / "other"
    other.mkdir()
    tag = "v1.1" if version_2 else "v2.0"
    for name in (f"train-{tag}.json", f"dev-{tag}.json"):
        (other / name).write_text("{}", encoding="utf-8")
    flag = "without --version-2" if version_2 else "with --version-2"
    with pytest.raises(BertPipelineError, match=f"found train-{tag}.json: run {flag}"):
        adapter(other).train_file()
    with pytest.raises(BertPipelineError, match=f"found dev-{tag}.json: run {flag}"):
        adapter(other).eval_files()


def test_a_dev_file_of_the_other_version_is_refused_before_training(tokenizer, tmp_path):
    """1.1's scorer takes no no-answer odds: a --version-2 run on a 1.1 dev file trained its first epoch, then failed
    at the first score, naming evaluate's --version flag, which finetune has not."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune.config import FinetuneConfig
    from bert_core.finetune.tasks.adapters import SquadAdapter
    from bert_core.tasks import catalog

    article = {"title": "t", "paragraphs": [{"context": "Hana lives in Quito.", "qas": [
        {"id": "q1", "question": "Where does Hana live?", "answers": [{"text": "Quito", "answer_start": 14}]}]}]}
    for name in ("train.json", "dev.json"):
        (tmp_path / name).write_text(json.dumps({"version": "1.1", "data": [article]}), encoding="utf-8")

    def adapter(version_2):
        cfg = FinetuneConfig(task="squad", data_dir=str(tmp_path), model="m", output="", version_2=version_2)
        return SquadAdapter(catalog.get("squad"), tmp_path, tokenizer, cfg)

    adapter(False).check_files()
    with pytest.raises(BertPipelineError, match=r"dev.json: a SQuAD 1.1 dev file, but --version-2 .* is set"):
        adapter(True).check_files()
    # And the other way: a 2.0 dev file without --version-2 would never be answered "" (a run with a warning).
    (tmp_path / "dev.json").write_text(json.dumps({"version": "v2.0", "data": [article]}), encoding="utf-8")
    adapter(True).check_files()
    with pytest.raises(BertPipelineError, match=r"dev.json: a SQuAD 2.0 dev file, but --version-2 .* is not set"):
        adapter(False).check_files()
