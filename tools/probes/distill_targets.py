"""How good a Stage II teacher's targets are at the student's masked positions (CPU, a few seconds).

Collates planning records as Stage II does (the student's block size and stratified masks, the teacher's
block mask beside it) and prints, for each model and each of the two masks, the plain cross-entropy and the
top-1 accuracy of its logits against the clean tokens at the masked positions. An AR teacher (mask B = 1)
sees the true tokens to the left only; a B32 student also sees the unmasked tokens to the right inside its
block, so at low mask ratios the student can be better informed than its teacher; and an AR teacher never
learnt the <|im_end|> padding that fills a B32 answer to a multiple of 32.
Usage: python tools/probes/distill_targets.py TEACHER STUDENT DATA_DIR [--teacher-block-size 1] [--samples 24]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget
from wamdiff2_ros.model.image import MIN_PIXELS
from wamdiff2_ros.model.tokenizer import EOS_ID
from wamdiff2_ros.training.collate import DiffusionCollator, model_rope_index
from wamdiff2_ros.training.data import load_records, tokenize_record
from wamdiff2_ros.training.forward import MaskedLogits, masked_targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("teacher")
    parser.add_argument("student")
    parser.add_argument("data_dir", help="a 'wamdiff2 sim generate' folder")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--teacher-block-size", type=int, default=1)
    parser.add_argument("--samples", type=int, default=24)
    args = parser.parse_args()
    models = {
        name: load_checkpoint(path, dtype="fp32", device="cpu")
        for name, path in (("teacher", args.teacher), ("student", args.student))
    }
    tokenizer = models["student"].tokenizer
    min_pixels, max_pixels = read_pixel_budget(args.student) or (MIN_PIXELS, models["student"].max_pixels)
    records = load_records(f"{args.data_dir}/planning.json", "planning")[: args.samples]
    examples = [tokenize_record(r, tokenizer, min_pixels=min_pixels, max_pixels=max_pixels) for r in records]
    collator = DiffusionCollator(
        model_rope_index(models["student"].model), args.block_size, teacher_block_size=args.teacher_block_size
    )
    batch = collator(examples, torch.Generator().manual_seed(0))
    labels, _, _ = masked_targets(batch)
    text = labels != EOS_ID  # the answer's own tokens; <|im_end|> ends and pads it to a multiple of B
    with torch.no_grad():
        for name, loaded in models.items():
            logits_of = MaskedLogits(loaded.model).eval()
            for teacher_mask in (False, True):
                logits = logits_of(batch, teacher_mask=teacher_mask)
                ce = F.cross_entropy(logits, labels, reduction="none")
                right = (logits.argmax(-1) == labels).float()
                block = args.teacher_block_size if teacher_mask else args.block_size
                print(
                    f"{name}, B = {block} mask: CE {ce.mean():.3f}, top-1 {right.mean():.3f} ({len(labels)} "
                    f"positions); answer text only: CE {ce[text].mean():.3f}, top-1 {right[text].mean():.3f} "
                    f"({int(text.sum())}); <|im_end|> only: CE {ce[~text].mean():.3f}"
                )


if __name__ == "__main__":
    main()
