"""Decode a checkpoint over one task file of a ``wamdiff2 sim generate`` folder, for ``wamdiff2 eval``.

planning and detection: the answer grammar on (``--no-grammar``: off; detection's labels are the categories
its prompt lists), block size / steps / threshold as given; qa: unconstrained. planning writes
``{id: answer}`` (for ``eval open-loop --predictions``); detection and qa write the records with their answers
replaced (for ``--detections`` / ``--answers``). Grammars are built over the ids the model can emit. Images
are resized with the checkpoint's own pixel budget (its preprocessor_config.json). A summary goes next to OUT
(``OUT.summary.json``: forwards per answer, tokens per forward, seconds per answer on this machine).
Usage: ``python tools/predict.py CHECKPOINT DATA_DIR OUT --task planning --block-size 32 [--samples N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from wamdiff2_ros.decoding import commit_rules
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import AnswerGrammars, decode
from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget
from wamdiff2_ros.model.image import MIN_PIXELS
from wamdiff2_ros.model.prompt import min_int_digits_of
from wamdiff2_ros.model.vocab import available_ids
from wamdiff2_ros.training.data import load_records, tokenize_record

# Planning takes the decoders' default budget (128): a padded plan of a fast car ("101.72" at 4 s) is
# longer than the 96 tokens of one below 100 m, and a tighter budget makes the grammar cut it to "10.17".
MAX_NEW_TOKENS = {"planning": DecodeConfig().max_new_tokens, "detection": 160, "qa": 16}


def _with_answer(item: dict, answer: str) -> dict:
    """A reference-format record with its last (gpt) turn replaced by the model's answer."""
    return item | {"conversations": [*item["conversations"][:-1], {"from": "gpt", "value": answer}]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("data_dir", type=Path, help="a 'wamdiff2 sim generate' folder")
    parser.add_argument("out")
    parser.add_argument("--task", choices=tuple(MAX_NEW_TOKENS), default="planning")
    parser.add_argument("--block-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=0, help="denoising steps per block (0 = block size)")
    parser.add_argument(
        "--rule", choices=commit_rules.names(), default="low_confidence_dynamic", help="commit rule"
    )
    parser.add_argument("--threshold", type=float, default=0.9, help="dynamic commit rule's threshold")
    parser.add_argument("--samples", type=int, default=0, help="first N records (0 = all)")
    parser.add_argument(
        "--no-grammar", action="store_true", help="planning and detection unconstrained (may not parse)"
    )
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_checkpoint(args.checkpoint, dtype=args.dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    min_pixels, max_pixels = read_pixel_budget(args.checkpoint) or (MIN_PIXELS, loaded.max_pixels)
    records = load_records(args.data_dir / f"{args.task}.json", args.task)[: args.samples or None]
    planning = args.task == "planning"
    config = DecodeConfig(
        block_size=args.block_size,
        steps=args.steps or args.block_size,
        max_new_tokens=MAX_NEW_TOKENS[args.task],
        commit_rule=args.rule,
        threshold=args.threshold,
        grammar=args.task in ("planning", "detection") and not args.no_grammar,
        min_int_digits=min_int_digits_of(model.config),  # the number style it was trained on
    )
    # Over the ids the model can emit: with a reduced vocabulary a grammar counts only on tokens it writes.
    grammars = AnswerGrammars(tokenizer, config, available_ids(model)) if config.grammar else None
    grammar_build_s = 0.0
    answers: dict[str, str] = {}
    forwards, tokens, seconds = [], [], []
    with torch.inference_mode():
        for record in records:
            example = tokenize_record(record, tokenizer, min_pixels=min_pixels, max_pixels=max_pixels)
            built = time.perf_counter()  # a grammar is built on first use, then looked up
            grammar = grammars.for_task(args.task, record.user_text) if grammars else None
            grammar_build_s += time.perf_counter() - built
            start = time.perf_counter()
            result = decode(model, tokenizer, example.prompt, config, grammar)
            seconds.append(time.perf_counter() - start)
            answers[record.id] = result.text
            forwards.append(result.forwards)
            tokens.append(len(result.token_ids) + int(result.candidates[0].stopped))
    if planning:
        written: object = answers
    else:
        items = json.loads((args.data_dir / f"{args.task}.json").read_text())
        written = [_with_answer(item, answers[item["id"]]) for item in items if item["id"] in answers]
    Path(args.out).write_text(json.dumps(written, indent=1) + "\n")
    summary = {
        "checkpoint": args.checkpoint,
        "task": args.task,
        "block_size": args.block_size,
        "steps": config.steps,
        "rule": args.rule,
        "threshold": args.threshold,
        "grammar": config.grammar,
        "grammar_build_s": grammar_build_s,
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
