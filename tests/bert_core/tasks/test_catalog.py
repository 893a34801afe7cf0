"""Which files of a data dir a task reads."""

import pytest

from bert_core.tasks import catalog


def _found(task, data_dir):
    return {split.name: catalog.find_file(data_dir, split.files, split.name, task, required=split.required)
            for split in task.eval_splits()}


@pytest.mark.parametrize("names", [("dev.txt", "test.txt"), ("eng.testa", "eng.testb")])
def test_ner_reads_either_conll_layout_as_one_dev_and_one_test_split(tmp_path, names):
    """The CoNLL-2003 release's eng.testa/eng.testb are NER's dev and test files, as docs/finetuning.md says: the
    release's layout was refused for want of dev.txt."""
    for name in names:
        (tmp_path / name).write_text("x X O\n", encoding="utf-8")
    assert _found(catalog.get("ner"), tmp_path) == {"dev": tmp_path / names[0], "test": tmp_path / names[1]}
