"""Commit (remasking) rules: which masked positions of a block take their x0 at a step.

A rule is a ``CommitRule`` in the registry: one module per rule, registered by name with ``@register``, so a
new rule is one new file (imported below) and one test. Everything that names rules (``DecodeConfig``
validation, the training config, the node's ``decoder.commit_rule`` choices, ``wamdiff2 plan``) reads
``names()``; the decoders call ``get(name)``.

Reference: modeling_wam_diff2.py:2436-2488 and ``get_num_transfer_tokens`` (:2132-2140).
"""

from __future__ import annotations

from wamdiff2_ros.decoding.commit_rules.base import (
    CommitRule,
    get,
    names,
    register,
    transfer_schedule,
    unregister,
)
from wamdiff2_ros.decoding.commit_rules.low_confidence_dynamic import LowConfidenceDynamic
from wamdiff2_ros.decoding.commit_rules.low_confidence_static import LowConfidenceStatic
from wamdiff2_ros.decoding.commit_rules.sequential import Sequential

__all__ = [
    "CommitRule",
    "LowConfidenceDynamic",
    "LowConfidenceStatic",
    "Sequential",
    "get",
    "names",
    "register",
    "transfer_schedule",
    "unregister",
]
