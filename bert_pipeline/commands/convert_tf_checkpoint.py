"""`bert-pipeline convert-tf-checkpoint CKPT_PREFIX BERT_CONFIG OUT_DIR`.

Turns a Google BERT TensorFlow checkpoint (google-research/bert: ``bert_model.ckpt.index`` +
``bert_model.ckpt.data-00000-of-00001``, ``bert_config.json``, ``vocab.txt``) into a model directory:
``config.json`` (HF), ``model.safetensors`` (HF parameter names), ``vocab.txt`` and
``tokenizer_config.json`` (``do_lower_case``). TensorFlow is not needed: bert_core.model.tf_checkpoint
reads the checkpoint itself.

The output appears all at once (bert_core.io.storage.atomic_output_dir): everything is written to a
temporary directory beside OUT_DIR and renamed into place at the end, so an interrupted run leaves no
half-written model directory. OUT_DIR may also be an s3:// URI.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "ckpt_prefix",
        metavar="CKPT_PREFIX",
        help="checkpoint prefix, e.g. uncased_L-12_H-768_A-12/bert_model.ckpt (the .index path or the "
        "directory holding a single checkpoint also work)",
    )
    parser.add_argument(
        "bert_config", metavar="BERT_CONFIG", help="Google bert_config.json (or an HF config.json)"
    )
    parser.add_argument("out_dir", metavar="OUT_DIR", help="model directory to create")
    parser.add_argument(
        "--vocab",
        metavar="FILE",
        help="WordPiece vocab.txt to copy into OUT_DIR (default: vocab.txt next to the checkpoint, if any)",
    )
    case = parser.add_mutually_exclusive_group()
    case.add_argument(
        "--do-lower-case",
        dest="do_lower_case",
        action="store_true",
        default=None,
        help="the model is uncased (default: inferred from the checkpoint directory's name: cased when it "
        "contains 'cased' but not 'uncased', e.g. cased_L-12_H-768_A-12, multi_cased_L-12_H-768_A-12; "
        "uncased otherwise)",
    )
    case.add_argument("--cased", dest="do_lower_case", action="store_false", help="the model is cased")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace OUT_DIR if it exists and is not empty"
    )


def infer_do_lower_case(ckpt_prefix: str) -> bool:
    """Google names its cased models *cased_L-..* and its uncased ones *uncased_L-..*; default uncased."""
    name = Path(os.path.abspath(ckpt_prefix)).parent.name.lower()
    return not ("cased" in name and "uncased" not in name)


def run(args: argparse.Namespace) -> int:
    # Imported here so that `--help` stays fast (torch) and the CLI's lazy-import promise holds.
    import torch

    from bert_core.io import storage
    from bert_core.model.config import BertConfig
    from bert_core.model.tf_checkpoint import TFCheckpointReader, convert_tf_state, is_skipped_variable
    from bert_core.model.weights import save_state_dict

    # Entered first so that a refusal to overwrite happens before any work; on any error the
    # temporary directory is removed and OUT_DIR is left as it was.
    with storage.atomic_output_dir(args.out_dir, overwrite=args.overwrite) as tmp_dir:
        reader = TFCheckpointReader(args.ckpt_prefix)
        prefix = reader.prefix
        config = BertConfig.from_json_file(args.bert_config)

        vocab = args.vocab
        if vocab is None:
            candidate = os.path.join(os.path.dirname(prefix), "vocab.txt")
            if os.path.isfile(candidate):
                vocab = candidate
            else:
                log.warning(
                    "no vocab.txt next to %s and no --vocab: the model directory will have none", prefix
                )
        elif not os.path.isfile(vocab):
            raise FileNotFoundError(f"vocab file {vocab} not found")

        inferred = args.do_lower_case is None
        do_lower_case = infer_do_lower_case(prefix) if inferred else bool(args.do_lower_case)

        numpy_state = convert_tf_state(reader, config)
        skipped = sum(1 for name in reader.variables if is_skipped_variable(name))
        overrides: dict[str, object] = {"do_lower_case": do_lower_case}
        if "classifier.weight" in numpy_state:  # bert_config.json cannot know a fine-tuned head's size
            overrides["num_labels"] = int(numpy_state["classifier.weight"].shape[0])
        config = config.replace(**overrides)
        state = {name: torch.from_numpy(array) for name, array in numpy_state.items()}

        save_state_dict(state, config, tmp_dir, vocab_file=vocab)
        tokenizer_config = {"do_lower_case": do_lower_case, "tokenizer_class": "BertTokenizer"}
        (tmp_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
        files = ", ".join(sorted(p.name for p in tmp_dir.iterdir()))

    casing = f"do_lower_case={do_lower_case}" + (" (inferred from the directory name)" if inferred else "")
    print(
        f"Converted {len(state)} tensors from {prefix} into {args.out_dir} ({files}); skipped {skipped} "
        f"optimizer/training-state variables (adam_m, adam_v, global_step); {casing}; "
        f"vocab: {vocab or 'none'}."
    )
    return 0
