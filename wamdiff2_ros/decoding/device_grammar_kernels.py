"""The Triton kernel of decoding/device_grammar.py (imported when launched: CPU machines may lack Triton).

One program per row walks the block's positions in order, the automaton's state sets held as (S,) vectors:
the backward sets (states from which the rest of the block can still end in a finishing state) kept in a
scratch row per position, then, for ``allowed``, the forward sets and each position's allowed columns. The
torch twin (``DeviceGrammar.reference_*``) runs the same recurrences as ~4 batched ops per position: ~100
kernels a pass, three passes a denoising step (1.3 ms over the forward at K = 4 on the H200). Sets move
between positions through scratch memory, behind a barrier: a set's elements are written and read by
different threads of the program.
"""

import triton
import triton.language as tl


@triton.jit
def block_sets(
    next_ptr, live_ptr, done_ptr, distance_ptr, cols_ptr, masked_ptr, states_ptr, limit_ptr, after_ptr,
    sets_ptr, current_ptr, allowed_ptr, feasible_ptr, size, num_states, num_columns,
    S: tl.constexpr, G: tl.constexpr, ALLOWED: tl.constexpr,
):  # fmt: skip
    n = tl.program_id(0)
    states = tl.arange(0, S)
    columns = tl.arange(0, G)
    state_in = states < num_states  # the automaton's states and its dead sink
    column_in = columns < num_columns
    tile_in = state_in[:, None] & column_in[None, :]
    # (S, G) next state of (state, column), loaded where it is used: held across the loops, a 128 x 128
    # table (the detection grammar's) spilled registers even at 16 warps
    table_ptrs = next_ptr + states[:, None] * num_columns + columns[None, :]
    live = tl.load(live_ptr + states, mask=state_in, other=0) != 0
    done = tl.load(done_ptr + states, mask=state_in, other=0) != 0
    distance = tl.load(distance_ptr + states, mask=state_in, other=0)
    limit = tl.load(limit_ptr)
    tokens_after = tl.load(after_ptr)
    sets = sets_ptr + n * (size + 1) * S  # (B + 1, S) int8: the backward set before each position
    tl.store(sets + size * S + states, ((distance <= tokens_after) & live & state_in).to(tl.int8))
    for step in range(0, size):
        j = size - 1 - step
        tl.debug_barrier()  # the set after position j, written by other threads
        column = tl.load(cols_ptr + n * size + j)
        masked = tl.load(masked_ptr + n * size + j) != 0
        tokens = column_in & (masked | (columns == column))  # (G,) what position j may hold
        table = tl.load(table_ptrs, mask=tile_in, other=0)
        reach = tl.load(sets + (j + 1) * S + table, mask=tile_in & tokens[None, :], other=0)  # (S, G)
        before = (tl.max(reach.to(tl.int32), axis=1) > 0) & live & (done | (j < limit))
        tl.store(sets + j * S + states, before.to(tl.int8), mask=state_in)
    tl.debug_barrier()
    start = tl.load(states_ptr + n)
    if not ALLOWED:
        tl.store(feasible_ptr + n, tl.load(sets + start).to(tl.int8))
    else:
        current = (states == start) & live
        scratch = current_ptr + n * S
        for j in range(0, size):
            column = tl.load(cols_ptr + n * size + j)
            masked = tl.load(masked_ptr + n * size + j) != 0
            tokens = column_in & (masked | (columns == column))
            # allowed[j, g]: some current state whose move by g lands where the block can still finish
            table = tl.load(table_ptrs, mask=tile_in, other=0)
            after = tl.load(sets + (j + 1) * S + table, mask=tile_in, other=0) != 0  # (S, G)
            hit = tl.max((current[:, None] & after).to(tl.int32), axis=0) > 0
            tl.store(allowed_ptr + (n * size + j) * num_columns + columns, (hit & masked).to(tl.int8),
                     mask=column_in)  # fmt: skip
            # the forward set after position j: every move of a current state by a token it may hold
            tl.store(scratch + states, tl.zeros((S,), tl.int8), mask=state_in)
            tl.debug_barrier()
            moves = current[:, None] & tokens[None, :] & tile_in
            tl.store(scratch + table, tl.full((S, G), 1, tl.int8), mask=moves)
            tl.debug_barrier()
            current = (tl.load(scratch + states, mask=state_in, other=0) != 0) & live
            tl.debug_barrier()  # read before the next position's zeros
