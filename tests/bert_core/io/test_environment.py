"""Settings made for the project's processes through a library's environment variable: set inside the block
unless the user set it (theirs wins), removed after; and the one such value computed from a flag, Ray Train's
worker-group start attempt, which --placement-timeout is checked after."""

import os

import pytest

from bert_core.io.environment import env_default


def test_env_default_sets_only_what_the_user_left_unset(monkeypatch):
    monkeypatch.delenv("BERT_TEST_SETTING", raising=False)
    with env_default("BERT_TEST_SETTING", "0"):
        assert os.environ["BERT_TEST_SETTING"] == "0"
    assert "BERT_TEST_SETTING" not in os.environ
    monkeypatch.setenv("BERT_TEST_SETTING", "1")
    with env_default("BERT_TEST_SETTING", "0"):
        assert os.environ["BERT_TEST_SETTING"] == "1"
    assert os.environ["BERT_TEST_SETTING"] == "1"
    monkeypatch.delenv("BERT_TEST_SETTING")
    with pytest.raises(RuntimeError), env_default("BERT_TEST_SETTING", "0"):
        raise RuntimeError
    assert "BERT_TEST_SETTING" not in os.environ


@pytest.mark.parametrize("timeout, attempt", [(90, 45), (300, 60), (600, 60), (60, 60), (61, 30.5), (8, 30)])
def test_start_attempts_divide_the_placement_timeout(timeout, attempt):
    """With Ray Train's own 60 s attempts a --placement-timeout 90 failed at 120 s (the walk of 2026-11-29)."""
    from bert_core.launch.ray_train import start_attempt_s

    assert start_attempt_s(timeout) == attempt
