"""Each stage runs a few steps on the tiny preset: the loss falls on a fixed batch, checkpoints load into the
decoders, and an interrupted run resumes to the same weights."""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from wamdiff2_ros.cli.main import main as cli_main
from wamdiff2_ros.decoding.config import DecodeConfig
from wamdiff2_ros.decoding.engine import decode
from wamdiff2_ros.model.backbone import build_model
from wamdiff2_ros.model.checkpoint import load_checkpoint
from wamdiff2_ros.model.parse import parse_waypoints
from wamdiff2_ros.training.collate import DiffusionCollator, model_rope_index
from wamdiff2_ros.training.config import load_config
from wamdiff2_ros.training.forward import MaskedLogits, check_answer_columns, masked_targets
from wamdiff2_ros.training.loop import train
from wamdiff2_ros.training.losses import symmetric_jsd, weighted_masked_ce

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
pytestmark = pytest.mark.slow


def overrides(dataset_dir: Path, out_dir: Path, *extra: str) -> list[str]:
    """Small-run overrides of a shipped tiny config: 4 records, one micro-batch of 4 per step."""
    return [
        f"out_dir={out_dir}",
        f"data={{planning: {dataset_dir / 'planning.json'}, qa: {dataset_dir / 'qa.json'}}}",
        "eval_data={}",
        "task_weights={}",
        "global_batch_size=4",
        "local_batch_size=4",
        "min_pixels=3136",
        "max_pixels=3136",
        "progress=false",
        "warmup_steps_max=0",
        *extra,
    ]


def fixed_batch(
    model, examples, block_size: int, schedule: str = "stratified", teacher_block: int | None = None
):
    collator = DiffusionCollator(
        model_rope_index(model), block_size, schedule=schedule, teacher_block_size=teacher_block
    )
    return collator(examples, torch.Generator().manual_seed(1234))


@torch.no_grad()
def ce_loss(model, batch) -> float:
    labels, noise, rows = masked_targets(batch)
    logits = MaskedLogits(model.eval())(batch)
    return float(
        weighted_masked_ce(logits, labels, noise, rows, batch.response_lens, len(batch.response_lens))
    )


@pytest.fixture(scope="module")
def sft_run(dataset_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft")
    argv = ["train", "sft", "--config", str(CONFIG_DIR / "train_sft_tiny.yaml")]
    assert cli_main(argv + overrides(dataset_dir, out, "max_steps=8", "ckpt_every_steps=4")) == 0
    return out


@pytest.fixture(scope="module")
def adapt_run(dataset_dir, sft_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("adapt")
    extra = [
        f"model={sft_run / 'B1' / 'final'}",
        "block_sizes=[4,32]",
        "max_steps=5",
        f"eval_data={{planning: {dataset_dir / 'planning.json'}}}",
        "eval_samples=1",
    ]
    config = load_config(CONFIG_DIR / "train_adapt_tiny.yaml", overrides(dataset_dir, out, *extra))
    return out, train(config)


def test_sft_writes_checkpoints_metrics_and_loss_plot(sft_run):
    final = sft_run / "B1" / "final"
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "train_config.yaml",
        "trainer_state.json",
    ):
        assert (final / name).is_file(), name
    assert json.loads((final / "trainer_state.json").read_text())["step"] == 8
    # the number style of the planning answers it learnt (plain here) is in its config for the decoders
    assert json.loads((final / "config.json").read_text())["planning_min_int_digits"] == 1
    # and the command rule of its data, which the closed loop gives it (`model.prompt.command_rule_of`)
    assert json.loads((final / "config.json").read_text())["navigation_command_rule"] == "branch"
    assert json.loads((final / "config.json").read_text())["planning_plan_frame"] == "ego"  # and its frame
    assert (sft_run / "B1" / "step_0000004" / "training_state" / "optimizer.safetensors").is_file()
    assert (sft_run / "loss.png").stat().st_size > 0
    rows = [json.loads(line) for line in (sft_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert all(r["tokens_per_s"] > 0 for r in rows)


def test_sft_loss_falls_on_a_fixed_batch_and_the_teacher_decodes_at_block_size_1(sft_run, examples):
    trained = load_checkpoint(sft_run / "B1" / "final").model
    batch = fixed_batch(trained, examples, 1, schedule="full")
    before, after = ce_loss(build_model("tiny", seed=0), batch), ce_loss(trained, batch)
    assert after < before - 0.5, (before, after)
    result = decode(
        trained,
        load_checkpoint(sft_run / "B1" / "final").tokenizer,
        examples[0].prompt,
        DecodeConfig(block_size=1, steps=1, max_new_tokens=8),
    )
    assert result.forwards >= len(result.token_ids)  # B = 1: at least one forward per token


def test_adapt_trains_each_block_size_from_the_previous_and_loss_falls(adapt_run, sft_run, examples):
    out, summary = adapt_run
    assert [p["phase"] for p in summary["phases"]] == ["B4", "B32"]
    assert json.loads((out / "B32" / "final" / "trainer_state.json").read_text())["block_size"] == 32
    student = load_checkpoint(out / "B32" / "final").model
    batch = fixed_batch(student, examples, 32)
    before = ce_loss(load_checkpoint(sft_run / "B1" / "final").model, batch)
    assert ce_loss(student, batch) < before, before
    planning = summary["phases"][-1]["eval"]["planning"]
    assert planning["samples"] == 1 and planning["parsed"] == 1.0 and planning["ade_m"] >= 0.0


def test_adapted_checkpoint_decodes_with_block_size_32(adapt_run, examples):
    out, _ = adapt_run
    loaded = load_checkpoint(out / "B32" / "final")
    config = DecodeConfig(block_size=32, steps=32, grammar=True, max_new_tokens=96)
    result = decode(loaded.model, loaded.tokenizer, examples[0].prompt, config)
    assert parse_waypoints(result.text).shape == (8, 2)
    assert result.steps_per_block and max(result.steps_per_block) <= 32


def test_distill_lowers_the_jsd_to_the_teacher(dataset_dir, sft_run, adapt_run, examples, tmp_path):
    out_adapt, _ = adapt_run
    teacher_dir, student_dir = out_adapt / "B4" / "final", sft_run / "B1" / "final"
    extra = [
        f"model={student_dir}",
        f"teacher={teacher_dir}",
        "block_sizes=[8]",
        "max_steps=6",
        "lr=1e-3",
        "on_policy=true",
        "generate_interval=3",
        "generate_steps=2",
        "max_new_tokens=16",
    ]
    config = load_config(CONFIG_DIR / "train_distill_tiny.yaml", overrides(dataset_dir, tmp_path, *extra))
    train(config)
    teacher = MaskedLogits(load_checkpoint(teacher_dir).model.eval())
    batch = fixed_batch(teacher.model, examples, 8, teacher_block=4)
    _, _, rows = masked_targets(batch)

    @torch.no_grad()
    def jsd(model) -> float:
        student = MaskedLogits(model.eval())(batch)
        return float(symmetric_jsd(student, teacher(batch, teacher_mask=True), rows, batch.response_lens, 3))

    before, after = (
        jsd(load_checkpoint(student_dir).model),
        jsd(load_checkpoint(tmp_path / "B8" / "final").model),
    )
    assert after < before, (before, after)
    rows_logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["top_k_overlap"] <= 1.0 and r["jsd"] >= 0.0 for r in rows_logged)


def test_interrupted_run_resumes_to_the_same_weights_with_a_worker_loader(dataset_dir, tmp_path):
    config = load_config(
        CONFIG_DIR / "train_sft_tiny.yaml",
        overrides(dataset_dir, tmp_path, "max_steps=4", "ckpt_every_steps=2"),
    )
    train(config)
    final = tmp_path / "B1" / "final"
    uninterrupted = load_checkpoint(final).model.state_dict()
    shutil.rmtree(final)  # as if the run had stopped after the step-2 checkpoint
    assert sorted(p.name for p in (tmp_path / "B1").iterdir()) == ["step_0000002"]
    train(replace(config, num_workers=1))  # records now come from a DataLoader worker: same order
    resumed = load_checkpoint(final).model.state_dict()
    for name, tensor in uninterrupted.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_a_heldout_loss_curve_is_logged_and_leaves_the_training_as_it_was(sft_run, dataset_dir, tmp_path):
    heldout = f"heldout_data={{planning: {dataset_dir / 'planning.json'}, qa: {dataset_dir / 'qa.json'}}}"
    extra = ("max_steps=8", "ckpt_every_steps=4", heldout, "heldout_every_steps=4", "heldout_samples=3")
    train(load_config(CONFIG_DIR / "train_sft_tiny.yaml", overrides(dataset_dir, tmp_path, *extra)))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    curve = [r for r in rows if r["kind"] == "heldout"]
    assert [r["step"] for r in curve] == [4, 8] and all(math.isfinite(r["loss"]) for r in curve)
    assert [r["step"] for r in rows if r["kind"] == "train"] == list(range(1, 9))
    plain = load_checkpoint(sft_run / "B1" / "final").model.state_dict()  # the same run without the curve
    with_curve = load_checkpoint(tmp_path / "B1" / "final").model.state_dict()
    for name, tensor in plain.items():
        assert torch.equal(with_curve[name], tensor), name


class _Clock:
    """``time`` for the training loop: its wall clock reaches ``deadline`` at the ``late_from``-th reading."""

    perf_counter = staticmethod(time.perf_counter)

    def __init__(self, deadline: float, late_from: int) -> None:
        self.deadline, self.late_from, self.readings = deadline, late_from, 0

    def time(self) -> float:
        self.readings += 1
        return self.deadline if self.readings >= self.late_from else self.deadline - 1.0


def test_a_phase_stopped_at_its_deadline_resumes_to_the_same_weights(
    sft_run, dataset_dir, tmp_path, monkeypatch
):
    from wamdiff2_ros.training import loop

    extra = ("max_steps=8", "ckpt_every_steps=4")  # sft_run's: the same run, uninterrupted
    config = load_config(CONFIG_DIR / "train_sft_tiny.yaml", overrides(dataset_dir, tmp_path, *extra))
    monkeypatch.setattr(loop, "time", _Clock(deadline=1000.0, late_from=4))  # steps 1 to 3, then late
    result = train(config, deadline=1000.0)
    monkeypatch.undo()
    phase = tmp_path / "B1"
    assert result["stopped"] and result["phases"] == []
    assert sorted(p.name for p in phase.iterdir()) == ["step_0000003"]  # resumable, not final
    assert json.loads((phase / "step_0000003" / "trainer_state.json").read_text())["phase_s"] > 0
    assert not train(config)["stopped"]
    uninterrupted = load_checkpoint(sft_run / "B1" / "final").model.state_dict()
    resumed = load_checkpoint(phase / "final").model.state_dict()
    for name, tensor in uninterrupted.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_model_wise_distill_takes_a_larger_teacher_at_the_same_block_size(dataset_dir, tokenizer, tmp_path):
    from wamdiff2_ros.model.checkpoint import save_checkpoint
    from wamdiff2_ros.model.presets import preset_config

    config = preset_config("tiny")
    config.text_config.num_hidden_layers = 4  # twice the student's depth, wider MLP: the "8b" of this test
    config.text_config.intermediate_size = 256
    teacher_dir = save_checkpoint(build_model(config, seed=3), tmp_path / "teacher", tokenizer)
    extra = [
        "model=tiny",
        f"teacher={teacher_dir}",
        "block_sizes=[8]",
        "teacher_block_size=8",
        "max_steps=2",
    ]
    train(
        load_config(CONFIG_DIR / "train_distill_tiny.yaml", overrides(dataset_dir, tmp_path / "run", *extra))
    )
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["jsd"] > 0.0 for r in rows)
    assert load_checkpoint(tmp_path / "run" / "B8" / "final").model.config.text_config.num_hidden_layers == 2


def test_a_phase_with_a_time_budget_anneals_and_stops_on_time(dataset_dir, tmp_path):
    budget_s = 3.0
    config = load_config(
        CONFIG_DIR / "train_sft_tiny.yaml",
        overrides(dataset_dir, tmp_path, "max_steps=100000", f"max_phase_s={budget_s}"),
    )
    train(config)
    state = json.loads((tmp_path / "B1" / "final" / "trainer_state.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert 1 <= state["step"] == len(rows) < 100000
    lrs = [r["lr"] for r in rows]
    assert lrs == sorted(lrs, reverse=True) and lrs[-1] < 0.5 * config.lr  # time-driven cosine decay
    assert sum(r["step_s"] for r in rows) < budget_s + 2.0


def _scene_ids(dataset_dir: Path) -> list[int]:
    # the ids a recipe's ``vocab_from`` keeps for these scenes
    from wamdiff2_ros.model.tokenizer import load_tokenizer
    from wamdiff2_ros.model.vocab import ids_for
    from wamdiff2_ros.training.data import vocabulary_texts

    return ids_for(load_tokenizer(), vocabulary_texts([dataset_dir]))


def test_a_reduced_vocabulary_start_trains_and_keeps_its_ids(dataset_dir, tmp_path):
    from wamdiff2_ros.model.checkpoint import save_checkpoint
    from wamdiff2_ros.training.initial import initial_model

    start, out = tmp_path / "init", tmp_path / "sft"
    model = initial_model(layers=2, hidden=32, intermediate=64, kept_ids=_scene_ids(dataset_dir))
    save_checkpoint(model, start)  # what a recipe's init step writes
    kept = json.loads((start / "vocab_kept.json").read_text())
    argv = ["train", "sft", "--config", str(CONFIG_DIR / "train_sft_tiny.yaml")]
    assert cli_main(argv + overrides(dataset_dir, out, f"model={start}", "max_steps=6", "lr=1e-2")) == 0
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [loss for loss in losses if loss is not None]
    assert all(map(math.isfinite, losses)) and losses[-1] < losses[0]
    final = out / "B1" / "final"
    assert json.loads((final / "vocab_kept.json").read_text()) == kept
    assert load_checkpoint(final).model.model.language_model.embed_tokens.weight.shape == (len(kept), 32)


def test_reducing_a_trained_checkpoint_keeps_its_logits_and_files(dataset_dir, sft_run, examples, tmp_path):
    from wamdiff2_ros.model.vocab import kept_embedding
    from wamdiff2_ros.training.recipe import reduce_checkpoint

    source, out = sft_run / "B1" / "final", tmp_path / "small"
    reduce_checkpoint(source, out, _scene_ids(dataset_dir))  # a recipe's reduce_vocabulary step
    assert (out / "train_config.yaml").read_text() == (source / "train_config.yaml").read_text()
    full, small = load_checkpoint(source).model, load_checkpoint(out).model
    kept = kept_embedding(small).kept
    batch = fixed_batch(full, examples, 8)
    want, got = MaskedLogits(full)(batch), MaskedLogits(small)(batch)
    torch.testing.assert_close(got[:, kept], want[:, kept], rtol=0, atol=1e-5)
    assert len(kept) < 400


@torch.no_grad()
def test_reduced_vocabulary_losses_on_kept_columns_equal_the_full_width_losses(
    dataset_dir, tiny_model, tokenizer, examples, tmp_path
):
    from wamdiff2_ros.errors import InputError
    from wamdiff2_ros.model.vocab import ids_for, reduce_vocabulary
    from wamdiff2_ros.training.data import vocabulary_texts
    from wamdiff2_ros.training.forward import loss_columns
    from wamdiff2_ros.training.stages import diffusion_loss, distill_loss

    kept = ids_for(tokenizer, vocabulary_texts([dataset_dir]))
    student = reduce_vocabulary(tiny_model, kept).eval()
    teacher = reduce_vocabulary(build_model("tiny", seed=1), kept).eval()
    columns = loss_columns(student, teacher)
    assert columns.tolist() == kept
    assert loss_columns(tiny_model) is None and loss_columns(student, tiny_model) is None
    batch = fixed_batch(student, examples, 8, teacher_block=4)
    full = diffusion_loss(MaskedLogits(student), batch, 3)
    narrow = diffusion_loss(MaskedLogits(student, columns), batch, 3, columns)
    assert MaskedLogits(student, columns)(batch).shape[-1] == len(kept)
    torch.testing.assert_close(narrow["loss"], full["loss"], rtol=1e-6, atol=0)
    config = load_config(
        CONFIG_DIR / "train_distill_tiny.yaml", overrides(dataset_dir, tmp_path, "kd_ratio=0.5")
    )
    full = distill_loss(MaskedLogits(student), MaskedLogits(teacher), batch, 3, config)
    narrow = distill_loss(
        MaskedLogits(student, columns), MaskedLogits(teacher, columns), batch, 3, config, columns
    )
    for key in ("ce", "jsd", "top_k_overlap"):
        assert float(narrow[key]) == pytest.approx(float(full[key]), rel=1e-5), key
    # A full-vocabulary teacher: full width, and the student's -inf columns add nothing (not NaN).
    assert math.isfinite(
        distill_loss(MaskedLogits(student), MaskedLogits(tiny_model), batch, 3, config)["jsd"]
    )
    batch.labels[batch.loss_mask] = 2000  # not a kept id: a clear error, not a wrong class
    with pytest.raises(InputError, match="2000"):
        check_answer_columns(batch, columns)


def test_an_initial_model_needs_two_vision_blocks_for_its_deepstack_taps() -> None:
    from wamdiff2_ros.errors import InputError
    from wamdiff2_ros.training.initial import initial_model

    with pytest.raises(InputError, match="vision_depth"):
        initial_model(layers=2, hidden=32, intermediate=64, vision_depth=1)
