"""The device step: block decoding with every denoising step and block end on the device, no host sync.

A step is forward, LM head, grammar mask (``device_grammar``), seeded per-row sampling, commit rule and the
grammar's commit repair, all on static buffers; a block end is the grammar's leftover fill and the automaton
state after the block. With CUDA graphs each is captured once per shape and then replayed; without (the CPU
twin tests) the same functions run eagerly. ``block.run_blocks`` is the loop around them; the host syncs once
per block (has every row finished? did the grammar dead-end?) and, with the dynamic rule, after every
``sync_every`` steps (is the block committed?). Steps after a block is committed change nothing, and the
sampler only counts steps that had a mask, so the tokens equal the host steps' (``block.HostSteps``) exactly
in fp32.
"""

from __future__ import annotations

import torch

from wamdiff2_ros.decoding import commit_rules
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.cuda_graph import capture
from wamdiff2_ros.decoding.device_grammar import DeviceGrammar
from wamdiff2_ros.decoding.fast_model import compiled
from wamdiff2_ros.decoding.fp8 import Fp8Weight, answer_logits
from wamdiff2_ros.decoding.grammar import TokenGrammar
from wamdiff2_ros.decoding.sampling import RowSampling, sample_tokens
from wamdiff2_ros.decoding.static_cache import StaticBlockCache
from wamdiff2_ros.decoding.step import step_schedule
from wamdiff2_ros.model.tokenizer import SpecialIds
from wamdiff2_ros.model.vocab import kept_embedding


def step_tail(
    model: torch.nn.Module,
    fp8_head: Fp8Weight | None,
    hidden: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    probability: torch.Tensor,
    config: DecodeConfig,
    grammar: DeviceGrammar | None,
    budget: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    sampling: RowSampling,
    draw: torch.Tensor,
    mask_id: int,
    count: int | None,
) -> tuple[torch.Tensor, ...]:
    """A denoising step after the forward, as a pure function (so that it compiles: Inductor 2.13 fails on
    in-place buffer updates fused in). ``step.constrain`` + ``step.denoise_step`` are its host twins.

    Args:
        model: the model (its LM head).
        fp8_head: the LM head in FP8 for steps that score every column (``fp8.answer_logits``), or None.
        hidden: (K, B, H) final hidden states of the block.
        tokens: (K, B) block tokens.
        masked: (K, B) bool, positions still masked.
        probability: (K, B) float32, each committed token's probability (``block.Steps.block_probabilities``).
        config: decode settings (rule, threshold, mask suppression).
        grammar: the answer grammar's device tables, or None.
        budget: (states (K,), limit, tokens_after): automaton states before the block and where the block
            sits in the budget (0-dim tensors).
        sampling: per-row temperatures and seeds.
        draw: () int64, steps taken so far (the sampler's draw number).
        mask_id: the mask token id.
        count: tokens to commit this step (static, sequential rules), None for the dynamic rule.

    Returns:
        (tokens, masked, probability, x0, x0_probability, logits, counted, dead): the block and its tokens'
        probabilities after the step, this step's candidates with their probabilities and its constrained
        logits (K, B, C; None without a grammar), () int64 1 if some position was masked before the step,
        and () bool True if the grammar left a masked position without any allowed token (a bug).
    """
    columns = None if grammar is None else grammar.token_ids
    logits = answer_logits(model, hidden, columns, fp8_head)  # (K, B, C)
    if grammar is None:
        if config.suppress_mask_token:
            logits = logits.clone()  # an index write, as step.constrain does (Inductor miscompiles a mask)
            logits[..., mask_id] = float("-inf")
        dead = torch.zeros((), dtype=torch.bool, device=logits.device)
    else:
        allowed = grammar.allowed(budget[0], tokens, masked, budget[1], budget[2])
        active = masked.any(-1)[:, None, None]  # a row with nothing masked is left as it is (host: skipped)
        logits = logits.masked_fill(active & ~allowed, float("-inf"))
        dead = (masked & ~allowed.any(-1)).any()
    x0, confidence, x0_probability = sample_tokens(logits, sampling, draw)
    if grammar is not None:
        x0 = grammar.token_ids[x0]  # column -> vocabulary id
    rule = commit_rules.get(config.commit_rule)
    commit = rule.select(confidence, masked, config.threshold, count)
    if grammar is not None:
        score = rule.priority(confidence)
        commit = grammar.accept(commit, score, x0, tokens, masked, budget[0], budget[1], budget[2])
    # Only the grammar's leftover fill reads the logits: without one, returning (K, B, 151,936) floats would
    # cost a write per step (and made Inductor 2.11 miscompile the argmax over a reduced head).
    kept = logits if grammar is not None else None
    return (
        torch.where(commit, x0, tokens),
        masked & ~commit,
        torch.where(commit, x0_probability, probability),
        x0,
        x0_probability,
        kept,
        masked.any().long(),
        dead,
    )


def block_end(
    grammar: DeviceGrammar | None,
    logits: torch.Tensor,
    x0: torch.Tensor,
    x0_probability: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    probability: torch.Tensor,
    budget: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    finished: torch.Tensor,
    eos_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The end of a block, as a pure function: leftovers filled (``step.fill_leftovers``) with their
    probabilities under the last step's logits, the automaton state after the block (finished rows stay
    DONE) and which rows have now finished.

    Returns:
        (tokens (K, B), probability (K, B), states (K,), finished (K,)).
    """
    states, limit, tokens_after = budget
    if grammar is None:
        tokens = torch.where(masked, x0, tokens)
        filled = x0_probability
    else:
        tokens = grammar.fill(logits, x0, tokens, masked, states, limit, tokens_after)
        columns = grammar.columns(tokens).clamp_min(0)[..., None]
        filled = torch.softmax(logits, dim=-1).gather(-1, columns).squeeze(-1)
        states = torch.where(finished, grammar.done_state, grammar.advance(states, tokens))
    probability = torch.where(masked, filled, probability)
    return tokens, probability, states, finished | (tokens == eos_id).any(-1)


class DeviceSteps:
    """The device loop's buffers and steps; with ``cuda_graphs`` each step shape (fused first step?, commit
    count) and the block end are captured once and replayed, else they run eagerly.

    Buffers (K rows, B positions): ``tokens``/``masked`` updated in place by each step, ``pending`` the
    previous block for the fused first step, ``x0``/``logits`` the last step's, ``steps`` the steps of this
    block in which some row still had a mask, ``draw`` the sampler's draw number, ``states``/``finished``
    per row, ``limit``/``tokens_after`` the block's place in the budget.

    Args:
        cache: the static cache (its forward and its rows).
        config: decode settings (its seed is set per decode).
        grammar: the answer grammar, or None.
        cuda_graphs: capture and replay (CUDA only).
        ids: special token ids.
        sync_every: dynamic rule: steps between host checks for a committed block (1: a sync costs tens of
            microseconds, a wasted step milliseconds).
    """

    def __init__(
        self,
        cache: StaticBlockCache,
        config: DecodeConfig,
        grammar: TokenGrammar | None,
        cuda_graphs: bool,
        ids: SpecialIds = SpecialIds(),  # noqa: B008 (frozen dataclass, safe as a default)
        sync_every: int = 1,
    ) -> None:
        device = cache.model.device
        rows, size = cache.rows, cache.block_size
        self.cache, self.config, self.ids, self.cuda_graphs = cache, config, ids, cuda_graphs
        self.grammar = None if grammar is None else DeviceGrammar(grammar, device, ids.mask)
        columns = 0 if grammar is None else len(grammar.token_ids)  # the fill's logits: grammar only
        zeros = lambda *shape, dtype=torch.int64: torch.zeros(shape, dtype=dtype, device=device)  # noqa: E731
        self.tokens, self.masked = zeros(rows, size), zeros(rows, size, dtype=torch.bool)
        self.pending, self.x0 = zeros(rows, size), zeros(rows, size)
        self.probability = zeros(rows, size, dtype=torch.float32)
        self.x0_probability = zeros(rows, size, dtype=torch.float32)
        self.logits = zeros(rows, size, columns, dtype=torch.float32)
        self.steps, self.draw, self.dead = zeros(), zeros(), zeros(dtype=torch.bool)
        self.states, self.finished = zeros(rows), zeros(rows, dtype=torch.bool)
        self.limit, self.tokens_after = zeros(), zeros()
        self.sampling = RowSampling.of(config.temperature, config.seed, rows, config.greedy_first, device)
        self.device = device
        self.dynamic = step_schedule(config) is None
        self.sync_every = sync_every
        self.fused_next = False
        self.pool = torch.cuda.graph_pool_handle() if cuda_graphs else None
        self.graphs: dict[object, torch.cuda.CUDAGraph] = {}
        # Compiled, a step's head, grammar, sampling and commit take a few kernels instead of hundreds. Not
        # without a grammar over a reduced head or with sampled rows: Inductor 2.11 fails to generate code for
        # the argmax or the sampler over full-vocabulary logits on CUDA (2026-12-01: test_fast_gpu's reduced-
        # vocabulary compiled rows, and bench plan's K = 4 free row at 2b, "list indices must be integers").
        free_unsupported = grammar is None and (
            kept_embedding(cache.model) is not None or config.temperature > 0
        )
        self.tail = compiled(step_tail) if cache.decoder.compile and not free_unsupported else step_tail
        self.end = compiled(block_end) if cache.decoder.compile else block_end

    @property
    def captures(self) -> int:
        """CUDA graphs captured so far (a warm loop adds none)."""
        return len(self.graphs)

    def start(self, seed: int) -> None:
        """Reset the per-decode state: rows unfinished at the grammar's start, draws from ``seed``."""
        self.finished.zero_()
        self.dead.zero_()
        self.states.fill_(0 if self.grammar is None else self.grammar.grammar.start_state)
        self.draw.zero_()
        rows = self.sampling.seeds.shape[0]
        self.sampling.seeds.copy_(torch.arange(seed, seed + rows, dtype=torch.int64))
        self.fused_next = False

    def start_block(self, limit: int, tokens_after: int) -> None:
        """Finished rows carry <|im_end|> and take no commits (reference :2351-2352)."""
        rows, size = self.tokens.shape
        self.tokens.copy_(torch.where(self.finished[:, None], self.ids.eos, self.ids.mask).expand(rows, size))
        self.masked.copy_(~self.finished[:, None].expand(rows, size))
        self.probability.fill_(1.0)
        self.steps.zero_()
        self.limit.fill_(limit)  # a kernel with the value as argument: no host sync
        self.tokens_after.fill_(tokens_after)

    def block_committed(self, step: int) -> bool:
        """Dynamic rule only (a static schedule ends every row at its last step): one host sync."""
        return self.dynamic and step % self.sync_every == 0 and not bool(self.masked.any())

    def step(self, step: int, count: int | None) -> None:
        """One denoising step (captured on its first use)."""
        fused = self.fused_next and step == 0
        size = self.tokens.shape[1]
        self.cache.place(2 * size if fused else size)
        self._run((fused, count), lambda: self._step(fused, count))
        self.cache.forwards += 1
        if fused:
            self.cache.written += size
        self.fused_next = False

    def end_block(self) -> torch.Tensor:
        """Fill the leftovers, advance the automaton, update ``finished``; the block's tokens (a buffer)."""
        self._run("end", self._end)
        return self.tokens

    def block_probabilities(self) -> torch.Tensor:
        return self.probability

    def steps_taken(self) -> torch.Tensor:
        return self.steps.clone()  # read at the end of the decode: no sync per block

    def all_finished(self) -> bool:
        """The block's one sync: has every row finished, and did the grammar dead-end (a bug)?"""
        finished, dead = torch.stack([self.finished.all(), self.dead]).tolist()
        if dead:
            raise RuntimeError("grammar dead end: committed tokens admit no valid answer (a bug)")
        return finished

    def hold(self, block: torch.Tensor) -> None:
        self.pending.copy_(block)
        self.fused_next = True

    def _budget(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.states, self.limit, self.tokens_after

    def _step(self, fused: bool, count: int | None) -> None:
        if fused:
            hidden = self.cache.raw_forward(torch.cat([self.pending, self.tokens], dim=1))
            hidden = hidden[:, self.tokens.shape[1] :]
        else:
            hidden = self.cache.raw_forward(self.tokens)
        tokens, masked, probability, x0, x0_probability, logits, counted, dead = self.tail(
            self.cache.model,
            self.cache.fp8_head,
            hidden,
            self.tokens,
            self.masked,
            self.probability,
            self.config,
            self.grammar,
            self._budget(),
            self.sampling,
            self.draw,
            self.ids.mask,
            count,
        )
        self.steps.add_(counted)
        self.draw.add_(counted)
        self.dead.logical_or_(dead)
        self.tokens.copy_(tokens)
        self.masked.copy_(masked)
        self.probability.copy_(probability)
        self.x0.copy_(x0)
        self.x0_probability.copy_(x0_probability)
        if logits is not None:
            self.logits.copy_(logits)

    def _end(self) -> None:
        tokens, probability, states, finished = self.end(
            self.grammar,
            self.logits,
            self.x0,
            self.x0_probability,
            self.tokens,
            self.masked,
            self.probability,
            self._budget(),
            self.finished,
            self.ids.eos,
        )
        self.tokens.copy_(tokens)
        self.probability.copy_(probability)
        self.states.copy_(states)
        self.finished.copy_(finished)

    def _run(self, key: object, body) -> None:
        if not self.cuda_graphs:
            body()
        elif key not in self.graphs:
            self.graphs[key] = capture(body, self.pool)  # the capture's warm-up run was this call
        else:
            self.graphs[key].replay()
