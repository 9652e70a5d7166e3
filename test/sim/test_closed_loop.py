"""The closed loop: the expert's re-plans, the controller and whole episodes with baseline policies."""

import numpy as np
import pytest

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.eval.baselines import ConstantVelocityPolicy, ExpertPolicy
from wamdiff2_ros.sim.closed_loop import ClosedLoopConfig, run_episode
from wamdiff2_ros.sim.controller import TrajectoryController
from wamdiff2_ros.sim.expert import expert_plan, expert_waypoints
from wamdiff2_ros.sim.scene_types import AgentState
from wamdiff2_ros.sim.scenes import make_scene

CONFIG = ClosedLoopConfig(route_length_m=100.0, max_duration_s=20.0)
TURNING_JUNCTION_SEED = 5  # the expert turns at the intersection
QUIET_HIGHWAY_SEED = 7  # empty road
STOPPED_CAR_SEED = 1  # a stopped car in the ego lane of a two-lane highway


@pytest.mark.parametrize(("seed", "kind"), [(2, "intersection"), (6, "highway")])
def test_expert_replan_equals_the_data_experts_realised_future(seed, kind):
    scene = make_scene(seed, kind)
    for _ in range(10):
        scene.step()
    plan = expert_plan(scene)
    log = [scene.snapshot()]
    for _ in range(40):
        scene.step()
        log.append(scene.snapshot())
    # Within a millimetre: the live scene drops traffic beyond 200 m, the rollout copy keeps it.
    np.testing.assert_allclose(plan, expert_waypoints(log, 0), atol=1e-3)


def test_controller_steers_towards_a_left_plan_and_brakes_for_a_short_one():
    ego = AgentState(0, 0.0, 0.0, 0.0, 10.0, 5.0, 2.0)
    controller = TrajectoryController()
    t_s = np.arange(1, 9) * 0.5
    controller.set_plan(np.stack([10 * t_s, 0.1 * (10 * t_s) ** 2 / 10], axis=1), ego, 0.0)
    steering_rad, accel_mps2 = controller.control(ego, 0.0)
    assert steering_rad > 0.0 and abs(accel_mps2) < 1.0
    controller.set_plan(np.stack([2 * t_s, np.zeros(8)], axis=1), ego, 0.0)  # slow to 2 m/s
    assert controller.control(ego, 0.0)[1] < -5.0


@pytest.mark.parametrize(
    ("seed", "kind"), [(TURNING_JUNCTION_SEED, "intersection"), (STOPPED_CAR_SEED, "highway")]
)
def test_expert_completes_its_route_without_infractions(seed, kind):
    result = run_episode(seed, ExpertPolicy, CONFIG, kind)
    assert result.end_reason == "completed" and result.route_completion == 1.0
    assert result.collisions == 0 and result.off_road_events == 0


def test_constant_velocity_misses_the_turn():
    result = run_episode(
        TURNING_JUNCTION_SEED, lambda scene: ConstantVelocityPolicy(), CONFIG, "intersection"
    )
    assert result.end_reason in ("route_deviation", "collision") and result.route_completion < 0.7


def test_episodes_are_deterministic():
    first = run_episode(QUIET_HIGHWAY_SEED, ExpertPolicy, CONFIG, "highway")
    second = run_episode(QUIET_HIGHWAY_SEED, ExpertPolicy, CONFIG, "highway")
    np.testing.assert_array_equal(first.ego_path_map, second.ego_path_map)


class _BrokenPolicy:
    needs_image = True
    command_rule = "branch"

    def __call__(self, observation):
        assert observation.image_rgb.shape == (
            CONFIG.camera.intrinsics.height_px,
            CONFIG.camera.intrinsics.width_px,
            3,
        )
        return np.zeros((7, 2))


def test_a_policy_gets_the_image_and_a_malformed_plan_is_refused():
    with pytest.raises(InputError, match=r"finite \(8, 2\) array"):
        run_episode(QUIET_HIGHWAY_SEED, lambda scene: _BrokenPolicy(), CONFIG, "highway")


class _StandStill:
    needs_image = False
    command_rule = "branch"

    def __call__(self, observation):
        return np.zeros((8, 2))  # every waypoint where the ego is: brake and stay


def test_a_policy_that_stops_stalls_and_the_episode_says_so():
    from wamdiff2_ros.eval.closed_loop import failure_mode

    short = ClosedLoopConfig(route_length_m=100.0, max_duration_s=10.0)  # brakes in ~3.6 s, then stands
    result = run_episode(QUIET_HIGHWAY_SEED, lambda scene: _StandStill(), short, "highway")
    assert result.end_reason == "timeout" and result.standstill_s >= 5.0
    assert result.collision_heading_deg is None and failure_mode(result) == "stall"
