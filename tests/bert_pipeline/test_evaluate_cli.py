"""`bert-pipeline evaluate`: stdout equal to the official scripts' for SQuAD, JSON metrics for GLUE/XNLI,
one-line errors with exit code 2."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bert_pipeline.cli import main
from bert_pipeline.commands import evaluate as evaluate_cli

TESTS = Path(__file__).resolve().parents[1]
SQUAD = TESTS / "fixtures" / "squad"
GLUE = TESTS / "fixtures" / "glue"
REPO = TESTS.parent

# golden output name -> file; the name says how the official script was run (fixtures/squad/README.md)
SQUAD_CASES = {expected.stem: expected for expected in sorted((SQUAD / "expected").glob("*.json"))}


def squad_argv(stem: str) -> list[str]:
    """CLI arguments for a golden output name such as v2.0-mixed-with-na-prob-thresh-0.5."""
    version, rest = stem[1:4], stem[5:]
    case, with_na_prob, thresh = rest.partition("-with-na-prob")
    argv = [str(SQUAD / f"data-v{version}.json"), str(SQUAD / f"pred-v{version}-{case}.json")]
    if with_na_prob:
        argv += ["--na-prob-file", str(SQUAD / f"na-prob-v{version}-{case}.json")]
    if thresh:
        argv += ["--na-prob-thresh", thresh.removeprefix("-thresh-")]
    return argv


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["evaluate", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("stem", sorted(SQUAD_CASES))
def test_squad_stdout_equals_official(stem: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["squad", *squad_argv(stem)], capsys)
    assert code == 0
    assert out.rstrip("\n") == SQUAD_CASES[stem].read_text(encoding="utf-8").rstrip("\n")
    stderr_file = SQUAD_CASES[stem].with_suffix(".stderr")
    expected_err = stderr_file.read_text(encoding="utf-8") if stderr_file.exists() else ""
    assert err.rstrip("\n") == expected_err.rstrip("\n")


def test_squad_output_file_is_written_atomically(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "metrics" / "squad.json"
    code, out, _ = run_cli(
        ["squad", *squad_argv("v2.0-mixed-with-na-prob"), "--output", str(out_file)], capsys
    )
    assert code == 0
    assert out_file.read_text(encoding="utf-8") == out
    assert sorted(p.name for p in out_file.parent.iterdir()) == ["squad.json"]  # no temporary file left


def test_squad_forced_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        ["squad", str(SQUAD / "data-v1.1.json"), str(SQUAD / "pred-v1.1-exact.json"), "--version", "2.0"],
        capsys,
    )
    assert code == 0
    assert json.loads(out) == {
        "exact": 100.0,
        "f1": 100.0,
        "total": 11,
        "HasAns_exact": 100.0,
        "HasAns_f1": 100.0,
        "HasAns_total": 11,
    }


def test_squad_unknown_ids_are_ignored_as_officially_unless_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A leaderboard file holding ids of the older v1.0 dev set: the official script scores it, so do we
    (stdout identical to the official output), saying on stderr how many ids were ignored."""
    preds = json.loads((SQUAD / "pred-v1.1-exact.json").read_text(encoding="utf-8"))
    pred_file = tmp_path / "pred.json"
    pred_file.write_text(json.dumps({**preds, "x1": "a", "x2": "b"}), encoding="utf-8")
    argv = ["squad", str(SQUAD / "data-v1.1.json"), str(pred_file)]
    expected = (SQUAD / "expected" / "v1.1-exact.json").read_text(encoding="utf-8")
    for extra in ([], ["--allow-unknown-ids"]):
        code, out, err = run_cli([*argv, *extra], capsys)
        assert code == 0 and out == expected
        assert "2 prediction id(s) are not in the dataset and are ignored" in err and "'x1', 'x2'" in err
    code, out, err = run_cli([*argv, "--strict"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("bert-pipeline evaluate: error: prediction file ")
    assert "2 prediction id(s) are not in the dataset: 'x1', 'x2'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["squad", str(SQUAD / "na-prob-v2.0-exact.json"), str(SQUAD / "pred-v2.0-exact.json")],
            "SQuAD data file .*na-prob-v2.0-exact.json: expected a JSON object with a 'data' list",
        ),
        (
            ["squad", str(SQUAD / "data-v2.0.json"), str(SQUAD / "data-v2.0.json")],
            "prediction file .*data-v2.0.json: the prediction for id 'data' is a list, expected a string",
        ),
        (["squad", str(SQUAD / "data-v1.1.json"), str(SQUAD / "missing.json")], "prediction file not found"),
        (
            ["glue", "squad", str(GLUE / "MRPC" / "dev.tsv"), str(GLUE / "MRPC" / "predictions.tsv")],
            "unknown GLUE task 'squad'; valid tasks:",
        ),
        (
            ["glue", "sst-2", str(GLUE / "SST-2" / "dev.tsv"), str(GLUE / "MRPC" / "predictions.tsv")],
            "prediction file .* has 6 rows but gold file .* has 5 examples",
        ),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("bert-pipeline evaluate: error: ")
    assert re.search(message, err), err


def test_glue_prints_metrics_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "mrpc.json"
    code, out, err = run_cli(
        [
            "glue",
            "MRPC",
            str(GLUE / "MRPC" / "dev.tsv"),
            str(GLUE / "MRPC" / "predictions.tsv"),
            "--output",
            str(out_file),
        ],
        capsys,
    )
    assert code == 0 and err == ""
    assert out == json.dumps({"accuracy": 4 / 6, "f1": 2 / 3}, indent=2) + "\n"
    assert out_file.read_text(encoding="utf-8") == out


def test_glue_mnli_matched_and_mismatched_are_separate_calls(capsys: pytest.CaptureFixture[str]) -> None:
    _, matched, _ = run_cli(
        [
            "glue",
            "mnli-m",
            str(GLUE / "MNLI" / "dev_matched.tsv"),
            str(GLUE / "MNLI" / "predictions_matched.tsv"),
        ],
        capsys,
    )
    _, mismatched, _ = run_cli(
        [
            "glue",
            "MNLI-MM",
            str(GLUE / "MNLI" / "dev_mismatched.tsv"),
            str(GLUE / "MNLI" / "predictions_mismatched.tsv"),
        ],
        capsys,
    )
    assert json.loads(matched) == {"accuracy": 0.75}
    assert json.loads(mismatched) == {"accuracy": 2 / 3}


def test_xnli_both_layouts_and_language(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        ["xnli", str(GLUE / "XNLI" / "dev_ernie.tsv"), str(GLUE / "XNLI" / "predictions_ernie.tsv")], capsys
    )
    assert code == 0 and json.loads(out) == {"accuracy": 0.75}
    code, out, _ = run_cli(
        ["xnli", str(GLUE / "XNLI" / "xnli.dev.tsv"), str(GLUE / "XNLI" / "predictions_zh.tsv")], capsys
    )
    assert code == 0 and json.loads(out) == {"accuracy": 2 / 3}
    code, out, _ = run_cli(
        [
            "xnli",
            str(GLUE / "XNLI" / "xnli.dev.tsv"),
            str(GLUE / "XNLI" / "predictions_en.tsv"),
            "--language",
            "en",
        ],
        capsys,
    )
    assert code == 0 and json.loads(out) == {"accuracy": 1.0}


def _all_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _all_actions(sub)


def test_every_flag_has_help() -> None:
    parser = argparse.ArgumentParser(prog="bert-pipeline evaluate")
    evaluate_cli.add_arguments(parser)
    for action in _all_actions(parser):
        if not isinstance(action, argparse._SubParsersAction):
            assert action.help, action.option_strings or action.dest


@pytest.mark.parametrize("sub", ["squad", "glue", "xnli"])
def test_help(sub: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["evaluate", sub, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "--output" in out
    if sub == "squad":
        assert "--strict" in out and "--allow-unknown-ids" in out and "--na-prob-thresh" in out


def test_installed_console_script_prints_official_output() -> None:
    script = Path(sys.executable).parent / "bert-pipeline"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "bert_pipeline.cli"]
    stem = "v2.0-exact-with-na-prob-thresh-0.5"
    result = subprocess.run(
        [*command, "evaluate", "squad", *squad_argv(stem)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == SQUAD_CASES[stem].read_text(encoding="utf-8")
