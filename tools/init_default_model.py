"""Random-weight starting point of a default-model candidate: the ``tiny`` preset, deeper, wider MLP.

Same vocabulary (151,936, tied), hidden size 64, heads and vision tower as ``tiny``; 4 text layers
instead of 2 and an MLP of 256 instead of 128 (about 0.1 M more parameters; the embedding, 9.7 M,
dominates the size).
Usage: ``python tools/init_default_model.py OUT_DIR [--seed N]``; the folder is a checkpoint that
``wamdiff2 train sft`` takes as ``model=OUT_DIR``.
"""

from __future__ import annotations

import argparse

from wamdiff2_ros.model.backbone import build_model, count_parameters
from wamdiff2_ros.model.checkpoint import save_checkpoint
from wamdiff2_ros.model.presets import preset_config

LAYERS = 4
INTERMEDIATE = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="checkpoint folder to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = preset_config("tiny")
    config.text_config.num_hidden_layers = LAYERS
    config.text_config.intermediate_size = INTERMEDIATE
    model = build_model(config, seed=args.seed)
    save_checkpoint(model, args.out)
    print(f"{args.out}: {count_parameters(model):,} parameters, {LAYERS} layers, MLP {INTERMEDIATE}")


if __name__ == "__main__":
    main()
