"""A model trained on the ``branch_route`` rule reads the route's shape ahead in every prompt: the planner
passes it on, refuses its inputs without one, and refuses one for any other model (neither was ever
prompted so)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.planner import DrivingInputs, Planner
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.checkpoint import LoadedModel
from wamdiff2_ros.model.prompt import COMMAND_RULE_KEY, STRAIGHT_ROUTE_AHEAD_M

CONFIG = DecodeConfig(block_size=8, steps=4, grammar=True)


def test_a_route_model_plans_with_the_route_and_refuses_inputs_without_one(
    tiny_model, tokenizer, front_image, monkeypatch
):
    monkeypatch.setattr(tiny_model.config, COMMAND_RULE_KEY, "branch_route", raising=False)
    planner = Planner(LoadedModel(tiny_model, tokenizer, "tiny"), CONFIG)
    prompts = []
    decoded = SimpleNamespace(candidates=(), vision_s=0.0, prefill_s=0.0, latency_s=0.0)
    monkeypatch.setattr(planner, "_decode", lambda prompt, *_: prompts.append(prompt) or decoded)
    route = STRAIGHT_ROUTE_AHEAD_M + np.array([0.0, -3.0])
    planner.plan(DrivingInputs(front_image, "right", (8.0, 0.0), (0.0, 0.0), None, route))
    text = tokenizer.decode(prompts[0].input_ids[0])
    assert "The navigation information is: right to (10.00,-03.00,20.00,-03.00," in text
    with pytest.raises(InputError, match="branch_route rule; route's shapes given: none"):
        planner.plan(DrivingInputs(front_image, "right", (8.0, 0.0), (0.0, 0.0)))


def test_a_model_of_another_rule_refuses_a_route(tiny_model, tokenizer, front_image, monkeypatch):
    monkeypatch.setattr(tiny_model.config, COMMAND_RULE_KEY, "branch", raising=False)
    planner = Planner(LoadedModel(tiny_model, tokenizer, "tiny"), CONFIG)
    with pytest.raises(InputError, match="branch rule; route's shapes given: one"):
        planner.plan(DrivingInputs(front_image, "left", (8.0, 0.0), (0.0, 0.0), None, STRAIGHT_ROUTE_AHEAD_M))


def test_a_planner_with_other_settings_keeps_the_models_rule(tiny_model, tokenizer, front_image, monkeypatch):
    """``with_config`` copies are what the node and ``bench plan`` drive (a copy once lacked the rule, so its
    warm-up and every plan failed on the GPU)."""
    monkeypatch.setattr(tiny_model.config, COMMAND_RULE_KEY, "branch_route", raising=False)
    original = Planner(LoadedModel(tiny_model, tokenizer, "tiny"), CONFIG)
    planner = original.with_config(candidates=2)
    assert planner.command_rule == "branch_route" and planner.config.candidates == 2
    assert original.config.candidates == 1 and planner._engines is original._engines
    with pytest.raises(InputError, match="branch_route rule; route's shapes given: none"):
        planner.plan(DrivingInputs(front_image, "right", (8.0, 0.0), (0.0, 0.0)))


def test_a_model_that_plans_along_the_route_is_given_its_polyline_and_its_answers_turn_with_it(
    tiny_model, tokenizer, front_image, monkeypatch
):
    """A ``route`` plan frame model's answer (s, d) becomes ego waypoints along the route polyline the
    inputs carry (model.plan_frame); without one it is refused, as one is for an ego-frame model."""
    from wamdiff2_ros.model.plan_frame import PLAN_FRAME_KEY, STRAIGHT_ROAD_ROUTE_EGO, plan_to_ego

    monkeypatch.setattr(tiny_model.config, PLAN_FRAME_KEY, "route", raising=False)
    planner = Planner(LoadedModel(tiny_model, tokenizer, "tiny"), CONFIG, smoothing=0.0)
    answer = ",".join(f"{3.0 * k:05.2f},00.00" for k in range(1, 9))  # 3 m a step on the route
    decoded = SimpleNamespace(
        candidates=(SimpleNamespace(text=answer, seed=0),), vision_s=0.0, prefill_s=0.0, latency_s=0.0
    )
    monkeypatch.setattr(planner, "_decode", lambda *_: decoded)
    right_bend = np.array([[-10.0, 0.0], [10.0, 0.0], [20.0, -5.0], [25.0, -20.0], [25.0, -60.0]])
    output = planner.plan(DrivingInputs(front_image, "right", (6.0, 0.0), (0.0, 0.0), route_ego_m=right_bend))
    waypoints = output.candidates[0].waypoints_ego
    straight_on = np.arange(1, 9)[:, None] * [3.0, 0.0]
    np.testing.assert_allclose(waypoints, plan_to_ego(straight_on, "route", right_bend))
    assert waypoints[-1, 1] < -5.0  # the straight answer turned right with the route
    with pytest.raises(InputError, match="route frame; route polylines given: none"):
        planner.plan(DrivingInputs(front_image, "right", (6.0, 0.0), (0.0, 0.0)))
    monkeypatch.setattr(tiny_model.config, PLAN_FRAME_KEY, "ego")
    ego_planner = Planner(LoadedModel(tiny_model, tokenizer, "tiny"), CONFIG)
    with pytest.raises(InputError, match="ego frame; route polylines given: one"):
        ego_planner.plan(
            DrivingInputs(front_image, "left", (6.0, 0.0), (0.0, 0.0), route_ego_m=STRAIGHT_ROAD_ROUTE_EGO)
        )
