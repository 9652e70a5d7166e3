"""Named QoS profiles of the nodes' topics (explicit, never rclpy's implicit defaults)."""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

# Planner and scorer outputs, and ego state: every message matters, keep a short queue.
RELIABLE = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)


def camera(reliability: str = "best_effort", depth: int = 1) -> QoSProfile:
    """Camera subscription: best effort, depth 1 by default, so a slow consumer only ever sees new frames.

    A best-effort subscriber also connects to reliable publishers (the CARLA bridge publishes reliable).
    Across processes, frames above 512 KiB need a large-data transport (config/fastdds_local_large_data.xml).
    """
    policy = ReliabilityPolicy.BEST_EFFORT if reliability == "best_effort" else ReliabilityPolicy.RELIABLE
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=policy, durability=DurabilityPolicy.VOLATILE
    )


# A latched topic (a route): reliable, the newest message kept for subscribers that come later. A
# transient-local subscriber hears no volatile publisher, and a volatile one misses what came before it.
LATCHED = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)


def route(durability: str = "transient_local") -> QoSProfile:
    """Route subscription: ``LATCHED`` by default, so a route published once before the node started (the
    CARLA bridge's waypoints are latched) still arrives; ``volatile`` for volatile publishers."""
    if durability == "transient_local":
        return LATCHED
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=1,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.VOLATILE,
    )
