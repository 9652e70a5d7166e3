"""Random-weight starting point of a default-model candidate: the ``tiny`` preset, deeper, wider MLP.

Same vocabulary (151,936, tied), hidden size 64, heads and vision tower as ``tiny``; 6 text layers
instead of 2 and an MLP of 512 instead of 128 (about 0.5 M more parameters; the embedding, 9.7 M,
dominates the size: a wider hidden size would not fit the 30 MB budget with the real vocabulary).
``--vocab-from DATA_DIR ...`` keeps only the ids the scenes' prompts and answers use (``model/vocab.py``:
a few hundred rows instead of 151,936), which frees the bytes for ``--hidden`` (heads of 16, half as many
key-value heads, the vision tower's output to match).
Usage: ``python tools/init_default_model.py OUT_DIR [--seed N] [--layers L] [--intermediate I]
[--hidden H --vocab-from DATA_DIR ...]``; the folder is a checkpoint that ``wamdiff2 train sft`` takes as
``model=OUT_DIR``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wamdiff2_ros.model.backbone import count_parameters
from wamdiff2_ros.model.checkpoint import save_checkpoint
from wamdiff2_ros.model.tokenizer import load_tokenizer
from wamdiff2_ros.model.vocab import ids_for
from wamdiff2_ros.training.data import vocabulary_texts
from wamdiff2_ros.training.initial import initial_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="checkpoint folder to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=6, help="text decoder layers (default 6)")
    parser.add_argument("--intermediate", type=int, default=512, help="text MLP size (default 512)")
    parser.add_argument(
        "--hidden", type=int, default=64, help="text hidden size, a multiple of 32 (default 64)"
    )
    parser.add_argument("--vocab-from", type=Path, nargs="+", help="scene folders whose ids the model keeps")
    args = parser.parse_args()
    kept = ids_for(load_tokenizer(), vocabulary_texts(args.vocab_from)) if args.vocab_from else None
    model = initial_model(
        seed=args.seed, layers=args.layers, intermediate=args.intermediate, hidden=args.hidden, kept_ids=kept
    )
    save_checkpoint(model, args.out)
    vocab = f"{len(kept)} kept ids" if kept else "full vocabulary"
    shape = f"{args.layers} layers, hidden {args.hidden}, MLP {args.intermediate}, {vocab}"
    size = Path(args.out, "model.safetensors").stat().st_size / 2 / 1e6  # fp32 saved; bf16 is half
    print(f"{args.out}: {count_parameters(model):,} parameters ({size:.1f} MB as bf16), {shape}")


if __name__ == "__main__":
    main()
