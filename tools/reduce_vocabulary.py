"""Shrink a trained checkpoint to the vocabulary its scenes use (``model/vocab.py``), logits unchanged there.

The copy keeps every weight but the embedding rows of ids that no prompt or answer of the given scene
folders uses (nor the chat template, printable ASCII and special tokens): at every kept id its logits equal
the original's, and the other ids can no longer be chosen. The other files of the folder (tokenizer,
lineage, model card, pixel budget) are copied unchanged.
Usage: ``python tools/reduce_vocabulary.py CHECKPOINT OUT --vocab-from DATA_DIR [DATA_DIR ...]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wamdiff2_ros.model.tokenizer import load_tokenizer
from wamdiff2_ros.model.vocab import ids_for
from wamdiff2_ros.training.data import vocabulary_texts
from wamdiff2_ros.training.recipe import reduce_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--vocab-from", type=Path, nargs="+", required=True, help="scene folders")
    args = parser.parse_args()
    kept = ids_for(load_tokenizer(), vocabulary_texts(args.vocab_from))
    reduce_checkpoint(args.checkpoint, args.out, kept)
    size = (args.out / "model.safetensors").stat().st_size / 1e6
    print(f"{args.out}: {len(kept)} ids kept, {size:.1f} MB")


if __name__ == "__main__":
    main()
