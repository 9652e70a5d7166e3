"""Does a model give the expert's lateral sign any probability on a junction approach?

The closed loop's junction failures plan a lateral end of exactly 0 m where the expert's plan turns
(docs/log/seeing-model-fifth-run-2026-12-03.md, "Round 6"). Two explanations: the model gives a turn some
probability and the decoding's confidence order commits the majority's `00.00` first, or it gives it
none. This scores the expert's answer on frames of the expert's own approach to a junction (scene seed
``SEED``, the closed loop's scene), for each waypoint's lateral value: the probability of the expert's
sign (the separator before the value: ``,-`` for a right turn, ``,`` else) and of the value's whole tokens
(a) with every answer token of its block masked (the first denoising step: what the decoder sees when it
chooses what to commit first) and (b) with every token before it revealed (the AR view, as if the x and
the earlier waypoints were committed as the expert's).

Only a negative value's P(first) tells a turn from a straight plan: a positive value starts with the
same ``,`` as a straight ``00.00``.

Usage: python3 tools/probes/lateral_sign.py MODEL_DIR [SEED] [TIMES_S ...] (CPU, ~1 min a frame).
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from wamdiff2_ros.geometry import Camera
from wamdiff2_ros.model.checkpoint import load_checkpoint, read_command_rule, read_pixel_budget
from wamdiff2_ros.model.forward import block_causal_logits
from wamdiff2_ros.model.image import MIN_PIXELS
from wamdiff2_ros.model.prompt import build_planning_prompt, format_waypoints, min_int_digits_of
from wamdiff2_ros.model.tokenizer import MASK_ID
from wamdiff2_ros.sim.engine import SIM_HZ
from wamdiff2_ros.sim.expert import ground_truth, record_drive
from wamdiff2_ros.sim.render import render_front
from wamdiff2_ros.sim.scenes import make_scene

BLOCK = 32


def lateral_spans(tokens: list[str]) -> list[tuple[int, int]]:
    """(first, end) token index of each waypoint's lateral value in ``x,y,x,y,...`` tokens, the separator
    before it included: Qwen writes ``,-`` as one token, so that token is where the sign is chosen."""
    separators = [i for i, token in enumerate(tokens) if token.startswith(",")] + [len(tokens)]
    return [(separators[k], separators[k + 1]) for k in range(0, len(separators) - 1, 2)]


def scores(model, prompt, answer_ids: list[int], first: int, end: int) -> tuple[float, float, float, float]:
    """P(first token) and P(value) with the block masked from the block's start (a) or from ``first`` (b)."""
    block_start, blocks_end = first // BLOCK * BLOCK, ((end - 1) // BLOCK + 1) * BLOCK
    out = []
    for masked_from in (block_start, first):
        ids = torch.tensor([answer_ids[:blocks_end]])
        ids[0, masked_from:] = MASK_ID
        log_probs = block_causal_logits(model, prompt, ids, BLOCK).log_softmax(-1)[0]
        token_lp = [float(log_probs[i, answer_ids[i]]) for i in range(first, end)]
        out += [float(np.exp(token_lp[0])), float(np.exp(sum(token_lp)))]
    return tuple(out)


def main() -> None:
    folder = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1020
    times_s = [float(t) for t in sys.argv[3:]] or [1.5, 2.0, 2.5, 3.0]
    loaded = load_checkpoint(folder, dtype="fp32")
    model, tokenizer = loaded.model.eval(), loaded.tokenizer
    min_pixels, max_pixels = read_pixel_budget(folder) or (MIN_PIXELS, loaded.max_pixels)
    rule, digits = read_command_rule(folder), min_int_digits_of(model.config)
    camera = Camera().scaled_to_width(256)
    scene = make_scene(seed)
    log = record_drive(scene, max(times_s) + 5.0)
    print(f"{folder} (rule {rule}), scene {seed} ({scene.kind}), the expert's own drive")
    print("   t s  command        wp  expert y   P(first) P(value) masked block | revealed before")
    for time_s in times_s:
        index = round(time_s * SIM_HZ)
        frame = render_front(camera, scene.lanes, log[index])
        truth = ground_truth(log, index, scene, frame, rule)
        prompt = build_planning_prompt(
            tokenizer, frame.image_rgb, truth.command, truth.velocity_ego_mps, truth.accel_ego_mps2,
            truth.command_distance_m, truth.route_ahead_m, min_pixels=min_pixels, max_pixels=max_pixels,
        )  # fmt: skip
        answer = format_waypoints(truth.waypoints_ego, digits)
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
        tokens = [tokenizer.decode([i]) for i in answer_ids]
        answer_ids += [MASK_ID] * BLOCK  # room for the last block
        command = truth.command + (
            "" if truth.command_distance_m is None else f" {truth.command_distance_m:.0f}m"
        )
        for waypoint in range(8):
            first, end = lateral_spans(tokens)[waypoint]
            a_first, a_value, b_first, b_value = scores(model, prompt, answer_ids, first, end)
            print(
                f"  {time_s:4.1f}  {command:13s}  {waypoint + 1}  {truth.waypoints_ego[waypoint, 1]:7.2f}   "
                f"{a_first:7.3f}  {a_value:7.3f}              | {b_first:7.3f}  {b_value:7.3f}"
            )


if __name__ == "__main__":
    main()
