"""Random-weight starting point of a default-model candidate: the ``tiny`` preset, deeper, wider MLP.

Same vocabulary (151,936, tied), hidden size 64, heads and vision tower as ``tiny``; 6 text layers
instead of 2 and an MLP of 512 instead of 128 (about 0.5 M more parameters; the embedding, 9.7 M,
dominates the size: a wider hidden size would not fit the 30 MB budget with the real vocabulary).
Usage: ``python tools/init_default_model.py OUT_DIR [--seed N] [--layers L] [--intermediate I]``; the
folder is a checkpoint that ``wamdiff2 train sft`` takes as ``model=OUT_DIR``.
"""

from __future__ import annotations

import argparse

from wamdiff2_ros.model.backbone import build_model, count_parameters
from wamdiff2_ros.model.checkpoint import save_checkpoint
from wamdiff2_ros.model.presets import preset_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="checkpoint folder to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=6, help="text decoder layers (default 6)")
    parser.add_argument("--intermediate", type=int, default=512, help="text MLP size (default 512)")
    args = parser.parse_args()
    config = preset_config("tiny")
    config.text_config.num_hidden_layers = args.layers
    config.text_config.intermediate_size = args.intermediate
    model = build_model(config, seed=args.seed)
    save_checkpoint(model, args.out)
    shape = f"{args.layers} layers, MLP {args.intermediate}"
    print(f"{args.out}: {count_parameters(model):,} parameters, {shape}")


if __name__ == "__main__":
    main()
