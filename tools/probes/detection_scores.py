"""Which rule should turn a detection answer's token probabilities into its boxes' scores?

Decodes every detection record of a `wamdiff2 sim generate` folder through `Planner.detect` (greedy, B32 S8,
the grammar: what the node runs), maps each box to the tokens that wrote it (`model.parse.
grounding_item_tokens`) and prints the COCO mAP of the same boxes ranked by each rule below; "unranked" is
every box at 1.0, in answer order. Choose on a selection set (e.g. `sim generate --seed 3`), then report
the chosen rule on the held-out set (docs/DECISIONS.md, "detection scores").

Usage: python3 tools/probes/detection_scores.py MODEL_DIR DATA (CPU, ~1 min for 300 frames)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import Planner
from wamdiff2_ros.eval.detection import ImageDetections, detection_map, detection_map_by_distance
from wamdiff2_ros.eval.open_loop import load_truth
from wamdiff2_ros.eval.predict import MAX_NEW_TOKENS
from wamdiff2_ros.model.parse import ItemTokens, boxes_to_source_px, grounding_item_tokens, salvage_detections
from wamdiff2_ros.model.tokenizer import token_texts
from wamdiff2_ros.sim.dataset import load_camera
from wamdiff2_ros.training.data import load_records


def _geo(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(np.maximum(values, 1e-12)))))


# Each rule: (the item's tokens, the answer's token probabilities) -> its score.
Rule = Callable[[ItemTokens, list[float]], float]


def _digits(item: ItemTokens, p: list[float]) -> list[float]:
    return [p[t] for number in item.numbers for t in number] or [1.0]


def _leading(item: ItemTokens, p: list[float], count: int = 1) -> list[float]:
    return [p[t] for number in item.numbers for t in number[:count]] or [1.0]


def _opens(item: ItemTokens, p: list[float]) -> float:
    return min(p[t] for t in item.opening)


RULES: dict[str, Rule] = {
    "digits mean": lambda i, p: float(np.mean(_digits(i, p))),
    "digits min": lambda i, p: min(_digits(i, p)),
    "digits product": lambda i, p: float(np.prod(_digits(i, p))),
    "digits geometric": lambda i, p: _geo(_digits(i, p)),
    "opens": _opens,
    "opens x digits mean": lambda i, p: _opens(i, p) * float(np.mean(_digits(i, p))),
    "opens x digits geometric": lambda i, p: _opens(i, p) * _geo(_digits(i, p)),
    "opens x numbers' geometric": lambda i, p: (
        _opens(i, p) * float(np.mean([_geo([p[t] for t in n]) for n in i.numbers] or [1.0]))
    ),
    "leading mean": lambda i, p: float(np.mean(_leading(i, p))),
    "leading two mean": lambda i, p: float(np.mean(_leading(i, p, 2))),
    "opens x leading mean (the product's)": lambda i, p: _opens(i, p) * float(np.mean(_leading(i, p))),
    "opens x leading two mean": lambda i, p: _opens(i, p) * float(np.mean(_leading(i, p, 2))),
    "opens x leading geometric": lambda i, p: _opens(i, p) * _geo(_leading(i, p)),
    "opens x leading min": lambda i, p: _opens(i, p) * min(_leading(i, p)),
}


def main() -> None:
    model_dir, data = Path(sys.argv[1]), Path(sys.argv[2])
    config = DecodeConfig(block_size=32, steps=8, grammar=True)
    planner = Planner.from_settings(config, checkpoint=str(model_dir))
    tokenizer = planner.loaded.tokenizer
    truth, camera = load_truth(data), load_camera(data)
    size = (camera.intrinsics.width_px, camera.intrinsics.height_px)
    answers = {}  # id -> (text, item tokens, token probabilities)
    for record in load_records(data / "detection.json", "detection"):
        image = np.asarray(Image.open(record.image_path).convert("RGB"))
        output = planner.detect(image, record.user_text, MAX_NEW_TOKENS["detection"])
        candidate = output.decode.candidates[0]
        items = grounding_item_tokens(candidate.text, token_texts(tokenizer, candidate.token_ids))
        answers[record.id] = (candidate.text, items, list(candidate.token_probabilities))
    expected = {key: ImageDetections(t.boxes_px, t.labels) for key, t in truth.items()}
    for name, rule in [("unranked", None), *RULES.items()]:
        predicted = {}
        for key, (text, items, probabilities) in answers.items():
            scores = None if rule is None or items is None else [rule(i, probabilities) for i in items]
            found, _ = salvage_detections(text, scores)
            boxes = boxes_to_source_px(found, size)
            predicted[key] = ImageDetections(
                boxes, tuple(d.label for d in found), tuple(d.score for d in found)
            )
        report = detection_map(expected, predicted)
        bands = detection_map_by_distance(expected, predicted, camera)
        by_band = " ".join(f"{band} {r['map']:.3f}" for band, r in bands.items())
        print(f"{name:38s} mAP {report['map']:.4f} AP50 {report['ap50']:.4f} | {by_band}")


if __name__ == "__main__":
    main()
