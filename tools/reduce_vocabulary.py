"""Shrink a trained checkpoint to the vocabulary its scenes use (``model/vocab.py``), logits unchanged there.

The copy keeps every weight but the embedding rows of ids that no prompt or answer of the given scene
folders uses (nor the chat template, printable ASCII and special tokens): at every kept id its logits equal
the original's, and the other ids can no longer be chosen. The other files of the folder (tokenizer,
lineage, model card, pixel budget) are copied unchanged.
Usage: ``python tools/reduce_vocabulary.py CHECKPOINT OUT --vocab-from DATA_DIR [DATA_DIR ...]``.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget, save_checkpoint
from wamdiff2_ros.model.vocab import ids_for, reduce_vocabulary
from wamdiff2_ros.training.data import vocabulary_texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--vocab-from", type=Path, nargs="+", required=True, help="scene folders")
    args = parser.parse_args()
    loaded = load_checkpoint(args.checkpoint)
    kept = ids_for(loaded.tokenizer, vocabulary_texts(args.vocab_from))
    small = reduce_vocabulary(loaded.model, kept)
    if args.out.resolve() != args.checkpoint.resolve():
        shutil.copytree(args.checkpoint, args.out, dirs_exist_ok=True)
    save_checkpoint(small, args.out, pixels=read_pixel_budget(args.checkpoint))
    size = (args.out / "model.safetensors").stat().st_size / 1e6
    print(f"{args.out}: {len(kept)} of {loaded.model.config.text_config.vocab_size} ids kept, {size:.1f} MB")


if __name__ == "__main__":
    main()
