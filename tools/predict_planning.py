"""Decode a checkpoint over a planning JSON file and write its answers for ``wamdiff2 eval open-loop``.

Decoding is the training evaluation's (reference defaults at block size B: dynamic rule, threshold 0.9,
at most B steps per block, answer grammar). Writes ``{id: answer}`` to OUT and a summary next to it
(``OUT.summary.json``: forwards per answer, tokens per forward, seconds per plan on this machine).
Usage: ``python tools/predict_planning.py CHECKPOINT PLANNING_JSON OUT --block-size 32 [--samples N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode, planning_grammar
from wamdiff2_ros.model.checkpoint import load_checkpoint
from wamdiff2_ros.training.data import load_records, tokenize_record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("planning_json")
    parser.add_argument("out")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--samples", type=int, default=0, help="first N records (0 = all)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--min-pixels", type=int, default=3136)
    parser.add_argument("--max-pixels", type=int, default=12544)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.checkpoint, dtype=args.dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    records = load_records(args.planning_json, "planning")
    if args.samples:
        records = records[: args.samples]
    config = DecodeConfig(
        block_size=args.block_size,
        steps=args.block_size,
        max_new_tokens=args.max_new_tokens,
        threshold=0.9,
        grammar=True,
    )
    grammar = planning_grammar(tokenizer, replace(config, grammar=True))
    answers: dict[str, str] = {}
    forwards, tokens, seconds = [], [], []
    with torch.inference_mode():
        for record in records:
            example = tokenize_record(
                record, tokenizer, min_pixels=args.min_pixels, max_pixels=args.max_pixels
            )
            start = time.perf_counter()
            result = decode(model, tokenizer, example.prompt, config, grammar)
            seconds.append(time.perf_counter() - start)
            answers[record.id] = result.text
            forwards.append(result.forwards)
            tokens.append(len(result.token_ids) + int(result.candidates[0].stopped))
    Path(args.out).write_text(json.dumps(answers, indent=1) + "\n")
    summary = {
        "checkpoint": args.checkpoint,
        "block_size": args.block_size,
        "samples": len(records),
        "forwards_per_answer": sum(forwards) / len(records),
        "tokens_per_forward": sum(tokens) / sum(forwards),
        "decode_s_median": statistics.median(seconds),
        "decode_s_p90": sorted(seconds)[int(0.9 * (len(seconds) - 1))],
        "threads": torch.get_num_threads(),
        "dtype": args.dtype,
    }
    Path(args.out + ".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
