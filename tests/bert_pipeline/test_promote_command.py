"""`bert-pipeline promote`: what one on call does after a night's run, on a real MLflow store with real models."""

from __future__ import annotations

import json

from bert_pipeline.cli import main
from operators import registry


def test_promote_reject_and_roll_back_from_the_command_line(registry_store, tmp_path, capsys):
    first = registry_store({"accuracy": 0.8})  # registered without --promote
    assert main(["promote", "bert-sst-2", first]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:3] == [f"bert-sst-2 v{first}: promoted to champion (the first champion)",
                                    "  first model: no champion yet", "  accuracy: 0.8"]

    worse = registry_store({"accuracy": 0.7})
    assert main(["promote", "bert-sst-2", worse, "--report", str(tmp_path / "decision.json")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [f"bert-sst-2 v{worse}: not promoted; the champion stays v{first}",
                   "  accuracy: 0.7 is worse than the champion's 0.8", f"  accuracy: 0.7 (champion v{first}: 0.8)",
                   f"To promote it over the gates: bert-pipeline promote bert-sst-2 {worse} --override 'WHY'; to "
                   "clear it from the nightly: --reject 'WHY'"]
    assert json.loads((tmp_path / "decision.json").read_text())["champion_after"] == first

    assert main(["promote", "bert-sst-2", worse, "--reject", "worse than v1 on SST-2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reasons"] == ["rejected by hand: worse than v1 on SST-2"]
    assert main(["promote", "bert-sst-2", worse, "--reject", "still worse", "--report",
                 str(tmp_path / "rejected.json")]) == 0
    assert json.loads((tmp_path / "rejected.json").read_text())["reasons"] == ["rejected by hand: still worse"]
    assert capsys.readouterr().out.splitlines() == [f"bert-sst-2 v{worse}: rejected; the champion stays v{first}",
                                                    "  rejected by hand: still worse", "  accuracy: 0.7"]
    assert registry.version_tags("bert-sst-2", worse)["promotion.decision"] == "rejected"

    better = registry_store({"accuracy": 0.9})
    assert main(["promote", "bert-sst-2", better]) == 0
    # Roll back: the previous champion, over the gates, with the reason on record.
    assert main(["promote", "bert-sst-2", first, "--override", "v3 fails on live traffic"]) == 0
    assert capsys.readouterr().out.splitlines()[-3:] == [
        f"bert-sst-2 v{first}: promoted to champion (v{better} is now previous)",
        "  promoted by hand (v3 fails on live traffic) over the gates: accuracy: 0.8 is worse than the champion's 0.9",
        f"  accuracy: 0.8 (champion v{better}: 0.9)"]
    assert registry.latest_versions("bert-sst-2")["champion"] == first
    assert main(["promote", "bert-sst-2", first]) == 0
    assert capsys.readouterr().out.splitlines() == [f"bert-sst-2 v{first}: already the champion", "  accuracy: 0.8"]
    # An override the gates did not need is recorded all the same.
    assert main(["promote", "bert-sst-2", better, "--override", "v3 fixed"]) == 0
    assert capsys.readouterr().out.splitlines()[1:3] == ["  every gate metric is no worse than the champion's",
                                                         "  promoted by hand: v3 fixed"]

    assert main(["promote", "bert-sst-2", better, "--reject", "x"]) == 2
    assert "bert-pipeline promote: error: bert-sst-2 v3 is the champion" in capsys.readouterr().err
    assert main(["promote", "bert-sst-2", "7"]) == 2
    assert "(its versions: 1, 2, 3)" in capsys.readouterr().err
    assert main(["promote", "bert-sst-2", better, "--override", " "]) == 2
    assert "--override needs a reason (WHY)" in capsys.readouterr().err
