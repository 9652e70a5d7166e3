"""Token automaton for the planning answer ``x1,y1,...,x8,y8<|im_end|>`` and its block-wise constraint.

Each number is ``-?(0|[1-9][0-9]*)\\.[0-9][0-9]`` with |value| <= k * max_step_m for waypoint k (k = 1..8);
with ``min_int_digits=2`` (the padded style, ``model/prompt.py``)
``-?([0-9][0-9]|[1-9][0-9][0-9]+)\\.[0-9][0-9]``.
Numbers are separated by ``,`` and the 16th is followed by ``<|im_end|>``, then only ``<|im_end|>``. The
automaton runs over characters, so multi-character vocabulary tokens (``,-`` is one Qwen token) are allowed
wherever their characters fit. Block diffusion commits tokens out of order, so the allowed set of a masked
position is computed over every way of filling the other masked positions of the block: a forward pass of
reachable states, a backward pass of states that can still finish within the token budget, and their
meeting point per position. Detection and QA answers are not constrained.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from wamdiff2_ros.model.prompt import NUM_WAYPOINTS

NUM_VALUES = 2 * NUM_WAYPOINTS
ANSWER_CHARS = frozenset("0123456789.,-")
DONE = "done"


@dataclass(frozen=True)
class _Bound:
    """|value| <= int_max + frac_max / 100, as digit strings for the digit-by-digit comparison, and the
    fewest integer digits a number writes (1 plain, 2 padded; ``int_max`` is zero-filled to that width)."""

    int_max: str
    frac_max: str  # two digits
    min_int_digits: int = 1


def _compare(digit: str, reference: str) -> str:
    return "lt" if digit < reference else ("eq" if digit == reference else "gt")


def _step_number(sub: tuple, char: str, bound: _Bound) -> tuple | None:
    """Next sub-state of one number after ``char``, or None when no bounded number can follow."""
    kind = sub[0]
    width = len(bound.int_max)
    padded = bound.min_int_digits > 1
    if kind in ("start", "neg") and char.isdigit():
        if char == "0" and not padded:
            return ("zero",)
        rel = _compare(char, bound.int_max[0])
        # A padded leading zero ("05") takes exactly min_int_digits digits (no "005").
        return ("int", 1, rel, char == "0") if (width > 1 or rel != "gt") else None
    if kind == "start" and char == "-":
        return ("neg",)
    if kind == "int" and char.isdigit():
        _, length, rel, leading_zero = sub
        if length + 1 > width or (leading_zero and length + 1 > bound.min_int_digits):
            return None
        new_rel = _compare(char, bound.int_max[length]) if rel == "eq" else rel
        # Fewer digits than the bound is always smaller; as many digits must not compare greater.
        ok = length + 1 < width or new_rel != "gt"
        return ("int", length + 1, new_rel, leading_zero) if ok else None
    if kind == "int" and char == ".":
        _, length, rel, _ = sub
        return ("dot", length == width and rel == "eq") if length >= bound.min_int_digits else None
    if kind == "zero" and char == ".":
        return ("dot", bound.int_max == "0")
    if kind == "dot" and char.isdigit():
        tight = sub[1]
        if tight and char > bound.frac_max[0]:
            return None
        return ("frac1", tight and char == bound.frac_max[0])
    if kind == "frac1" and char.isdigit():
        if sub[1] and char > bound.frac_max[1]:
            return None
        return ("end",)
    return None


class PlanningGrammar:
    """The planning-answer automaton over a tokenizer's vocabulary, as dense transition tables.

    Args:
        tokenizer: the Qwen tokenizer (its vocabulary decides which multi-character tokens exist).
        eos_id: the ``<|im_end|>`` id.
        max_step_m: waypoint k is bounded by k * max_step_m on each axis.
        min_int_digits: 1 for plain numbers (``5.00``), 2 for the padded style (``05.00``).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        eos_id: int,
        max_step_m: float = 20.0,
        min_int_digits: int = 1,
    ) -> None:
        self.eos_id = eos_id
        self.max_step_m = max_step_m
        self.min_int_digits = min_int_digits
        self._bounds = []
        for index in range(NUM_VALUES):
            hundredths = round((index // 2 + 1) * max_step_m * 100)
            int_max = str(hundredths // 100).zfill(min_int_digits)
            self._bounds.append(_Bound(int_max, f"{hundredths % 100:02d}", min_int_digits))
        strings = {
            token_id: token
            for token, token_id in tokenizer.get_vocab().items()
            if token and set(token) <= ANSWER_CHARS
        }
        self._build(strings)

    def _advance_chars(self, state: tuple | str, text: str) -> tuple | str | None:
        for char in text:
            if state == DONE:
                return None
            index, sub = state
            if sub == ("end",) and char == "," and index + 1 < NUM_VALUES:
                state = (index + 1, ("start",))
                continue
            nxt = _step_number(sub, char, self._bounds[index])
            if nxt is None:
                return None
            state = (index, nxt)
        return state

    def _step(self, state: tuple | str, token_id: int, strings: dict[int, str]) -> tuple | str | None:
        if token_id == self.eos_id:
            return DONE if state == DONE or state == (NUM_VALUES - 1, ("end",)) else None
        return self._advance_chars(state, strings[token_id])

    def _build(self, strings: dict[int, str]) -> None:
        start = (0, ("start",))
        candidates = [*sorted(strings), self.eos_id]
        index_of = {start: 0}
        order = [start]
        edges: dict[tuple[int, int], int] = {}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            for token_id in candidates:
                nxt = self._step(state, token_id, strings)
                if nxt is None:
                    continue
                if nxt not in index_of:
                    index_of[nxt] = len(order)
                    order.append(nxt)
                    queue.append(nxt)
                edges[(index_of[state], token_id)] = index_of[nxt]
        used = sorted({token_id for _, token_id in edges})  # tokens that fit somewhere (e.g. not ".-")
        num_states = len(order)
        self.num_states = num_states
        self.states = order
        self.start_state = 0
        self.done_state = index_of[DONE]
        self.token_ids = torch.tensor(used, dtype=torch.int64)  # (G,) vocabulary ids of grammar tokens
        self.token_text = {token_id: strings.get(token_id, "<|im_end|>") for token_id in used}
        column = {token_id: col for col, token_id in enumerate(used)}
        self._column = column
        # (S + 1, G) next state; row/entry S is a dead sink so that gathers need no special case.
        table = torch.full((num_states + 1, len(used)), num_states, dtype=torch.int64)
        for (state, token_id), nxt in edges.items():
            table[state, column[token_id]] = nxt
        self._next_np = table.numpy()
        self._is_done = np.zeros(num_states + 1, dtype=bool)
        self._is_done[self.done_state] = True
        # Fewest tokens from each state to DONE (breadth-first over reversed edges).
        distance = torch.full((num_states + 1,), 1 << 30, dtype=torch.int64)
        reverse: dict[int, list[int]] = {}
        for (state, _), nxt in edges.items():
            reverse.setdefault(nxt, []).append(state)
        distance[self.done_state] = 0
        queue = deque([self.done_state])
        while queue:
            state = queue.popleft()
            for previous in reverse.get(state, []):
                if distance[previous] > distance[state] + 1:
                    distance[previous] = distance[state] + 1
                    queue.append(previous)
        self._distance = distance
        self._distance_np = distance.numpy()

    def min_tokens(self, state: int | None = None) -> int:
        """Fewest tokens that complete the answer from ``state`` (the start by default), EOS included."""
        return int(self._distance[self.start_state if state is None else state])

    def advance(self, state: int, token_ids: list[int]) -> int | None:
        """State after committed tokens, or None if they leave the grammar."""
        for token_id in token_ids:
            col = self._column.get(int(token_id))
            if col is None:
                return None
            state = int(self._next_np[state, col])
            if state == self.num_states:
                return None
        return state

    def _passes(
        self, state: int, block: torch.Tensor, masked: torch.Tensor, limit: int, tokens_after: int
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Forward (reachable) and backward (can still finish) state sets around every block position."""
        # numpy, not torch: these are ~200-element vectors, where torch's per-op overhead dominates.
        nxt = self._next_np
        sink = self.num_states
        size = block.shape[0]
        block_list, masked_list = block.tolist(), masked.tolist()
        # Column of each committed token; -1 for masked positions, -2 for a token outside the grammar.
        cols = [-1 if masked_list[j] else self._column.get(block_list[j], -2) for j in range(size)]
        forward = [np.zeros(sink + 1, dtype=bool) for _ in range(size + 1)]
        forward[0][state] = True
        for j in range(size):
            rows = nxt[forward[j]]  # (|F_j|, G) successor states
            if cols[j] == -1:
                forward[j + 1][rows.reshape(-1)] = True
            elif cols[j] >= 0:
                forward[j + 1][rows[:, cols[j]]] = True
            forward[j + 1][sink] = False
        backward = [np.zeros(sink + 1, dtype=bool) for _ in range(size + 1)]
        backward[size] = self._distance_np <= tokens_after
        for j in range(size - 1, -1, -1):
            reach = backward[j + 1][nxt]  # (S + 1, G): does token g from state s lead to a finishing state
            if cols[j] == -1:
                backward[j] = reach.any(-1)
            elif cols[j] >= 0:
                backward[j] = reach[:, cols[j]].copy()
            if j >= limit:
                backward[j] &= self._is_done  # past max_new_tokens the answer must already be over
            backward[j][sink] = False
        return forward, backward

    def block_allowed(
        self,
        state: int,
        block: torch.Tensor,
        masked: torch.Tensor,
        limit: int,
        tokens_after: int,
    ) -> torch.Tensor:
        """Grammar tokens each masked position of a block may take with the answer still completable.

        Args:
            state: automaton state before the block (all earlier tokens committed).
            block: (B,) token ids; entries at masked positions are ignored.
            masked: (B,) bool, positions not yet committed.
            limit: positions ``>= limit`` lie past max_new_tokens: the answer must be over (only EOS) there.
            tokens_after: answer tokens still available after this block (0 for the last one).

        Returns:
            (B, G) bool over ``token_ids``; rows of committed positions are all False. Each allowed token
            has a completion of all the other masked positions that ends in a valid answer within the budget.
        """
        forward, backward = self._passes(state, block, masked, limit, tokens_after)
        allowed = np.zeros((block.shape[0], self._next_np.shape[1]), dtype=bool)
        for j in masked.nonzero().squeeze(-1).tolist():
            allowed[j] = backward[j + 1][self._next_np[forward[j]]].any(0)
        return torch.from_numpy(allowed)

    def block_feasible(
        self, state: int, block: torch.Tensor, masked: torch.Tensor, limit: int, tokens_after: int
    ) -> bool:
        """True when the block's committed tokens (after ``state``) still admit a valid answer."""
        _, backward = self._passes(state, block, masked, limit, tokens_after)
        return bool(backward[0][state])
