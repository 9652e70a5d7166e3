"""Training fixtures: a tiny reference-format dataset on disk (real PNGs, real planning prompts).

Answers are short (a few tokens) except the planning ones, which keep the real 16-number format, so that steps
with the real 151,936-row head stay fast on two cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from wamdiff2_ros.model.prompt import format_waypoints, planning_user_text

SMALL_IMAGE = {"min_pixels": 3136, "max_pixels": 3136}  # 64 x 64 px after resize: 4 visual tokens


def _waypoints(speed_mps: float, lateral_m: float) -> np.ndarray:
    t_s = np.arange(1, 9) * 0.5
    return np.stack([speed_mps * t_s, lateral_m * (t_s / 4.0) ** 2], axis=1)


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory) -> Path:
    """planning.json, qa.json and detection.json (2 records each) over two seeded 64x96 images."""
    folder = tmp_path_factory.mktemp("records")
    rng = np.random.default_rng(0)
    planning, qa = [], []
    for k, (command, speed, lateral) in enumerate([("straight", 8.0, 0.0), ("left", 5.0, 3.5)]):
        image = f"images/s{k}.png"
        (folder / "images").mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(64, 96, 3), dtype=np.uint8)).save(folder / image)
        planning.append(
            {
                "datasource": "test",
                "id": f"s{k}",
                "image": [image],
                "conversations": [
                    {"from": "human", "value": planning_user_text(command, (speed, 0.0), (0.0, 0.0))},
                    {"from": "gpt", "value": format_waypoints(_waypoints(speed, lateral))},
                ],
            }
        )
        qa.append(
            {
                "datasource": "test",
                "id": f"s{k}_qa0",
                "image": [image],
                "conversations": [
                    {
                        "from": "human",
                        "value": "<image>\nHow many vehicles are clearly visible in the image?",
                    },
                    {"from": "gpt", "value": str(k + 1)},
                ],
            }
        )
    detection = [
        {
            "id": f"s{k}_det",
            "image": [f"images/s{k}.png"],
            "conversations": [
                {"from": "human", "value": "<image>\nLocate every car. Report bbox_2d JSON."},
                {"from": "gpt", "value": json.dumps([{"bbox_2d": [10, 8, 40 + k, 30], "label": "car"}])},
            ],
        }
        for k in range(2)
    ]
    (folder / "detection.json").write_text(json.dumps(detection))
    (folder / "planning.json").write_text(json.dumps(planning))
    (folder / "qa.json").write_text(json.dumps(qa))
    (folder / "navigation.json").write_text('{"command_rule": "branch"}')  # as `sim generate` writes today
    return folder


@pytest.fixture(scope="session")
def examples(dataset_dir, tokenizer):
    """Tokenised examples: planning s0, planning s1, qa s0_qa0."""
    from wamdiff2_ros.training.data import load_records, tokenize_record

    records = load_records(dataset_dir / "planning.json", "planning") + load_records(
        dataset_dir / "qa.json", "qa"
    )
    return [tokenize_record(r, tokenizer, **SMALL_IMAGE) for r in records[:3]]
