"""Token automata for the planning and detection answers, and their block-wise constraint.

``TokenGrammar`` compiles a character-level automaton (a subclass gives its alphabet, start state, step
function and where ``<|im_end|>`` may come) over a tokenizer's vocabulary into dense transition tables, so
that multi-character vocabulary tokens (``,-``, ``"},``, `` [``) are allowed wherever their characters fit.
Block diffusion commits tokens out of order, so the allowed set of a masked position is computed over every
way of filling the other masked positions of the block: a forward pass of reachable states, a backward pass
of states that can still finish within the token budget, and their meeting point per position.

``PlanningGrammar``: ``x1,y1,...,x8,y8<|im_end|>``. Each number is ``-?(0|[1-9][0-9]*)\\.[0-9][0-9]`` with
|value| <= k * max_step_m for waypoint k (k = 1..8); with ``min_int_digits=2`` (the padded style,
``model/prompt.py``) ``-?([0-9][0-9]|[1-9][0-9][0-9]+)\\.[0-9][0-9]``. Numbers are separated by ``,`` and the
16th is followed by ``<|im_end|>``.

``DetectionGrammar``: Qwen3-VL grounding JSON exactly as ``json.dumps`` writes it (``sim/export.py``), ``[]``
or ``[{"bbox_2d": [x1, y1, x2, y2], "label": "car"}, ...]``, integers 0..coord_max without leading zeros,
labels from a given list, any number of items (the token budget bounds how many), then ``<|im_end|>``. Box
order (x1 <= x2) is not enforced: the automaton would have to remember numbers.

After ``<|im_end|>`` a planning answer takes only ``<|im_end|>``, a detection answer any of its tokens (they
are cut off; ``TokenGrammar.free_after_end``). QA answers are not constrained.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.prompt import NUM_WAYPOINTS

NUM_VALUES = 2 * NUM_WAYPOINTS
ANSWER_CHARS = frozenset("0123456789.,-")
DIGITS = frozenset("0123456789")
DONE = "done"
NORM_MAX = 1000  # Qwen3-VL writes boxes on a 0..1000 scale of the image (model/parse.py's norm1000 frame)
# Byte-level BPE (GPT-2, Qwen) spells a space "Ġ" (byte 0x20 -> U+0120); printable ASCII stands for itself.
_BYTE_LEVEL_SPACE = "\u0120"
_CATEGORIES = re.compile(r"following categories: (.+?)\.(?:\s|$)")

State = Hashable


def _compare(digit: str, reference: str) -> str:
    return "lt" if digit < reference else ("eq" if digit == reference else "gt")


def token_strings(
    tokenizer: PreTrainedTokenizerBase, alphabet: frozenset[str], vocab_ids: Iterable[int] | None = None
) -> dict[int, str]:
    """Text of every ordinary vocabulary token written only in ``alphabet`` (printable ASCII and space).

    Args:
        tokenizer: a byte-level BPE tokenizer (Qwen's).
        alphabet: the characters a token may hold.
        vocab_ids: if given, only these ids are considered (a reduced-vocabulary model emits no others).

    Returns:
        ``{token_id: text}``; added and special tokens are left out.
    """
    spelled = {_BYTE_LEVEL_SPACE if char == " " else char for char in alphabet}
    allowed = None if vocab_ids is None else set(vocab_ids)
    special = set(tokenizer.added_tokens_decoder)
    return {
        token_id: token.replace(_BYTE_LEVEL_SPACE, " ")
        for token, token_id in tokenizer.get_vocab().items()
        if token
        and set(token) <= spelled
        and token_id not in special
        and (allowed is None or token_id in allowed)
    }


class TokenGrammar:
    """A character automaton compiled over a vocabulary into dense tables; the subclass names the language.

    A subclass sets ``alphabet`` and implements ``_start``, ``_step_char`` (the next state after one
    character, or None when no valid answer has that prefix) and ``_can_end`` (``<|im_end|>`` may follow),
    then calls ``_compile``. Every state a valid prefix reaches must be able to finish with some characters.

    Attributes:
        eos_id: the ``<|im_end|>`` id.
        token_ids: (G,) int64 vocabulary ids that fit somewhere, ``<|im_end|>`` included (the columns the
            decoders score).
        token_text: text of each of those tokens.
        num_states, start_state, done_state: automaton size, its start and the state after ``<|im_end|>``.
    """

    alphabet: frozenset[str] = frozenset()
    # After <|im_end|>: only <|im_end|> (False), or any grammar token (True; every decoder cuts the answer at
    # its first <|im_end|>). Block diffusion commits far positions before near ones: with True, a confident
    # token committed past where the answer could end does not force the answer to go on up to it.
    free_after_end = False

    def _start(self) -> State:
        raise NotImplementedError

    def _step_char(self, state: State, char: str) -> State | None:
        raise NotImplementedError

    def _can_end(self, state: State) -> bool:
        raise NotImplementedError

    def _compile(
        self, tokenizer: PreTrainedTokenizerBase, eos_id: int, vocab_ids: Iterable[int] | None = None
    ) -> None:
        """Breadth-first over states x tokens, then the next-state table and the distance to DONE.

        Raises:
            InputError: ``vocab_ids`` leaves out ``<|im_end|>``.
        """
        if vocab_ids is not None:
            vocab_ids = set(vocab_ids)
            if eos_id not in vocab_ids:
                raise InputError(f"the grammar's vocabulary must hold <|im_end|> ({eos_id})")
        self.eos_id = eos_id
        strings = token_strings(tokenizer, self.alphabet, vocab_ids)
        trie: dict = {}
        for token_id, text in strings.items():
            node = trie
            for char in text:
                node = node.setdefault(char, {})
            node[""] = token_id  # "" is never a character: it marks the end of a token
        start = self._start()
        index_of = {start: 0}
        order = [start]
        edges: dict[tuple[int, int], int] = {}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            # Token order, then <|im_end|>: the states are numbered as they are first met in that order.
            for token_id, nxt in [*sorted(self._token_steps(state, trie)), *self._eos_step(state)]:
                if nxt not in index_of:
                    index_of[nxt] = len(order)
                    order.append(nxt)
                    queue.append(nxt)
                edges[(index_of[state], token_id)] = index_of[nxt]
        if DONE not in index_of:
            raise InputError("no answer of the grammar can be written with this vocabulary")
        used = sorted({token_id for _, token_id in edges})  # tokens that fit somewhere (e.g. not ".-")
        if self.free_after_end:
            for token_id in used:
                edges[(index_of[DONE], token_id)] = index_of[DONE]
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
        self.next_table = table  # (S + 1, G) next state after each grammar token; S is the dead sink
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
        self.distance_to_done = distance  # (S + 1,) fewest tokens to DONE; 2^30 where it is out of reach
        self._distance_np = distance.numpy()

    def _eos_step(self, state: State) -> list[tuple[int, State]]:
        return [(self.eos_id, DONE)] if state == DONE or self._can_end(state) else []

    def _token_steps(self, state: State, trie: dict) -> list[tuple[int, State]]:
        """(token id, next state) of every vocabulary token that fits at ``state``: a walk down the token
        trie that stops at the first character the automaton refuses (most of the vocabulary, at once)."""
        if state == DONE:
            return []
        steps = []
        stack = [(trie, state)]
        while stack:
            node, current = stack.pop()
            for char, child in node.items():
                if char == "":
                    continue
                nxt = self._step_char(current, char)
                if nxt is None:
                    continue
                if "" in child:
                    steps.append((child[""], nxt))
                stack.append((child, nxt))
        return steps

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

    def _columns(self, block: torch.Tensor, masked: torch.Tensor) -> list[int]:
        """Column of each block position's committed token; -1 where masked, -2 for a token outside the
        grammar."""
        block_list, masked_list = block.tolist(), masked.tolist()
        return [-1 if m else self._column.get(t, -2) for t, m in zip(block_list, masked_list, strict=True)]

    # numpy, not torch, in both passes: these are ~200-element vectors, where torch's per-op overhead
    # dominates; a committed position gathers one column of the table, a masked one all of them.
    def _forward(self, state: int, cols: list[int]) -> np.ndarray:
        """(B + 1, S + 1) bool: the states reachable before each block position (and after the last)."""
        nxt, sink = self._next_np, self.num_states
        forward = np.zeros((len(cols) + 1, sink + 1), dtype=bool)
        forward[0, state] = True
        for j, col in enumerate(cols):
            if col == -1:
                forward[j + 1, nxt[forward[j]].reshape(-1)] = True
            elif col >= 0:
                forward[j + 1, nxt[forward[j], col]] = True
            forward[j + 1, sink] = False
        return forward

    def _backward(self, cols: list[int], limit: int, tokens_after: int) -> np.ndarray:
        """(B + 1, S + 1) bool: the states before each block position from which the answer can still end
        within the budget."""
        nxt, sink = self._next_np, self.num_states
        size = len(cols)
        backward = np.zeros((size + 1, sink + 1), dtype=bool)
        backward[size] = self._distance_np <= tokens_after
        for j in range(size - 1, -1, -1):
            col = cols[j]
            if col == -1:  # does some token from state s lead to a finishing state
                backward[j] = backward[j + 1][nxt].any(-1)
            elif col >= 0:
                backward[j] = backward[j + 1][nxt[:, col]]
            if j >= limit:
                backward[j] &= self._is_done  # past max_new_tokens the answer must already be over
            backward[j, sink] = False
        return backward

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
        cols = self._columns(block, masked)
        forward, backward = self._forward(state, cols), self._backward(cols, limit, tokens_after)
        allowed = np.zeros((block.shape[0], self._next_np.shape[1]), dtype=bool)
        for j in masked.nonzero().squeeze(-1).tolist():  # the few states reachable at j, all their moves
            allowed[j] = backward[j + 1][self._next_np[forward[j]]].any(0)
        return torch.from_numpy(allowed)

    def block_feasible(
        self, state: int, block: torch.Tensor, masked: torch.Tensor, limit: int, tokens_after: int
    ) -> bool:
        """True when the block's committed tokens (after ``state``) still admit a valid answer."""
        return bool(self._backward(self._columns(block, masked), limit, tokens_after)[0, state])


@dataclass(frozen=True)
class _Bound:
    """|value| <= int_max + frac_max / 100, as digit strings for the digit-by-digit comparison, and the
    fewest integer digits a number writes (1 plain, 2 padded; ``int_max`` is zero-filled to that width)."""

    int_max: str
    frac_max: str  # two digits
    min_int_digits: int = 1


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


class PlanningGrammar(TokenGrammar):
    """The planning-answer automaton over a tokenizer's vocabulary, as dense transition tables.

    Args:
        tokenizer: the Qwen tokenizer (its vocabulary decides which multi-character tokens exist).
        eos_id: the ``<|im_end|>`` id.
        max_step_m: waypoint k is bounded by k * max_step_m on each axis.
        min_int_digits: 1 for plain numbers (``5.00``), 2 for the padded style (``05.00``).
        vocab_ids: the ids the model can emit (a reduced vocabulary, ``model/vocab.py``); None: all.
    """

    alphabet = ANSWER_CHARS

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        eos_id: int,
        max_step_m: float = 20.0,
        min_int_digits: int = 1,
        *,
        vocab_ids: Iterable[int] | None = None,
    ) -> None:
        self.max_step_m = max_step_m
        self.min_int_digits = min_int_digits
        self._bounds = []
        for index in range(NUM_VALUES):
            hundredths = round((index // 2 + 1) * max_step_m * 100)
            int_max = str(hundredths // 100).zfill(min_int_digits)
            self._bounds.append(_Bound(int_max, f"{hundredths % 100:02d}", min_int_digits))
        self._compile(tokenizer, eos_id, vocab_ids)

    def _start(self) -> State:
        return (0, ("start",))

    def _step_char(self, state: State, char: str) -> State | None:
        index, sub = state
        if sub == ("end",) and char == "," and index + 1 < NUM_VALUES:
            return (index + 1, ("start",))
        nxt = _step_number(sub, char, self._bounds[index])
        return None if nxt is None else (index, nxt)

    def _can_end(self, state: State) -> bool:
        return state == (NUM_VALUES - 1, ("end",))


def _step_integer(sub: tuple, char: str, max_digits: str) -> tuple | None:
    """Next sub-state of a non-negative integer <= ``int(max_digits)`` without leading zeros, or None."""
    if char not in DIGITS:
        return None
    if not sub:  # no digit yet
        if char == "0":
            return ("zero",)
        rel = _compare(char, max_digits[0])
        return ("int", 1, rel) if len(max_digits) > 1 or rel != "gt" else None
    if sub[0] == "zero":
        return None
    _, length, rel = sub
    if length + 1 > len(max_digits):
        return None
    new_rel = _compare(char, max_digits[length]) if rel == "eq" else rel
    # Fewer digits than the bound is always smaller; as many digits must not compare greater.
    return ("int", length + 1, new_rel) if length + 1 < len(max_digits) or new_rel != "gt" else None


_NUMBER, _LABEL = 0, 1  # the non-literal pieces of an item
# One item as json.dumps writes it; the separator ", " between items and the brackets are handled apart.
_ITEM = ('{"bbox_2d": [', _NUMBER, ", ", _NUMBER, ", ", _NUMBER, ", ", _NUMBER, '], "label": ', _LABEL, "}")


class DetectionGrammar(TokenGrammar):
    """The grounding-answer automaton (``json.dumps`` of a list of boxes and labels) over a vocabulary.

    Any grammar token may follow ``<|im_end|>`` (``free_after_end``): with ``<|im_end|>`` only, the bundled
    model's B = 32 decodes on data/eval300 wrote 35 forwards per answer instead of 23 and twice the boxes
    the parser rejects, because digits committed early far into the block kept the answer from closing.

    States: ``("open",)`` before ``[``, ``("list",)`` after it, ``("item", piece, sub)`` inside an item
    (``sub``: characters of a literal piece read, the digits of a number, the label text so far),
    ``("next",)`` after an item's ``}``, ``("sep",)`` after the ``,`` between items, ``("closed",)`` after
    the final ``]``.

    Args:
        tokenizer: the Qwen tokenizer.
        eos_id: the ``<|im_end|>`` id.
        labels: the categories an item may name (the prompt's), written as ``json.dumps`` writes strings.
        coord_max: largest coordinate (1000: Qwen3-VL's relative scale).
        vocab_ids: the ids the model can emit (a reduced vocabulary, ``model/vocab.py``); None: all.

    Raises:
        InputError: no labels, an empty label, or a negative ``coord_max``.
    """

    free_after_end = True

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        eos_id: int,
        labels: Sequence[str] = ("car",),
        coord_max: int = NORM_MAX,
        *,
        vocab_ids: Iterable[int] | None = None,
    ) -> None:
        if isinstance(labels, str) or not labels or not all(isinstance(x, str) and x for x in labels):
            raise InputError(f"the detection grammar needs a list of non-empty labels, got {labels!r}")
        if coord_max < 0:
            raise InputError(f"coord_max must be >= 0, got {coord_max}")
        self.labels = tuple(dict.fromkeys(labels))
        self.coord_max = int(coord_max)
        self._max_digits = str(self.coord_max)
        self._label_texts = frozenset(json.dumps(label) for label in self.labels)  # '"car"'
        # Every prefix of a label's text (a JSON string ends at its first bare quote: none extends another).
        self._label_prefixes = frozenset(text[:n] for text in self._label_texts for n in range(1, len(text)))
        literal = "".join(piece for piece in _ITEM if isinstance(piece, str))
        self.alphabet = frozenset("[]," + literal + "".join(self._label_texts)) | DIGITS
        self._compile(tokenizer, eos_id, vocab_ids)

    def _start(self) -> State:
        return ("open",)

    def _can_end(self, state: State) -> bool:
        return state == ("closed",)

    def _piece_start(self, piece: int) -> State:
        """The state at the start of item piece ``piece`` (past the last piece: after the item)."""
        if piece == len(_ITEM):
            return ("next",)
        kind = _ITEM[piece]
        return ("item", piece, 0 if isinstance(kind, str) else ("" if kind == _LABEL else ()))

    def _step_char(self, state: State, char: str) -> State | None:
        kind = state[0]
        if kind == "open":
            return ("list",) if char == "[" else None
        if kind in ("list", "next") and char == "]":
            return ("closed",)
        if kind == "list":
            return self._step_item(0, 0, char)
        if kind == "next":
            return ("sep",) if char == "," else None
        if kind == "sep":
            return self._piece_start(0) if char == " " else None
        if kind == "item":
            return self._step_item(state[1], state[2], char)
        return None  # closed: only <|im_end|> follows

    def _step_item(self, piece: int, sub: object, char: str) -> State | None:
        kind = _ITEM[piece]
        if isinstance(kind, str):  # a literal; a finished one has already moved on to the next piece
            if char != kind[sub]:
                return None
            return ("item", piece, sub + 1) if sub + 1 < len(kind) else self._piece_start(piece + 1)
        if kind == _NUMBER:
            if char in DIGITS:
                nxt = _step_integer(sub, char, self._max_digits)
                return None if nxt is None else ("item", piece, nxt)
            # A non-digit ends a number that has digits; the next (literal) piece reads it.
            return self._step_item(piece + 1, 0, char) if sub else None
        text = sub + char  # the label
        if text in self._label_texts:
            return self._piece_start(piece + 1)
        return ("item", piece, text) if text in self._label_prefixes else None


def labels_in_prompt(user_text: str) -> tuple[str, ...]:
    """The categories a Qwen3-VL grounding prompt asks for (``...the following categories: car, truck. ...``).

    Raises:
        InputError: the prompt names no categories that way.
    """
    found = _CATEGORIES.search(user_text)
    labels = tuple(label.strip() for label in found.group(1).split(", ")) if found else ()
    if not labels or not all(labels):
        raise InputError(
            "the detection prompt lists no categories ('... the following categories: car. ...'); "
            "give the labels explicitly"
        )
    return labels
