"""Scoring predictions needs no torch: `score_predictions` (what `bert-pipeline evaluate`, fine-tuning, export
and the registry gates call) runs in a fresh interpreter, scores a GLUE, a SQuAD v2.0 and a NER prediction
file, and torch was never imported. The import-linter contract `metrics-pure` forbids the direct imports;
this catches torch arriving any other way (a reader's module, a lazy import on the scoring path)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.paths import FIXTURES, REPO

PROBE = textwrap.dedent("""
    import json, sys
    {setup}
    print(json.dumps({{"result": result, "torch": "torch" in sys.modules}}))
""")


def _probe(setup: str) -> dict:
    code = PROBE.format(setup=textwrap.dedent(setup).strip())
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_scoring_glue_squad_and_ner_predictions_imports_no_torch(tmp_path):
    conll = FIXTURES / "conll" / "dev.txt"
    ner_predictions = tmp_path / "ner_predictions.txt"
    # TOKEN GOLD PREDICTED, every tag predicted right: the scorer's input format (conll.write_predictions).
    ner_predictions.write_text("".join(f"{line.split()[0]} {line.split()[-1]} {line.split()[-1]}\n"
                                       if line.strip() and not line.startswith("-DOCSTART-") else "\n"
                                       for line in conll.read_text(encoding="utf-8").splitlines()),
                               encoding="utf-8")
    squad = FIXTURES / "squad"
    probe = _probe(f"""
        from bert_core.metrics.scoring import score_predictions
        result = {{
            "glue": score_predictions("SST-2", {str(FIXTURES / "glue" / "SST-2" / "dev.tsv")!r},
                                      {str(FIXTURES / "glue" / "SST-2" / "predictions.tsv")!r}),
            "squad": score_predictions("squad", {str(squad / "data-v2.0.json")!r},
                                       {str(squad / "pred-v2.0-mixed.json")!r},
                                       na_prob_file={str(squad / "na-prob-v2.0-mixed.json")!r}),
            "ner": score_predictions("ner", {str(conll)!r}, {str(ner_predictions)!r}),
        }}
    """)
    assert probe["result"]["glue"]["accuracy"] == 4 / 5
    assert 0 < probe["result"]["squad"]["f1"] <= 100 and "best_f1" in probe["result"]["squad"]
    assert probe["result"]["ner"]["f1"] == 1.0
    assert probe["torch"] is False, "scoring predictions imported torch"


def test_the_probe_sees_torch_when_it_is_imported():
    """The check can fail: fine-tuning's step imports torch, and the same probe reports it."""
    probe = _probe("""
        import bert_core.finetune.step
        result = None
    """)
    assert probe["torch"] is True
