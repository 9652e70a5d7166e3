"""Ground truth agrees with the simulator state: waypoints, agents' futures, boxes, command and QA."""

import dataclasses
import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.geometry import Camera, map_to_ego
from wamdiff2_ros.model.prompt import ROUTE_AHEAD_ARC_M, route_ahead
from wamdiff2_ros.sim.expert import (
    HORIZON_TICKS,
    TICKS_PER_WAYPOINT,
    ground_truth,
    navigation,
    navigation_command,
    record_drive,
    sample_indices,
)
from wamdiff2_ros.sim.render import render_front
from wamdiff2_ros.sim.scene_types import to_map_xy
from wamdiff2_ros.sim.scenes import make_scene

CAMERA = Camera().scaled_to_width(320)


def _arc(turn_rad: float, length_m: float = 100.0) -> np.ndarray:
    s_m = np.linspace(0.0, length_m, 200)
    if turn_rad == 0.0:
        return np.stack([s_m, np.zeros_like(s_m)], axis=1)
    radius_m = length_m / abs(turn_rad)
    phi = s_m / radius_m
    return np.stack([radius_m * np.sin(phi), np.sign(turn_rad) * radius_m * (1 - np.cos(phi))], axis=1)


@pytest.mark.parametrize(
    ("turn_rad", "command"),
    [(0.0, "straight"), (np.pi / 2, "left"), (-np.pi / 2, "right"), (0.3, "straight")],
)
def test_the_legacy_command_follows_the_route_turn(turn_rad, command):
    route = _arc(turn_rad, length_m=40.0)
    route = np.concatenate([route, route[-1] + (route[-1] - route[-2]) * np.arange(1, 40)[:, None] * 10])
    assert navigation_command(SimpleNamespace(route_map=route), np.zeros(2), "heading") == command


def _roundabout_by_exit() -> dict[str, object]:
    scenes = {}
    for seed in range(200):
        scene = make_scene(seed, "roundabout")
        scenes.setdefault(scene.facts["event"].removeprefix("exit "), scene)
        if len(scenes) == 3:
            return scenes
    raise AssertionError("no roundabout scene for every exit in 200 seeds")


def _before_node_xy(scene, edge: tuple, metres: float) -> np.ndarray:
    lane = scene.road.network.get_lane(edge)
    return to_map_xy(lane.position(lane.length - metres, 0.0))


def test_in_a_roundabout_the_command_says_which_exit_to_take():
    # Before each exit the route passes, the command is `right` where the route leaves the circle and
    # `straight` where it goes round (the legacy rule's word before an exit depends on how far round the
    # route goes after it: docs/log/command-rule-2026-12-03.md).
    scenes = _roundabout_by_exit()
    for exit_node, scene in scenes.items():
        exits = 0
        for (a, b, lane), (c, d, _) in itertools.pairwise(scene.ego.route):
            if c not in ("ex", "nx", "wx", "sx"):  # the circle's nodes with an exit
                continue
            exits += d.endswith("xs")
            word = navigation_command(scene, _before_node_xy(scene, (a, b, lane or 0), 3.0))
            assert word == ("right" if d.endswith("xs") else "straight"), (exit_node, c, d, word)
        assert exits == 1


def _turning_intersection():
    """The first seeded intersection scene whose route turns, its branch and the route's arc length (m) at
    each route point."""
    for seed in range(40):
        scene = make_scene(seed, "intersection")
        (branch,) = scene.route_branches
        if branch.command != "straight":
            steps_m = np.linalg.norm(np.diff(scene.route_map, axis=0), axis=1)
            return scene, branch, np.concatenate([[0.0], np.cumsum(steps_m)])
    raise AssertionError("no turning route in 40 intersection scenes")


def test_a_turn_at_an_intersection_is_commanded_before_and_through_the_junction():
    scene, branch, arc = _turning_intersection()
    words = [navigation_command(scene, xy) for xy in scene.route_map]
    commanded = arc[[w == branch.command for w in words]]
    # from 50 m before the junction to the end of the turning lane, nowhere else
    assert commanded.min() == pytest.approx(max(branch.node_arc_m - 50.0, 0.0), abs=2.5)
    assert commanded.max() == pytest.approx(branch.end_arc_m, abs=2.5)
    assert set(words) == {"straight", branch.command}


def test_the_branch_distance_counts_down_to_the_junction_and_is_zero_through_the_turn():
    # The `branch_distance` rule says the same word as `branch` and how far along the route its branch is.
    scene, branch, arc = _turning_intersection()
    for xy, arc_m in zip(scene.route_map, arc, strict=True):
        word, distance, route = navigation(scene, xy, "branch_distance")
        assert navigation(scene, xy, "branch") == (word, None, None)  # the same word, and no distance
        assert route is None
        if word == "straight":
            assert distance is None
        else:
            assert distance == pytest.approx(max(branch.node_arc_m - arc_m, 0.0), abs=1e-6)
            assert distance <= 50.0


def test_the_route_ahead_is_the_routes_shape_in_its_own_frame_wherever_the_ego_stands():
    # `branch_route`: the word of `branch` and the route's points 10..40 m on from its vertex nearest the ego,
    # in the route's frame there, so a lane change or a drift off the centreline does not move them.
    scene, branch, arc = _turning_intersection()
    route = scene.route_map
    for index in range(0, len(route) - 30, 7):
        told = navigation(scene, route[index], "branch_route")
        assert told[:2] == navigation(scene, route[index], "branch")[:2]
        along = route[index + 1] - route[index]
        heading = np.arctan2(along[1], along[0])
        points = [np.interp(arc[index] + np.asarray(ROUTE_AHEAD_ARC_M), arc, route[:, k]) for k in (0, 1)]
        expected = map_to_ego(np.stack(points, axis=1), route[index], heading)
        np.testing.assert_allclose(told.route_ahead_m, expected, atol=1e-9)
        assert np.all(np.diff(np.linalg.norm(expected, axis=1)) > 0)  # ever further along
        side = route[index] + 1.5 * np.array([-np.sin(heading), np.cos(heading)])  # 1.5 m to the left
        np.testing.assert_allclose(navigation(scene, side, "branch_route").route_ahead_m, expected, atol=1e-9)
    # the turn shows: somewhere before the junction the route's 40 m point is well to the side the word says
    ends = [navigation(scene, xy, "branch_route").route_ahead_m[-1, 1] for xy in route[:-30]]
    assert max(ends) > 10.0 if branch.command == "left" else min(ends) < -10.0


@pytest.mark.parametrize(
    ("position", "expected"),
    [
        ((0.5, -1.0), [[10.0, 0.0], [10.0, 10.0], [10.0, 20.0], [10.0, 30.0]]),  # round the corner, then on
        ((10.5, 9.0), [[10.0, 0.0], [20.0, 0.0], [30.0, 0.0], [40.0, 0.0]]),  # heading north
        ((11.0, 25.0), [[10.0, 0.0], [20.0, 0.0], [30.0, 0.0], [40.0, 0.0]]),  # 5 m past the end
    ],
    ids=["at-the-start", "after-the-corner", "past-its-end"],
)
def test_the_route_ahead_turns_with_the_route_and_goes_on_straight_past_its_end(position, expected):
    route = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [10.0, 20.0]])  # east 10 m, then north 20 m
    np.testing.assert_allclose(route_ahead(route, np.array(position)), expected, atol=1e-9)


def test_an_unknown_command_rule_is_refused():
    with pytest.raises(InputError, match="command rule"):
        navigation_command(make_scene(0, "highway"), np.zeros(2), "compass")


def test_expert_waypoints_are_the_ego_positions_the_simulator_reaches():
    scene = make_scene(1, "highway")
    log = record_drive(scene, 7.0)
    index = sample_indices(log, 10)[0]
    replay = make_scene(1, "highway")  # same seed: the same drive, read straight from highway-env
    positions_map = []
    for tick in range(1, index + HORIZON_TICKS + 1):
        replay.step()
        if tick > index and (tick - index) % TICKS_PER_WAYPOINT == 0:
            positions_map.append([replay.ego.position[0], -replay.ego.position[1]])
    truth = ground_truth(log, index, scene, render_front(CAMERA, scene.lanes, log[index]))
    ego = log[index].ego
    np.testing.assert_allclose(truth.waypoints_ego, map_to_ego(np.array(positions_map), ego.xy, ego.yaw_rad))
    assert truth.waypoints_ego[-1, 0] > 10.0  # forward is +x


def test_turn_commands_agree_with_the_side_the_expert_turns_to():
    turns = []  # (command, lateral offset at 4 s) where the expert has clearly turned within the horizon
    for seed in range(40):
        scene = make_scene(seed, "intersection")
        log = record_drive(scene, 9.0)
        for index in sample_indices(log, 5):
            truth = ground_truth(log, index, scene, render_front(CAMERA, scene.lanes, log[index]))
            if truth.command != "straight" and abs(truth.waypoints_ego[-1, 1]) > 3.0:
                turns.append((truth.command, truth.waypoints_ego[-1, 1]))
        if len({c for c, _ in turns}) == 2:
            break
    assert {c for c, _ in turns} == {"left", "right"}
    for command, final_y_m in turns:
        assert (final_y_m > 0) == (command == "left"), (command, final_y_m)


def test_samples_never_see_a_crash_in_their_horizon():
    log = record_drive(make_scene(4, "highway"), 7.0)
    crashed = [*log[:-1], dataclasses.replace(log[-1], ego_crashed=True)]
    assert sample_indices(crashed, 1)[-1] + HORIZON_TICKS < len(crashed) - 1
    assert sample_indices(log, 1)[-1] + HORIZON_TICKS == len(log) - 1


def test_boxes_agents_and_qa_agree_with_the_scene():
    scene = make_scene(12, "highway")  # dense multi-lane traffic
    log = record_drive(scene, 6.0)
    index = sample_indices(log, 10)[0]
    frame = render_front(CAMERA, scene.lanes, log[index])
    truth = ground_truth(log, index, scene, frame)
    assert len(truth.boxes_px) > 0 and truth.labels == ("car",) * len(truth.boxes_px)
    assert (truth.boxes_px[:, 2] > truth.boxes_px[:, 0]).all() and (truth.boxes_px[:, 2] <= 320).all()
    qa = dict(truth.qa)
    assert qa["How many vehicles are clearly visible in the image?"] == str(len(truth.boxes_px))
    current = truth.agents.current_ego
    ahead = ((current[:, 0] > 0) & (current[:, 0] < 30) & (np.abs(current[:, 1]) < 1.8)).any()
    assert qa["Is there a vehicle ahead in the ego lane within 30 meters? Answer yes or no."] == (
        "yes" if ahead else "no"
    )
    assert truth.agents.poses_ego.shape == (len(log[index].agents), 8, 3)
    assert any(p[:, 0].min() < 0 < p[:, 0].max() for p in truth.drivable_ego)  # a lane runs under the ego
