"""The bundled default model (models/default): found, within the size budget, loaded wherever no model is
given, resized at its own pixel budget, and planning a parsable trajectory in fewer forwards than tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.model.checkpoint import read_pixel_budget
from wamdiff2_ros.model.default import default_model_dir

MAX_WEIGHT_BYTES = 30_000_000


def test_default_model_is_the_repository_folder_and_fits_the_budget() -> None:
    folder = default_model_dir()  # the source tree's, or the install's share/wamdiff2_ros/models/default
    assert folder.parts[-2:] == ("models", "default")
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    assert 0 < weights <= MAX_WEIGHT_BYTES
    assert read_pixel_budget(folder) == (3136, 36864)
    for name in ("MODEL_CARD.md", "tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (folder / name).is_file(), name


@pytest.fixture(scope="module")
def default_planner() -> Planner:
    return Planner.from_settings(DecodeConfig(block_size=32, steps=32, max_new_tokens=96, grammar=True))


def straight_ahead(planner: Planner, image: np.ndarray, speed_mps: float) -> DrivingInputs:
    """Driving on along a straight road (a route model is given its route, as the node gives it)."""
    return planner.on_a_straight_road(DrivingInputs(image, "straight", (speed_mps, 0.0), (0.0, 0.0)))


def test_no_checkpoint_and_no_preset_loads_the_default_model(default_planner: Planner) -> None:
    assert Path(default_planner.loaded.source) == default_model_dir()
    assert Path(default_planner.loaded.tokenizer.name_or_path) == default_model_dir()  # its own tokenizer
    assert default_planner.max_pixels == 36864  # its own budget, not the reference's 1920x1080


def test_default_model_plans_a_rendered_frame_in_blocks(default_planner: Planner) -> None:
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.sim.render import render_front
    from wamdiff2_ros.sim.scenes import make_scene

    scene = make_scene(3)
    image = render_front(Camera().scaled_to_width(640), scene.lanes, scene.snapshot()).image_rgb
    speed = 12.0
    output = default_planner.plan(straight_ahead(default_planner, image, speed))
    waypoints = output.candidates[0].waypoints_ego
    assert waypoints is not None and np.isfinite(waypoints).all()
    assert 0.0 < waypoints[-1, 0] < 8 * 0.5 * speed * 1.5  # moving forward at a plausible pace
    answer_tokens = len(output.decode.candidates[0].token_ids)
    assert output.decode.forwards < answer_tokens / 2  # block diffusion: several tokens per forward


def test_default_model_scores_the_boxes_it_finds(default_planner: Planner) -> None:
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.model.prompt import detection_user_text
    from wamdiff2_ros.sim.render import render_front
    from wamdiff2_ros.sim.scenes import make_scene

    scene = make_scene(3)
    image = render_front(Camera().scaled_to_width(640), scene.lanes, scene.snapshot()).image_rgb
    output = default_planner.detect(image, detection_user_text(), max_new_tokens=160)
    assert len(output.labels) > 0 and len(output.scores) == len(output.labels)
    assert all(0 < s < 1 for s in output.scores)  # the model's confidence, not the unscored 1.0


def test_a_smoothing_planner_publishes_the_smoothed_answer(default_planner: Planner) -> None:
    from wamdiff2_ros.decoding.smoothing import smooth_waypoints
    from wamdiff2_ros.geometry import Camera
    from wamdiff2_ros.model.parse import parse_waypoints
    from wamdiff2_ros.model.plan_frame import plan_to_ego
    from wamdiff2_ros.sim.render import render_front
    from wamdiff2_ros.sim.scenes import make_scene

    scene = make_scene(3)
    image = render_front(Camera().scaled_to_width(640), scene.lanes, scene.snapshot()).image_rgb
    smoothing = Planner(default_planner.loaded, default_planner.config, smoothing=1.0)
    inputs = straight_ahead(smoothing, image, 12.0)
    (candidate,) = smoothing.plan(inputs).candidates
    decoded = plan_to_ego(parse_waypoints(candidate.text), smoothing.plan_frame, inputs.route_ego_m)
    expected = smooth_waypoints(decoded, (12.0, 0.0), 1.0)
    np.testing.assert_array_equal(candidate.waypoints_ego, expected)  # the text stays the model's answer
