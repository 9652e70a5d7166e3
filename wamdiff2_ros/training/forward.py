"""The training forward: the backbone over a ``DiffusionBatch``, the LM head only at the masked positions.

Scoring only the masked positions skips almost all of the 151,936-column head (docs/REFERENCE.md §6.3). The
module wraps the model so that DDP sees the whole forward (calling ``model.model`` past a DDP wrapper would
bypass its gradient hooks). A reduced-vocabulary model (``model/vocab.py``) is scored on its kept columns
only (``loss_columns``): every other id is -inf, so the softmax, the CE and the JSD over those columns are
the full-width ones, without a (n, 151,936) tensor. The vision tower runs batched
(``fast_vision.LeanVision.batch``, transformers' tower bit for bit) when a batch's frames share one grid, as
a camera's do; mixed grids go through transformers' tower. The text model is transformers' layers in
transformers' order, with the image features placed at positions the collator found on the host: the
forward never waits for the device to count a boolean mask. With ``compile`` the tower's work between
attention calls and each text decoder layer run through Inductor (fewer, fused kernels: on the H200 a bf16
step's kernels took 49 ms compiled against 86 eager, docs/BENCHMARKS.md "Training throughput").
"""

from __future__ import annotations

import torch
from transformers import Qwen3VLForConditionalGeneration
from transformers.masking_utils import create_causal_mask

from wamdiff2_ros.decoding.fast_vision import LeanVision
from wamdiff2_ros.errors import InputError
from wamdiff2_ros.model.forward import head_logits
from wamdiff2_ros.model.vocab import kept_embedding
from wamdiff2_ros.training.collate import DiffusionBatch


def loss_columns(
    model: Qwen3VLForConditionalGeneration, teacher: Qwen3VLForConditionalGeneration | None = None
) -> torch.Tensor | None:
    """The vocabulary ids the losses score: a reduced model's kept ids, or None for the full vocabulary.

    None also when a teacher keeps other ids than the student (or all of them): the JSD then needs the
    teacher's mass outside the student's columns.
    """
    kept = kept_embedding(model)
    if kept is None:
        return None
    if teacher is not None:
        other = kept_embedding(teacher)
        if other is None or not torch.equal(other.kept.to(kept.kept.device), kept.kept):
            return None
    return kept.kept


class MaskedLogits(torch.nn.Module):
    """``forward(batch) -> (n, V)`` float32 logits at ``batch.loss_mask`` positions, in row-major order;
    V is the vocabulary, or the ``columns`` given (ascending ids, see ``loss_columns``). With ``compile``
    the model's text decoder layers are compiled in place (``compile_text_layers``) and the batched vision
    tower's pieces are compiled (``LeanVision``'s ``compile``); uncompiled, the same operations eagerly."""

    def __init__(
        self,
        model: Qwen3VLForConditionalGeneration,
        columns: torch.Tensor | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.model, self.columns = model, columns
        self.vision = LeanVision(model, trainable=True, compile=compile)
        if compile:
            compile_text_layers(model)

    def forward(self, batch: DiffusionBatch, teacher_mask: bool = False) -> torch.Tensor:
        """Logits of the masked positions.

        Args:
            batch: the batch, on the model's device.
            teacher_mask: attend with ``batch.teacher_attention_mask`` (the teacher's block size).

        Returns:
            (n, V or len(columns)) float32, n = ``batch.loss_mask.sum()``; position j predicts token j (no
            shift).
        """
        mask = batch.teacher_attention_mask if teacher_mask else batch.attention_mask
        text = self.model.model.language_model
        embeds = text.embed_tokens(batch.input_ids)
        deepstack: list[torch.Tensor] = []
        if batch.pixel_values is not None:
            image, deepstack = self._image_features(batch)
            embeds = _scattered(embeds, batch.image_positions, image, add=False)
        # transformers' text model with the image features placed by the host's indices: its own forward
        # places them through boolean masks, a host wait each (the count), twice per DeepStack layer
        mask = create_causal_mask(config=text.config, inputs_embeds=embeds, attention_mask=mask, cache=None)
        position_embeddings = text.rotary_emb(embeds, batch.position_ids)
        hidden = embeds
        for index, layer in enumerate(text.layers):
            hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings)
            if index < len(deepstack):
                hidden = _scattered(hidden, batch.image_positions, deepstack[index], add=True)
        hidden = text.norm(hidden).flatten(0, 1)[batch.masked_positions]  # (n, H)
        return head_logits(self.model, hidden[None], self.columns)[0]

    def _image_features(self, batch: DiffusionBatch) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The frames' merged features (image tokens, H) and their DeepStack features, in token order."""
        grids = batch.image_grid_thw  # on the host: reading it waits for nothing
        batched = not self.model.is_activation_checkpointing  # transformers' tower recomputes its blocks
        if batched and bool((grids == grids[:1]).all()):
            features = self.vision.batch(batch.pixel_values, grids)
            return features.image, list(features.deepstack)
        device_grids = grids.to(batch.pixel_values.device)
        out = self.model.model.get_image_features(batch.pixel_values, device_grids, return_dict=True)
        return torch.cat(out.pooler_output), [torch.cat(f) for f in out.deepstack_features]


def _scattered(hidden: torch.Tensor, positions: torch.Tensor, rows: torch.Tensor, add: bool) -> torch.Tensor:
    """``hidden`` (b, L, H) with ``rows`` (m, H) written (or added) at flat positions (m,) of its b x L."""
    flat, rows = hidden.flatten(0, 1), rows.to(hidden.dtype)
    placed = flat.index_add(0, positions, rows) if add else flat.index_copy(0, positions, rows)
    return placed.view_as(hidden)


def compile_text_layers(model: Qwen3VLForConditionalGeneration) -> None:
    """Compile each of ``model``'s text decoder layers in place (``Module.compile``, Inductor): the layers
    share one graph, for any sequence length (batches differ in length by a few tokens)."""
    limit = len(model.model.language_model.layers) * 4  # layers x (train, no-grad) x a few specialisations
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, limit)
    for layer in model.model.language_model.layers:
        layer.compile(dynamic=True)


def masked_targets(
    batch: DiffusionBatch, columns: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(labels (n,), mask ratio t (n,), batch row (n,)) of the masked positions, in ``MaskedLogits`` order.

    With ``columns`` the labels are positions in it (the class indices of the column logits): the batch's
    answers must hold only kept ids, as ``check_answer_columns`` checks on the host before the batch moves
    (a check here would wait for the device).
    """
    positions = batch.masked_positions
    rows = positions // batch.loss_mask.shape[1]
    labels = batch.labels.flatten()[positions]
    if columns is not None:
        labels = _column_index(columns, labels)
    return labels, batch.noise_level.flatten()[positions], rows


def _column_index(columns: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Each id's position in the ascending ``columns`` (the last one's for an id past them all)."""
    return torch.searchsorted(columns, ids).clamp_max(len(columns) - 1)


def check_answer_columns(batch: DiffusionBatch, columns: torch.Tensor | None) -> None:
    """Refuse a batch whose answers hold an id outside ``columns`` (a reduced model that never saw it).

    Raises:
        InputError: an answer token is not among the columns.
    """
    if columns is None:
        return
    ids = batch.labels.flatten()[batch.masked_positions].to(columns.device)
    found = columns[_column_index(columns, ids)] == ids
    if not bool(found.all()):
        missing = sorted(set(ids.tolist()) - set(columns.tolist()))[:5]
        raise InputError(f"answer tokens {missing} are outside the model's reduced vocabulary")
