"""The default pretraining recipe: given settings win, the rule fills the rest, within its bounds."""

from __future__ import annotations

import pytest

from bert_core.pretrain import recipe


def test_rule_scales_with_width_and_batch():
    tiny = recipe.default_lr(128, recipe.BASE_BATCH)
    assert tiny == pytest.approx(recipe.BASE_LR)
    assert recipe.default_lr(256, recipe.BASE_BATCH) == pytest.approx(tiny / 2)
    assert recipe.default_lr(128, 4 * recipe.BASE_BATCH) == pytest.approx(min(recipe.MAX_LR, 2 * tiny))
    assert recipe.default_lr(8192, 1) == recipe.MIN_LR
    assert recipe.default_lr(16, 1 << 20) == recipe.MAX_LR
    # BERT-base at batch 256: 6.7e-4, between Google's 1e-4 (uncorrected Adam, 10k warmup) and RoBERTa's 6e-4 at 8k.
    assert recipe.default_lr(768, 256) == pytest.approx(2e-3 / 6 * 2)


def test_warmup_is_a_tenth_capped_at_ten_thousand_steps():
    assert recipe.default_warmup_ratio(400) == pytest.approx(0.1)
    assert recipe.default_warmup_ratio(1_000_000) == pytest.approx(0.01)


def test_given_settings_win_and_the_choice_is_recorded():
    chosen = recipe.resolve(None, None, None, hidden_size=256, global_batch=64, total_steps=1000)
    assert (chosen.optimizer, chosen.warmup_ratio) == ("adamw", 0.1)
    assert chosen.chosen == ("optimizer", "lr", "warmup")
    given = recipe.resolve("lamb", 2e-3, 0.05, hidden_size=256, global_batch=64, total_steps=1000)
    assert (given.optimizer, given.lr, given.warmup_ratio, given.chosen) == ("lamb", 2e-3, 0.05, ())
    assert "by the default rule" not in given.describe() and "rule:" not in given.describe()
    # The log line at a run's start gives the rule's lr as a number, with the width and batch it came from.
    ruled = recipe.resolve(None, None, None, hidden_size=128, global_batch=32, total_steps=1000).describe()
    assert "lr 1.41e-03 (rule: " in ruled and "for hidden 128, global batch 32)" in ruled
    assert given.as_dict()["chosen_by_rule"] == []


def test_bertadam_at_a_small_model_lr_with_short_warmup_is_cautioned():
    risky = recipe.resolve("bertadam", 1e-3, 0.05, hidden_size=128, global_batch=64, total_steps=400)
    (caution,) = recipe.cautions(risky, 400)
    assert "20 warmup steps" in caution and "--optimizer adamw" in caution
    assert recipe.cautions(recipe.resolve("bertadam", 1e-4, 0.01, 768, 256, 1_000_000), 1_000_000) == []
    assert recipe.cautions(recipe.resolve(None, 1e-3, None, 128, 64, 400), 400) == []
