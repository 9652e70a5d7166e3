"""One denoising step on a block: constrain the logits, sample x0, commit by the rule, keep the grammar whole.

Shared by the block decoder and the AR twin (which is a block of one), so both commit by the same rules; what
they differ in (cache, masks, order of forwards) is what their twin test checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wamdiff2_ros.decoding import commit_rules
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.grammar import TokenGrammar
from wamdiff2_ros.decoding.sampling import RowSampling, sample_tokens


@dataclass
class BlockBudget:
    """Where a block sits in the answer: what the grammar needs to know about the token budget."""

    states: list[int] | None  # grammar state of each row before the block; None without grammar
    limit: int  # positions >= limit lie past max_new_tokens
    tokens_after: int  # answer tokens available after the block


def step_schedule(config: DecodeConfig) -> list[int] | None:
    """Commit counts per step for the static and sequential rules; None for the dynamic rule."""
    return commit_rules.get(config.commit_rule).schedule(config.block_size, config.steps)


def constrain(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    config: DecodeConfig,
    grammar: TokenGrammar | None,
    budget: BlockBudget,
    mask_id: int,
) -> torch.Tensor:
    """Logits with every token that must not appear at a position set to -inf.

    Args:
        logits: (K, B, C) float32 over the scored columns: the whole vocabulary without a grammar, the
            grammar's ``token_ids`` with one.
        tokens: (K, B) current block tokens (committed ones are read by the grammar).
        masked: (K, B) bool, positions still to fill.
        config: decode settings (mask suppression).
        grammar: the answer grammar (planning or detection), or None.
        budget: grammar states and token budget of this block.
        mask_id: the mask token id.

    Returns:
        (K, B, C) constrained logits (a new tensor). Grammar columns never include the mask token.
    """
    logits = logits.clone()
    if grammar is None or budget.states is None:
        if config.suppress_mask_token:
            logits[..., mask_id] = float("-inf")
        return logits
    for row, state in enumerate(budget.states):
        if not bool(masked[row].any()):
            continue
        allowed = grammar.block_allowed(state, tokens[row], masked[row], budget.limit, budget.tokens_after)
        allowed = allowed.to(logits.device)  # the grammar answers on the host; the block may live on a GPU
        if bool((masked[row] & ~allowed.any(-1)).any()):
            raise RuntimeError(
                f"grammar dead end in row {row}: committed tokens admit no valid answer (a bug)"
            )
        logits[row] = logits[row].masked_fill(~allowed, float("-inf"))
    return logits


def _repair(
    commit: torch.Tensor,
    x0: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    score: torch.Tensor,
    grammar: TokenGrammar,
    state: int,
    budget: BlockBudget,
) -> torch.Tensor:
    # One row. Each x0 fits the grammar on its own, but two can clash (e.g. "," right after "-"). Keep the
    # longest run of the rule's picks, in its order of preference, that still admits a valid answer: adding
    # picks only removes completions, so that run is a prefix of the order, and the best pick alone always
    # fits (device_grammar.DeviceGrammar.accept computes the same prefix for all lengths at once).
    want = int(commit.sum())
    if want <= 1:
        return commit
    order = torch.sort(score.masked_fill(~commit, float("-inf")), descending=True, stable=True).indices
    for count in range(want, 0, -1):
        accepted = torch.zeros_like(commit)
        accepted[order[:count]] = True
        trial = torch.where(accepted, x0, tokens)
        if count == 1 or grammar.block_feasible(
            state, trial, masked & ~accepted, budget.limit, budget.tokens_after
        ):
            return accepted
    raise AssertionError("unreachable: count 1 is always returned")


def denoise_step(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    step: int,
    config: DecodeConfig,
    grammar: TokenGrammar | None,
    budget: BlockBudget,
    sampling: RowSampling,
    draw: int,
    schedule: list[int] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample x0 from constrained logits and commit the positions the rule picks.

    Args:
        logits: (K, B, C) constrained logits of the block (columns as in ``constrain``).
        tokens: (K, B) block tokens (mask id where masked).
        masked: (K, B) bool.
        step: index of this step within the block (for the static schedule).
        config: decode settings.
        grammar: the answer grammar or None.
        budget: grammar states and budget.
        sampling: per-row temperatures and seeds.
        draw: steps the rows have taken so far (the sampler's draw number).
        schedule: commit counts per step (static, sequential) or None (dynamic).

    Returns:
        (tokens, masked, x0, probability) after the commit; x0 (K, B) is this step's candidate tokens and
        probability (K, B) their probability under the constrained logits (``sample_tokens``).
    """
    x0, confidence, probability = sample_tokens(logits, sampling, draw)
    if grammar is not None:
        x0 = grammar.token_ids.to(x0.device)[x0]  # column index -> vocabulary id
    count = None if schedule is None else schedule[step]
    rule = commit_rules.get(config.commit_rule)
    commit = rule.select(confidence, masked, config.threshold, count)
    if grammar is not None and budget.states is not None:
        score = rule.priority(confidence)
        for row, state in enumerate(budget.states):
            commit[row] = _repair(
                commit[row], x0[row], tokens[row], masked[row], score[row], grammar, state, budget
            )
    return torch.where(commit, x0, tokens), masked & ~commit, x0, probability


def fill_leftovers(
    logits: torch.Tensor,
    x0: torch.Tensor,
    x0_probability: torch.Tensor,
    tokens: torch.Tensor,
    masked: torch.Tensor,
    grammar: TokenGrammar | None,
    budget: BlockBudget,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill positions still masked at the step cap with the last step's x0 (reference :2500-2505).

    With a grammar, fills left to right and replaces an x0 that clashes with what is already committed by the
    best token the grammar allows there.

    Args:
        logits: (K, B, C) constrained logits of the last step (columns as in ``constrain``).
        x0: (K, B) last step's candidates.
        x0_probability: (K, B) their probabilities (``denoise_step``).
        tokens: (K, B) block tokens.
        masked: (K, B) bool positions left.
        grammar: the answer grammar or None.
        budget: grammar states and budget.

    Returns:
        (tokens, probability): (K, B) tokens with no masked position left, and at each filled position the
        probability of its token under the last step's logits (elsewhere ``x0_probability``).
    """
    if grammar is None or budget.states is None:
        return torch.where(masked, x0, tokens), x0_probability
    tokens = tokens.clone()
    masked = masked.clone()
    probability = x0_probability.clone()
    ids = grammar.token_ids.to(logits.device)
    for row, state in enumerate(budget.states):
        for position in masked[row].nonzero().squeeze(-1).tolist():
            allowed = grammar.block_allowed(
                state, tokens[row], masked[row], budget.limit, budget.tokens_after
            ).to(logits.device)
            column = (ids == x0[row, position]).nonzero()
            if len(column) and bool(allowed[position, column[0, 0]]):
                tokens[row, position] = x0[row, position]
            else:
                scores = logits[row, position].masked_fill(~allowed[position], float("-inf"))
                best = int(scores.argmax())
                tokens[row, position] = ids[best]
                probability[row, position] = torch.softmax(logits[row, position], -1)[best]
            masked[row, position] = False
    return tokens, probability
