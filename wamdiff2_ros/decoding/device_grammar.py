"""An answer grammar as device tables, and its block-wise constraint in batched tensor ops with no host sync.

What ``grammar.TokenGrammar`` (numpy, one row at a time) and ``step.py``'s host repair and leftover fill do,
for all K rows at once and with nothing read back, so whole denoising steps replay in CUDA graphs (the
automaton state x token -> next state table, as XGrammar-style engines keep it). State sets are (N, S + 1)
bool rows over the automaton's S states and its dead sink. The host versions are the twins
(test/decoding/test_device_grammar.py).

``limit`` and ``tokens_after`` (where the block sits in the budget, ``step.BlockBudget``) may be 0-dim int64
tensors, so that one captured step serves every block.
"""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding.grammar import TokenGrammar

# Whether CUDA grammars use the Triton kernel by default: on the H200 it is the torch ops' twin (GPU tests)
# and took the fp8 plan's decode from 65.7 to 58.7 ms at K = 4 and 53.0 to 50.5 at K = 1 (bench plan,
# 2026-12-02), though alone, in a graph, it is slower at K = 8 (14.7 against 9.5 us a step).
KERNEL_ON_CUDA = True


class DeviceGrammar:
    """A ``TokenGrammar``'s tables on a device.

    Args:
        grammar: the host grammar (planning or detection).
        device: where the tables live (the model's device).
        mask_id: the mask token id (the largest id a block holds besides grammar tokens).
        kernel: on CUDA, ``allowed`` and ``feasible`` through the Triton kernel (None: ``KERNEL_ON_CUDA``).
    """

    def __init__(
        self, grammar: TokenGrammar, device: torch.device | str, mask_id: int, kernel: bool | None = None
    ) -> None:
        self.grammar = grammar
        self.kernel = KERNEL_ON_CUDA if kernel is None else kernel
        self.next = grammar.next_table.to(device)  # (S + 1, G)
        self.next32 = self.next.to(torch.int32)  # the kernel's copy: half the bytes it gathers
        self.sink = grammar.num_states
        self.num_columns = self.next.shape[1]
        self.token_ids = grammar.token_ids.to(device)  # (G,) column -> vocabulary id
        self.distance = grammar.distance_to_done.to(device)  # (S + 1,)
        self.done_state = grammar.done_state
        states = torch.arange(self.sink + 1, device=device)
        self.live = states != self.sink  # (S + 1,)
        self.is_done = states == self.done_state
        # vocabulary id -> column, -1 for ids outside the grammar (the mask id among them).
        size = max(int(self.token_ids.max()), mask_id) + 2
        self.column_of = torch.full((size,), -1, dtype=torch.int64, device=device)
        self.column_of[self.token_ids] = torch.arange(self.num_columns, device=device)

    def columns(self, tokens: torch.Tensor) -> torch.Tensor:
        """(..., B) vocabulary ids -> grammar columns, -1 outside the grammar."""
        return self.column_of[tokens.clamp(0, self.column_of.shape[0] - 1)]

    def _kernel_inputs(
        self,
        states: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        limit: torch.Tensor | int,
        tokens_after: torch.Tensor | int,
    ) -> tuple[torch.Tensor, ...]:
        # The kernel's tensors: the tables, each position's column and mask, the budget as device scalars.
        device = tokens.device
        limit = torch.as_tensor(limit, dtype=torch.int64, device=device)
        tokens_after = torch.as_tensor(tokens_after, dtype=torch.int64, device=device)
        return (
            self.next32, self.live, self.is_done, self.distance, self.columns(tokens).contiguous(),
            masked.contiguous(), states.contiguous(), limit, tokens_after,
        )  # fmt: skip

    def _token_masks(self, tokens: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """(N, B, G) bool: the tokens each position may hold (all at a masked one, its own at a committed
        one, none for a committed token outside the grammar)."""
        cols = self.columns(tokens)
        own = torch.nn.functional.one_hot(cols.clamp_min(0), self.num_columns).bool() & (cols >= 0)[..., None]
        return own | masked[..., None]

    def _after(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """(N, S + 1) states reachable from the sets ``states`` (N, S + 1) by a token of ``tokens`` (N, G)."""
        moves = (states[:, :, None] & tokens[:, None, :]).reshape(states.shape[0], -1).float()
        index = self.next.reshape(1, -1).expand(states.shape[0], -1)
        reached = torch.zeros(states.shape, dtype=torch.float32, device=states.device).scatter_add_(
            1, index, moves
        )
        return (reached > 0) & self.live

    def _start(self, states: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(states, self.sink + 1).bool() & self.live

    def _backward(
        self, token_masks: torch.Tensor, limit: torch.Tensor | int, tokens_after: torch.Tensor | int
    ) -> list[torch.Tensor]:
        """(N, S + 1) states before each position j = 0..B from which the block can still be completed."""
        size = token_masks.shape[1]
        past = torch.arange(size, device=token_masks.device) >= limit  # past max_new_tokens: only DONE
        finishing = (self.distance <= tokens_after) & self.live
        sets = [finishing.expand(token_masks.shape[0], -1)]
        for j in range(size - 1, -1, -1):
            reach = sets[0][:, self.next] & token_masks[:, j, None, :]  # (N, S + 1, G)
            sets.insert(0, reach.any(-1) & self.live & (self.is_done | ~past[j]))
        return sets

    def allowed(
        self,
        states: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        limit: torch.Tensor | int,
        tokens_after: torch.Tensor | int,
    ) -> torch.Tensor:
        """(K, B, G) bool: the grammar tokens each masked position may take with the answer completable
        (``TokenGrammar.block_allowed`` per row; rows of committed positions all False). With ``kernel`` on
        CUDA one Triton kernel (``device_grammar_kernels``), else ``reference_allowed``, its twin.

        Args:
            states: (K,) automaton state of each row before the block.
            tokens: (K, B) block tokens (ignored where masked).
            masked: (K, B) bool.
            limit: positions >= limit lie past max_new_tokens.
            tokens_after: answer tokens available after the block.
        """
        if self.kernel and tokens.is_cuda:
            return block_sets(*self._kernel_inputs(states, tokens, masked, limit, tokens_after), True)[0]
        return self.reference_allowed(states, tokens, masked, limit, tokens_after)

    def reference_allowed(
        self,
        states: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        limit: torch.Tensor | int,
        tokens_after: torch.Tensor | int,
    ) -> torch.Tensor:
        """``allowed`` in batched torch ops (~4 a position and pass)."""
        token_masks = self._token_masks(tokens, masked)
        backward = torch.stack(self._backward(token_masks, limit, tokens_after)[1:], dim=1)  # (K, B, S + 1)
        current = self._start(states)
        forward = []
        for j in range(tokens.shape[1]):
            forward.append(current)
            current = self._after(current, token_masks[:, j])
        reach = backward[:, :, self.next]  # (K, B, S + 1, G): token g from state s lands in a finishing state
        return (torch.stack(forward, dim=1)[..., None] & reach).any(2) & masked[..., None]

    def feasible(
        self,
        states: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        limit: torch.Tensor | int,
        tokens_after: torch.Tensor | int,
    ) -> torch.Tensor:
        """(N,) bool: the block's committed tokens still admit a valid answer (``block_feasible``); with
        ``kernel`` on CUDA the kernel of ``allowed``, else ``reference_feasible``."""
        if self.kernel and tokens.is_cuda:
            return block_sets(*self._kernel_inputs(states, tokens, masked, limit, tokens_after), False)[1]
        return self.reference_feasible(states, tokens, masked, limit, tokens_after)

    def reference_feasible(
        self,
        states: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        limit: torch.Tensor | int,
        tokens_after: torch.Tensor | int,
    ) -> torch.Tensor:
        """``feasible`` in batched torch ops."""
        first = self._backward(self._token_masks(tokens, masked), limit, tokens_after)[0]
        return first.gather(1, states[:, None]).squeeze(1)

    def accept(
        self,
        commit: torch.Tensor,
        score: torch.Tensor,
        x0: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        states: torch.Tensor,
        limit: torch.Tensor | int,
        tokens_after: torch.Tensor | int,
    ) -> torch.Tensor:
        """(K, B) the longest prefix of each row's commits, in descending ``score``, that stays feasible
        (``step._repair``): every prefix length is tried at once.

        Args:
            commit: (K, B) bool positions the commit rule picked.
            score: (K, B) the rule's preference (``CommitRule.priority``).
            x0: (K, B) candidate vocabulary ids (each allowed on its own).
            tokens, masked, states, limit, tokens_after: as in ``allowed``.
        """
        rows, size = commit.shape
        order = torch.sort(score.masked_fill(~commit, float("-inf")), dim=-1, descending=True, stable=True)
        rank = torch.empty_like(order.indices).scatter_(
            -1, order.indices, torch.arange(size, device=commit.device).expand(rows, size)
        )
        lengths = torch.arange(1, size + 1, device=commit.device)  # (T,) prefix lengths tried
        trial = commit[:, None, :] & (rank[:, None, :] < lengths[None, :, None])  # (K, T, B)
        trial_tokens = torch.where(trial, x0[:, None, :], tokens[:, None, :]).reshape(rows * size, size)
        trial_masked = (masked[:, None, :] & ~trial).reshape(rows * size, size)
        fits = self.feasible(
            states.repeat_interleave(size), trial_tokens, trial_masked, limit, tokens_after
        ).reshape(rows, size)
        want = commit.sum(-1, keepdim=True)
        # Feasibility only falls as commits are added, so the fitting lengths up to ``want`` are 1..count.
        count = (fits & (lengths[None, :] <= want)).sum(-1, keepdim=True).clamp_min(want.clamp_max(1))
        return commit & (rank < count)

    def fill(
        self,
        logits: torch.Tensor,
        x0: torch.Tensor,
        tokens: torch.Tensor,
        masked: torch.Tensor,
        states: torch.Tensor,
        limit: torch.Tensor | int,
        tokens_after: torch.Tensor | int,
    ) -> torch.Tensor:
        """(K, B) tokens with every masked position filled left to right (``step.fill_leftovers``): its x0
        when the grammar allows it there, else the allowed column of highest logit.

        One sweep suffices: filling position j changes neither the completions of the positions after it
        (the backward sets past j) nor what came before, so the host's per-position recomputation reduces to
        carrying the forward set along.

        Args:
            logits: (K, B, G) the last step's constrained logits.
            x0: (K, B) the last step's candidate vocabulary ids.
            tokens, masked, states, limit, tokens_after: as in ``allowed``.
        """
        token_masks = self._token_masks(tokens, masked)
        backward = self._backward(token_masks, limit, tokens_after)
        current = self._start(states)
        x0_cols = self.columns(x0)
        filled = []
        for j in range(tokens.shape[1]):
            allowed = (current[:, :, None] & backward[j + 1][:, self.next]).any(1)  # (K, G)
            keep = (x0_cols[:, j] >= 0) & allowed.gather(1, x0_cols[:, j, None].clamp_min(0)).squeeze(1)
            best = logits[:, j].masked_fill(~allowed, float("-inf")).argmax(-1)
            column = torch.where(keep, x0_cols[:, j], best)
            chosen = torch.where(masked[:, j], self.token_ids[column], tokens[:, j])
            filled.append(chosen)
            own = torch.nn.functional.one_hot(column, self.num_columns).bool()
            current = self._after(current, torch.where(masked[:, j, None], own, token_masks[:, j]))
        return torch.stack(filled, dim=1)

    def advance(self, states: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """(K,) state after each row's committed block (``TokenGrammar.advance``; the sink where it leaves
        the grammar)."""
        cols = self.columns(tokens)
        for j in range(tokens.shape[1]):
            column = cols[:, j]
            moved = self.next[states, column.clamp_min(0)]
            states = torch.where(column >= 0, moved, self.sink)
        return states


def kernel_warps(states: int, columns: int) -> int:
    """Warps of a program over a padded (states, columns) tile: 4 hold the planning grammar's 256 x 16
    without spilling (ptxas, sm_90a), 16 the detection grammar's 128 x 128 with ~160 bytes spilled (4 and 8
    spilled more; 32 warps leave 64 registers a thread)."""
    return min(16, max(4, states * columns // 1024))


def launch_block_sets(
    next_table: torch.Tensor,
    live: torch.Tensor,
    done: torch.Tensor,
    distance: torch.Tensor,
    columns: torch.Tensor,
    masked: torch.Tensor,
    states: torch.Tensor,
    limit: torch.Tensor,
    tokens_after: torch.Tensor,
    want_allowed: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Triton kernel on any device (a CPU tensor needs TRITON_INTERPRET=1): (allowed (N, B, G) bool,
    empty unless ``want_allowed``; feasible (N,) bool, empty when ``want_allowed``)."""
    import triton

    from wamdiff2_ros.decoding import device_grammar_kernels as kernels

    rows, size = columns.shape
    num_states, num_columns = next_table.shape
    padded_states, padded_columns = triton.next_power_of_2(num_states), triton.next_power_of_2(num_columns)
    device = columns.device
    sets = torch.empty((rows, size + 1, padded_states), dtype=torch.int8, device=device)
    current = torch.empty((rows, padded_states) if want_allowed else (0,), dtype=torch.int8, device=device)
    # The kernel writes every element of its output: no zeros, and bool is a view of the int8 bytes.
    shapes = ((rows, size, num_columns), (0,)) if want_allowed else ((0,), (rows,))
    allowed, feasible = (torch.empty(shape, dtype=torch.int8, device=device) for shape in shapes)
    warps = kernel_warps(padded_states, padded_columns)
    kernels.block_sets[(rows,)](
        next_table, live, done, distance, columns, masked, states, limit, tokens_after, sets, current,
        allowed, feasible, size, num_states, num_columns, S=padded_states, G=padded_columns,
        ALLOWED=want_allowed, num_warps=warps,
    )  # fmt: skip
    return allowed.view(torch.bool), feasible.view(torch.bool)


@torch.library.custom_op("wamdiff2::grammar_block_sets", mutates_args=(), device_types="cuda")
def block_sets(
    next_table: torch.Tensor,
    live: torch.Tensor,
    done: torch.Tensor,
    distance: torch.Tensor,
    columns: torch.Tensor,
    masked: torch.Tensor,
    states: torch.Tensor,
    limit: torch.Tensor,
    tokens_after: torch.Tensor,
    want_allowed: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``launch_block_sets`` as an op torch.compile leaves opaque (the compiled step calls it as one)."""
    return launch_block_sets(
        next_table, live, done, distance, columns, masked, states, limit, tokens_after, want_allowed
    )


@block_sets.register_fake
def _(next_table, live, done, distance, columns, masked, states, limit, tokens_after, want_allowed):
    rows, size = columns.shape
    allowed = columns.new_empty((rows, size, next_table.shape[1]) if want_allowed else (0,), dtype=torch.bool)
    return allowed, columns.new_empty((0,) if want_allowed else (rows,), dtype=torch.bool)
