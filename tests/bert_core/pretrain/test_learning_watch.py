"""The learning watch: a run stuck at chance or on a flat loss is flagged; a run that learns is not."""

from __future__ import annotations

from bert_core.pretrain.learning_watch import Baseline, LearningWatch

BASE = Baseline(mlm=0.06, nsp=0.5)


def feed(watch: LearningWatch, losses: dict[int, float], mlm: float, until: int) -> list[str]:
    problems = []
    for step in range(1, until + 1):
        if step in losses:
            watch.observe_train(step, {"loss": losses[step], "mlm_accuracy": mlm})
        if watch.due(step):
            problems += watch.check(step)
    return problems


def test_flat_loss_at_chance_is_flagged_at_the_check_point():
    watch = LearningWatch(400, BASE)
    flat = {s: 6.0 for s in range(10, 401, 10)}
    problems = feed(watch, flat, mlm=0.07, until=100)
    assert watch.points == [100, 200]
    assert len(problems) == 2
    assert "stopped improving" in problems[0] and "step 100" in problems[0]
    assert "at chance" in problems[1] and "0.060" in problems[1]
    verdict = watch.finish(400, {"mlm_accuracy": 0.08, "nsp_accuracy": 0.58})
    assert verdict.status == "not_learning"
    assert verdict.checked_at == [100, 400]


def test_a_learning_run_passes():
    watch = LearningWatch(400, BASE)
    falling = {s: 10.0 - s / 50 for s in range(10, 401, 10)}
    assert feed(watch, falling, mlm=0.25, until=400) == []
    verdict = watch.finish(400, {"mlm_accuracy": 0.3, "nsp_accuracy": 0.8})
    assert verdict.status == "learning" and verdict.problems == []
    assert verdict.checked_at == [100, 200, 400]


def test_held_out_accuracy_wins_over_training_accuracy():
    watch = LearningWatch(100, BASE)
    watch.observe_train(25, {"loss": 5.0, "mlm_accuracy": 0.5})
    watch.observe_eval(25, {"mlm_accuracy": 0.061})
    problems = watch.check(25)
    assert any("held-out" in p and "at chance" in p for p in problems)


def test_early_warning_outgrown_and_nsp_at_chance_are_warnings_not_failures():
    watch = LearningWatch(100, BASE)
    watch.observe_train(25, {"loss": 7.0, "mlm_accuracy": 0.06})
    assert watch.check(25)
    verdict = watch.finish(100, {"mlm_accuracy": 0.3, "nsp_accuracy": 0.5})
    assert verdict.status == "warned"
    assert any("next-sentence" in p for p in verdict.problems)


def test_each_problem_reported_once_and_resume_skips_passed_points():
    watch = LearningWatch(400, BASE)
    flat = {s: 6.0 for s in range(10, 401, 10)}
    assert len(feed(watch, flat, mlm=0.06, until=200)) == 2  # the second check point repeats nothing
    resumed = LearningWatch(400, BASE)
    resumed.skip_until(150)
    assert resumed.due(150) is False and resumed.due(200) is True


def test_a_run_shorter_than_the_first_check_point():
    watch = LearningWatch(400, BASE)
    assert watch.finish(50, {"mlm_accuracy": 0.3, "nsp_accuracy": 0.9}).status == "too_short"


def test_final_check_names_what_it_was_measured_on():
    watch = LearningWatch(100, BASE)
    verdict = watch.finish(100, {"mlm_accuracy": 0.05, "nsp_accuracy": 0.9}, heldout=False)
    assert verdict.status == "not_learning" and "(training, step 100)" in verdict.problems[0]
