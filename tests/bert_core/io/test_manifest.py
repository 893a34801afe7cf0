import json

import pytest

from bert_core.errors import BertPipelineError
from bert_core.io import manifest


def test_build_write_read_and_up_to_date(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "in.txt").write_text("input")
    inputs = {str(tmp_path / "in.txt"): manifest.sha256_file(tmp_path / "in.txt")}
    m = manifest.build("segment", {"language": "en"}, inputs, tmp_path, ["a.txt"], manifest.now(),
                       metrics={"loss": 1})
    manifest.write(m, tmp_path)
    data = manifest.read(tmp_path)
    assert data["outputs"] == [{"path": "a.txt", "sha256": manifest.sha256_file(tmp_path / "a.txt")}]
    assert data["metrics"] == {"loss": 1.0} and data["step"] == "segment"
    assert manifest.is_up_to_date(tmp_path, "segment", {"language": "en"}, inputs)
    assert not manifest.is_up_to_date(tmp_path, "segment", {"language": "zh"}, inputs)
    assert not manifest.is_up_to_date(tmp_path, "segment", {"language": "en"}, {"other": "x"})
    (tmp_path / "a.txt").write_text("tampered")
    assert manifest.verify_outputs(tmp_path) == ["a.txt: sha256 differs from the manifest"]
    assert not manifest.is_up_to_date(tmp_path, "segment", {"language": "en"}, inputs)


def test_read_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no manifest"):
        manifest.read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"step": "x"}))
    with pytest.raises(BertPipelineError, match="lacks the field 'config'"):
        manifest.read(tmp_path)
