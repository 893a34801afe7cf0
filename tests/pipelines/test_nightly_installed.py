"""The nightly regression's throughput benchmark runs from an installed package, without the checkout.

A wheel of the project is built (offline, with the setuptools already installed), installed with --no-deps in
a fresh venv that sees this venv's dependencies (torch, transformers, ...) through a .pth path line, and
operators.nightly.throughput runs from a directory outside the checkout, exactly as the DAG's task calls it.
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
SOURCES = ["pyproject.toml", "README.md", "bert_core", "bert_pipeline", "operators", "pipelines"]

NIGHT = """
import importlib.util, json, sys
import bert_core, bert_pipeline, operators, pipelines
from operators import nightly
work = sys.argv[1]
speed = nightly.throughput(work, ["minilm_L6_H384"], steps=1, batch_size=2, seq_len=16, threads=1)
files = {m.__name__: m.__file__ for m in (bert_core, bert_pipeline, operators, pipelines, nightly)}
files["bench"] = importlib.util.find_spec(nightly.THROUGHPUT_MODULE).origin
print(json.dumps({"speed": speed, "files": files, "command": nightly.throughput_command()}))
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
    assert "bert_pipeline/bench/model_throughput.py" in zipfile.ZipFile(wheel).namelist()

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
    assert result["command"] == [str(python), "-P", "-m", "bert_pipeline.bench.model_throughput"]
    assert set(result["speed"]) == {"throughput/minilm_L6_H384/train", "throughput/minilm_L6_H384/infer"}
    assert all(v > 0 for v in result["speed"].values())
    report = json.loads((tmp_path / "work" / "model_throughput.json").read_text())
    assert set(report) == {"machine", "args", "rows"}
    assert report["machine"]["command"].startswith("python -m bert_pipeline.bench.model_throughput --configs")
    for row in report["rows"]:
        assert {"config", "mode", "ours_tokens_per_s", "transformers_tokens_per_s",
                "ratio_ours_over_transformers"} <= set(row)
