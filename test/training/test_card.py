"""The recipe's ``bundle`` step pieces: a pack installed beside the folder's own card and tokenizer, and the
card's tables written from evaluation outputs in place of the previous ones, the prose kept."""

from __future__ import annotations

from pathlib import Path

from wamdiff2_ros.training.card import (
    BEGIN,
    END,
    card_tables,
    closed_loop_table,
    install,
    open_loop_table,
    write_tables,
)


def _planner(ade: float) -> dict:
    return {
        "samples": 300,
        "ade_m": ade,
        "fde_m": 2 * ade,
        "collision_rate": 0.1,
        "comfort": 0.5,
        "pdm_score": 0.6,
    }


def _metrics(ade: float, map_: float, forwards: float = 20.0) -> dict:
    detection = {
        "map": map_,
        "ap50": 2 * map_,
        "by_distance": {"0-15 m": {"map": 3 * map_}, "60+ m": {"map": 0.0}},
    }
    planners = {"model": _planner(ade), "expert": _planner(0.0), "constant-velocity": _planner(3.3)}
    cost = {"planning": {"forwards_per_answer": forwards}}
    return {"planners": planners, "detection": detection, "cost": cost}


def _episodes(scores: list[float], kinds: list[str]) -> list[dict]:
    return [
        {
            "seed": 1000 + i,
            "kind": kind,
            "driving_score": score,
            "failure_mode": "completed" if score > 0.5 else "stall",
        }
        for i, (score, kind) in enumerate(zip(scores, kinds, strict=True))
    ]


def _policy(scores: list[float]) -> dict:
    kinds = ["highway", "roundabout", "intersection", "highway"]
    episodes = _episodes(scores, kinds)
    modes = {"completed": sum(e["failure_mode"] == "completed" for e in episodes)}
    modes["stall"] = len(episodes) - modes["completed"]
    return {
        "summary": {"driving_score": sum(scores) / len(scores), "failure_modes": modes},
        "episodes": episodes,
    }


def _report() -> dict:
    return {
        "policies": {
            "model": _policy([0.9, 0.4, 0.6, 1.0]),
            "expert": _policy([1.0, 1.0, 1.0, 1.0]),
            "constant-velocity": _policy([0.8, 0.2, 0.2, 0.9]),
        }
    }


def test_the_open_loop_table_has_each_model_and_the_baselines_once():
    table = open_loop_table({"heldout": _metrics(2.4, 0.04), "heldout_teacher": _metrics(2.0, 0.08, 97.0)})
    assert "| heldout | 300 | 2.400 | 4.800 | 0.100 | 0.500 | 0.600 | 20.0 | 0.040 | 0.080 |" in table
    assert "| heldout_teacher | 300 | 2.000 | 4.000 | 0.100 | 0.500 | 0.600 | 97.0 |" in table
    assert "| expert | 300 | 0.000 | 0.000 | 0.100 | 0.500 | 0.600 | - | - | - |" in table
    assert table.count("| expert |") == 1 and table.count("| constant-velocity |") == 1
    assert "| heldout | 0.120 | 0.000 |" in table  # mAP by distance band


def test_the_closed_loop_table_scores_by_kind_counts_failures_and_pairs_with_constant_velocity():
    table = closed_loop_table({"closed_loop": _report()})
    # driving score, highway / intersection / roundabout means, completed, then the failure counts
    assert "| closed_loop: model | 4 | 0.725 | 0.950 | 0.600 | 0.400 | 3 | 0 | 0 | 0 | 0 | 1 | 0 |" in table
    assert "| constant-velocity | 4 | 0.525 |" in table
    assert "closed_loop: model against constant velocity, paired over 4 episodes: +0.200 (90 % " in table


def test_the_card_keeps_its_prose_and_its_tables_are_replaced(tmp_path):
    card = tmp_path / "MODEL_CARD.md"
    card.write_text("# a model\n\nProse written by people.\n")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"0" * 2_000_000)
    first = card_tables(
        "wamdiff2 train recipe R --until bundle", {"heldout": _metrics(2.4, 0.04)}, {}, weights
    )
    write_tables(card, first)
    assert card.read_text().startswith("# a model\n\nProse written by people.\n\n" + BEGIN)
    assert "weights `model.safetensors`, 2.0 MB" in card.read_text() and card.read_text().endswith(END + "\n")
    card.write_text(card.read_text() + "\nMore prose after the tables.\n")
    write_tables(
        card, card_tables("cmd", {"heldout": _metrics(1.9, 0.3)}, {"closed_loop": _report()}, weights)
    )
    text = card.read_text()
    assert text.count(BEGIN) == 1 and "| heldout | 300 | 1.900 |" in text and "2.400" not in text
    assert text.startswith("# a model\n\nProse written by people.") and text.endswith(
        "More prose after the tables.\n"
    )


def test_install_keeps_the_folders_card_and_tokenizer_and_drops_its_other_files(tmp_path):
    pack, to = tmp_path / "pack", tmp_path / "default"
    for folder in (pack, to):
        folder.mkdir()
    for name in ("model.safetensors", "config.json", "tokenizer.json", "MODEL_CARD.md"):
        (pack / name).write_text(f"pack {name}")
    (to / "tokenizer.json").write_text("ours")
    (to / "trainer_state.json").write_text("an older model's lineage")
    (to / "MODEL_CARD.md").write_text("our card")
    assert install(pack, to) == ["config.json", "model.safetensors"]
    assert (to / "tokenizer.json").read_text() == "ours" and (to / "MODEL_CARD.md").read_text() == "our card"
    assert (to / "model.safetensors").read_text() == "pack model.safetensors"
    assert not (to / "trainer_state.json").exists()
    fresh = tmp_path / "fresh"
    install(pack, fresh)
    assert (fresh / "tokenizer.json").read_text() == "pack tokenizer.json" and not (
        fresh / "MODEL_CARD.md"
    ).exists()


def test_card_tables_without_evaluations_say_only_how_the_model_was_made(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"")
    text = card_tables("cmd", {}, {}, weights)
    assert text.splitlines() == [BEGIN, "", "Made by `cmd`; weights `model.safetensors`, 0.0 MB.", "", END]
    assert Path(weights).exists()


def test_a_report_without_baselines_is_paired_with_those_of_another():
    model_only = {"policies": {"model": _policy([1.0, 0.5, 0.6, 1.0])}}
    table = closed_loop_table({"closed_loop_stage2": model_only, "closed_loop": _report()})
    assert table.count("| constant-velocity |") == 1
    assert "- closed_loop_stage2: model against constant velocity, paired over 4 episodes: +0.250" in table
    assert "- closed_loop: model against constant velocity" in table


def test_a_scratch_copy_of_the_same_samples_pairs_with_the_reference(tmp_path) -> None:
    from wamdiff2_ros.training.card import _same_samples

    run, scratch, other = (tmp_path / name for name in ("run", "scratch", "other"))
    for folder, truth in ((run, '{"id": "a"}\n'), (scratch, '{"id": "a"}\n'), (other, '{"id": "b"}\n')):
        folder.mkdir()
        (folder / "ground_truth.jsonl").write_text(truth)
    assert _same_samples(run, run) and _same_samples(run, scratch)
    assert not _same_samples(run, other) and not _same_samples(run, tmp_path / "gone")
