"""The planner node whose model fails its second plan with CUDA's out-of-memory error (a fault test).

Run as a script with the node's ROS arguments. The real CUDA out-of-memory is forced on the H200 at the
Planner (test/decoding/test_planner_memory.py); this shows what the node does with one, on any machine.
"""

from __future__ import annotations

import sys

import torch

from wamdiff2_ros.decoding.planner import Planner
from wamdiff2_ros.nodes import planner as planner_node

FAILING_PLAN = 2
plan, release_memory = Planner.plan, Planner.release_memory
calls = [0]


def failing_plan(self: Planner, inputs):
    calls[0] += 1
    if calls[0] == FAILING_PLAN:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")
    return plan(self, inputs)


def reported_release_memory(self: Planner) -> None:
    print("fault test: release_memory called", flush=True)
    release_memory(self)


Planner.plan = failing_plan
Planner.release_memory = reported_release_memory

if __name__ == "__main__":
    sys.exit(planner_node.main())
