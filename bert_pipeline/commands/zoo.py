"""`bert-pipeline zoo`: the model zoo names, their architecture and where their files are expected."""

from __future__ import annotations

import argparse
import json

from bert_core.io import storage
from bert_core.model import zoo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the table as JSON lines instead of text")


def run(args: argparse.Namespace) -> int:
    rows = []
    for entry in zoo.entries():
        where = zoo.model_location(entry)
        try:
            zoo.resolve_pretrained(entry)
            present = True
        except FileNotFoundError:
            present = False
        rows.append(dict(name=entry.name, architecture=entry.architecture, dataset=entry.dataset,
                         vocab_size=entry.vocab_size, do_lower_case=entry.do_lower_case,
                         location=where, present=present))
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"model store: {zoo.model_store()} (set BERT_MODEL_STORE to change; local path or s3:// URI)")
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        mark = "present" if r["present"] else "missing"
        print(f"  {r['name']:<{width}}  {r['architecture']:<16} {r['dataset']:<28} {mark:<8} "
              f"{storage.join(r['location'], '')}")
    print("A missing model's directory needs config.json (or bert_config.json), model.safetensors "
          "(or pytorch_model.bin) and vocab.txt.")
    return 0
