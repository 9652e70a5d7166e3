"""Policy factories that cross to spawned worker processes (test modules, imported by path, cannot)."""

from __future__ import annotations

from wamdiff2_ros.eval.baselines import ConstantVelocityPolicy


def constant_velocity(scene) -> ConstantVelocityPolicy:
    return ConstantVelocityPolicy()


def constant_velocity_factory():
    return constant_velocity
