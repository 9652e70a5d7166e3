"""The commit-rule protocol, its registry, and the pieces the built-in rules share (pure tensor functions)."""

from __future__ import annotations

from typing import ClassVar

import torch

from wamdiff2_ros.errors import InputError

_REGISTRY: dict[str, CommitRule] = {}


class CommitRule:
    """A commit rule: how many steps a block takes, which masked positions a step commits, in which order.

    A subclass sets ``name`` and implements ``select``; ``schedule`` and ``priority`` have the defaults of a
    confidence-ordered rule that commits until the block is done.
    """

    name: ClassVar[str] = ""

    def schedule(self, block_size: int, steps: int) -> list[int] | None:
        """Tokens committed at each step (the block ends after ``len`` steps), or None: commit until the
        block is done, at most ``steps`` steps (a dynamic rule)."""
        return None

    def select(
        self, confidence: torch.Tensor, masked: torch.Tensor, threshold: float, count: int | None
    ) -> torch.Tensor:
        """(K, B) bool positions to commit this step.

        Args:
            confidence: (K, B) probability of each position's x0.
            masked: (K, B) bool, positions still masked (only these may be committed).
            threshold: the config's confidence threshold (rules that use one).
            count: this step's entry of ``schedule`` (None for a dynamic rule).
        """
        raise NotImplementedError

    def priority(self, confidence: torch.Tensor) -> torch.Tensor:
        """(K, B) score whose descending order is the rule's preference among positions (the grammar's commit
        repair keeps the longest feasible prefix of it)."""
        return confidence


def register(rule: type[CommitRule]) -> type[CommitRule]:
    """Class decorator: make ``rule`` known by its ``name``.

    Raises:
        InputError: no name, or the name is taken.
    """
    if not rule.name or rule.name in _REGISTRY:
        raise InputError(f"a commit rule needs a new, non-empty name, got {rule.name!r}")
    _REGISTRY[rule.name] = rule()
    return rule


def unregister(name: str) -> None:
    """Forget the rule ``name`` (a plugin's or a test's; unknown names are ignored)."""
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """The registered rule names, the default (``low_confidence_dynamic``) first."""
    return tuple(_REGISTRY)


def get(name: str) -> CommitRule:
    """The rule called ``name``.

    Raises:
        InputError: no such rule.
    """
    if name not in _REGISTRY:
        raise InputError(f"commit_rule must be one of {names()}, got {name!r}")
    return _REGISTRY[name]


def transfer_schedule(block_size: int, steps: int) -> list[int]:
    """Tokens to commit at each step so that a block of B finishes in exactly ``min(steps, B)`` steps.

    An even split; the first ``B mod steps`` steps take one more (reference ``get_num_transfer_tokens``).
    """
    steps = min(steps, block_size)
    base, extra = divmod(block_size, steps)
    return [base + (1 if step < extra else 0) for step in range(steps)]


def top_k_masked(score: torch.Tensor, masked: torch.Tensor, count: int) -> torch.Tensor:
    """(K, B) the ``count`` highest-``score`` masked positions of each row (fewer if fewer remain)."""
    # Unmasked positions score -inf so they are never chosen; ties go to the lower index (stable sort).
    score = score.masked_fill(~masked, float("-inf"))
    order = torch.sort(score, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(score.shape[-1], device=score.device).expand_as(order))
    limit = masked.sum(-1, keepdim=True).clamp_max(count)  # no host-made tensor: safe in a CUDA graph
    return (rank < limit) & masked
