"""The nightly regression's throughput benchmark runs from an installed package, without the checkout.

A wheel of the project is built (offline, with the setuptools already installed), installed with --no-deps in
a fresh venv that sees this venv's dependencies (torch, transformers, ...) through a .pth path line, and
operators.nightly.throughput (evaluation.model_throughput, in-process) runs from a directory outside the checkout,
exactly as the DAG's task calls it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.slow

# What the wheel is built from (pyproject.toml's packages.find and readme); copied so the build's build/ and
# egg-info never land in the checkout, where other runs may build at the same time.
SOURCES = ["pyproject.toml", "README.md", "bert_core", "bert_pipeline", "evaluation", "operators", "pipelines"]

NIGHT = """
import json, sys
import bert_core, bert_pipeline, evaluation, operators, pipelines
from evaluation import model_throughput
from operators import nightly
work = sys.argv[1]
speed = nightly.throughput(work, ["bert_6_384_12"], steps=1, batch_size=2, max_seq_length=16, threads=1)
files = {m.__name__: m.__file__ for m in (bert_core, bert_pipeline, evaluation, operators, pipelines, nightly,
                                          model_throughput)}
print(json.dumps({"speed": speed, "files": files}))
"""


def _run(cmd: list, cwd: Path, env: dict | None = None, timeout: int = 120) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd}:\n{(done.stdout + done.stderr)[-3000:]}"
    return done.stdout


def test_nightly_throughput_runs_from_a_wheel_install(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp_path / "dist", src], tmp_path)
    (wheel,) = (tmp_path / "dist").glob("bert_pipeline-*.whl")
    assert "evaluation/model_throughput.py" in zipfile.ZipFile(wheel).namelist()

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
    python = venv / "bin" / "python"
    # Installed before the dependencies' path is added: pip sees an empty environment (never this venv's
    # editable bert-pipeline), so it neither skips the wheel nor touches anything outside the new venv.
    _run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel], tmp_path)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path).strip())
    # A plain path line: the dependencies, without running this venv's .pth files (its editable finder, which
    # maps the packages to the checkout).
    (site / "main_venv_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", BERT_PIPELINE_HOME=str(tmp_path / "home"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    result = json.loads(_run([python, "-c", NIGHT, tmp_path / "work"], outside, env, timeout=300).splitlines()[-1])

    for name, file in result["files"].items():
        path = Path(file).resolve()
        assert path.is_relative_to(site.resolve()), (name, file)
        assert not path.is_relative_to(REPO), (name, file)
    assert set(result["speed"]) == {"throughput/bert_6_384_12/train", "throughput/bert_6_384_12/infer"}
    assert all(v > 0 for v in result["speed"].values())
    report = json.loads((tmp_path / "work" / "model_throughput.json").read_text())
    assert set(report) == {"machine", "args", "rows"}
    assert report["machine"]["command"].startswith("python -m evaluation.model_throughput --configs bert_6_384_12")
    # The benchmarks start as modules of the installed package too (`python -m evaluation.<name>`).
    assert "python -m evaluation.model_throughput" in _run([python, "-P", "-m", "evaluation.model_throughput",
                                                            "--help"], outside, env)
    for row in report["rows"]:
        assert {"config", "mode", "ours_tokens_per_s", "transformers_tokens_per_s",
                "ratio_ours_over_transformers"} <= set(row)
