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
