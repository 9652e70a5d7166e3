"""Decode and prefill benchmark rows: warm-up, synchronised timing, median and p99, fraction of floor, JSON.

Knows nothing about the CLI; cli/bench.py chooses the rows and prints them. Times are wall-clock around a
synchronised call (a decode reads tokens back to the host anyway), so they include every launch and sync.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class Timing:
    """Median and 99th percentile of repeated calls, in milliseconds."""

    median_ms: float
    p99_ms: float
    samples: int


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: torch.device, warmup: int = 1, repeat: int = 5) -> Timing:
    """Time ``fn`` ``repeat`` times after ``warmup`` untimed calls (compilation, graph capture, caches).

    Args:
        fn: the work; its result is ignored.
        device: synchronised before and after every call.
        warmup: untimed calls first.
        repeat: timed calls.

    Returns:
        Median and p99 (nearest rank) over the timed calls.

    Raises:
        ValueError: ``repeat`` < 1.
    """
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        _sync(device)
        started = time.perf_counter()
        fn()
        _sync(device)
        times.append(1e3 * (time.perf_counter() - started))
    times.sort()
    p99 = times[min(len(times) - 1, max(0, round(0.99 * len(times)) - 1))]
    return Timing(median_ms=times[len(times) // 2], p99_ms=p99, samples=len(times))


@dataclass
class SpeedRow:
    """One benchmark row: a decode configuration and what it measured."""

    name: str
    settings: dict[str, Any]  # the DecodeConfig fields that differ from the defaults
    prompt_tokens: int
    answer_tokens: int  # tokens decoded per candidate (blocks decoded x B, cut at max_new_tokens)
    forwards: int  # forwards after the prefill, per decode
    decode: Timing  # the answer alone (whole decode minus the median prefill)
    plan_ms: float  # median whole decode: prefill + answer
    block_forward: Timing | None  # one forward of B queries per row over the prompt
    floor_ms_per_token: float  # forwards x floor per forward / answer tokens
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ms_per_token(self) -> float:
        """Median answer time per token."""
        return self.decode.median_ms / max(1, self.answer_tokens)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields, derived columns included."""
        row = asdict(self)
        row["ms_per_token"] = self.ms_per_token
        row["tokens_per_s"] = 1e3 / self.ms_per_token
        row["fraction_of_floor"] = self.floor_ms_per_token / self.ms_per_token
        return row


def device_card(device: torch.device) -> dict[str, Any]:
    """Date, machine, GPU, driver and library versions for the card above a table."""
    versions = {}
    for package in ("torch", "transformers", "flashinfer-python"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    card: dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "versions": versions,
        "device": str(device),
    }
    if device.type == "cuda":
        card["gpu"] = torch.cuda.get_device_name(device)
        card["cuda"] = torch.version.cuda
        try:
            card["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            card["driver"] = None
    return card


def format_table(rows: list[SpeedRow]) -> str:
    """A fixed-width text table of the rows (medians; p99 of the answer time)."""
    header = (
        f"{'row':34} {'ms/tok':>8} {'tok/s':>8} {'p99 ms':>9} {'fwd ms':>8} {'floor':>6} {'plan ms':>9} "
        f"{'fwds':>5}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        forward = f"{row.block_forward.median_ms:8.3f}" if row.block_forward else f"{'-':>8}"
        d = row.as_dict()
        lines.append(
            f"{row.name:34} {row.ms_per_token:8.3f} {d['tokens_per_s']:8.0f} {row.decode.p99_ms:9.2f} "
            f"{forward} {d['fraction_of_floor']:6.2f} {row.plan_ms:9.2f} {row.forwards:5d}"
        )
    return "\n".join(lines)


def write_json(path: str | Path, card: dict[str, Any], rows: list[SpeedRow], extra: dict[str, Any]) -> None:
    """Write ``{"card", "rows", **extra}`` as JSON."""
    payload = {"card": card, "rows": [row.as_dict() for row in rows], **extra}
    Path(path).write_text(json.dumps(payload, indent=2) + "\n")


def measure_prefill(model: Any, prompt: Any, block_size: int, warmup: int = 1, repeat: int = 5) -> Timing:
    """Time transformers' prompt encoding (vision tower + block-causal prefill), the same in every row.

    Args:
        model: the Qwen3-VL model.
        prompt: prompt tensors (``model/prompt.py``).
        block_size: B of the prompt's block-causal mask.
        warmup: untimed calls.
        repeat: timed calls.

    Returns:
        The timing.
    """
    from wamdiff2_ros.decoding.kv_cache import BlockCache

    return time_call(lambda: BlockCache(model, block_size).prefill(prompt), model.device, warmup, repeat)


# The H200's bf16 dense matrix-product rate as measured on the device (docs/REFERENCE.md): the floors' rate.
BF16_DENSE_FLOPS = 790e12


def vision_flops(vision_config: Any, patches: int) -> float:
    """Matrix-product FLOPs of the vision tower on ``patches`` patches (blocks only: q/k/v, projection, MLP,
    and full attention's two products; the patch embedding and mergers add under 3 %)."""
    width, inner, depth = vision_config.hidden_size, vision_config.intermediate_size, vision_config.depth
    linear = 2 * patches * (4 * width * width + 2 * width * inner)
    attention = 4 * patches * patches * width
    return float(depth * (linear + attention))


def text_prefill_flops(text_config: Any, tokens: int) -> float:
    """Matrix-product FLOPs of the text prefill over ``tokens`` prompt tokens: q/k/v/o, the MLP, and the
    block-causal attention's two products (about half of full attention's)."""
    width, inner = text_config.hidden_size, text_config.intermediate_size
    depth = text_config.num_hidden_layers
    queries = text_config.num_attention_heads * text_config.head_dim
    keys = text_config.num_key_value_heads * text_config.head_dim
    linear = 2 * tokens * (width * (queries + 2 * keys) + queries * width + 3 * width * inner)
    attention = 2 * tokens * tokens * queries
    return float(depth * (linear + attention))


def measure_preprocessing(
    width_px: int,
    height_px: int,
    device: torch.device,
    budgets: dict[str, int],
    warmup: int = 1,
    repeat: int = 5,
) -> dict[str, Timing]:
    """Time the image preprocessing (resize to a pixel budget, normalise, patchify) of a seeded uint8 frame.

    Rows per budget: on the CPU through PIL (reduce-first resize where it applies, and the exact one-step
    twin), and on CUDA in torch ops from the frame uploaded (``upload``) or already on the device.

    Args:
        width_px: frame width.
        height_px: frame height.
        device: CUDA adds the device rows.
        budgets: max pixels by row label (e.g. the reference's and the bundled model's).
        warmup: untimed calls.
        repeat: timed calls.

    Returns:
        Timings by name.
    """
    import numpy as np

    from wamdiff2_ros.model.image import prepare_image, prepare_image_tensor

    frame = np.random.default_rng(0).integers(0, 256, size=(height_px, width_px, 3), dtype=np.uint8)
    cpu = torch.device("cpu")
    timings = {}
    for label, max_pixels in budgets.items():
        for exact in (False, True):
            timings[f"preprocess cpu {label}{' one-step' if exact else ''}"] = time_call(
                lambda m=max_pixels, e=exact: prepare_image(frame, max_pixels=m, exact=e), cpu, warmup, repeat
            )
        if device.type == "cuda":
            pinned = torch.from_numpy(frame).pin_memory()
            on_device = pinned.to(device)
            timings[f"preprocess device {label} upload"] = time_call(
                lambda m=max_pixels, p=pinned: prepare_image_tensor(
                    p.to(device, non_blocking=True), max_pixels=m
                ),
                device,
                warmup,
                repeat,
            )
            timings[f"preprocess device {label}"] = time_call(
                lambda m=max_pixels, f=on_device: prepare_image_tensor(f, max_pixels=m),
                device,
                warmup,
                repeat,
            )
    return timings


def _fast_variants(model: Any) -> list[bool]:
    # The compiled, graphed rows need CUDA.
    return [False, True] if model.device.type == "cuda" else [False]


def measure_prefills(
    model: Any, prompt: Any, block_size: int, backends: list[str], warmup: int = 1, repeat: int = 5
) -> dict[str, Timing]:
    """Time the prefill ways: transformers' (``hf eager``), its vision tower alone, the lean vision tower
    (``vision lean``; on CUDA also compiled and replayed from a CUDA graph), and
    the fast path's whole prefill (lean vision tower + lean layers into a static cache, ``lean <backend>``;
    on CUDA also compiled and graphed, the tower and the text prefill) and its text part alone
    (``text lean <backend>``).

    Args:
        model: the Qwen3-VL model.
        prompt: prompt tensors.
        block_size: B of the prompt's block-causal mask.
        backends: the prompt attention of the lean rows (``sdpa``, ``flashinfer``, ``flex``; none:
            transformers' rows only).
        warmup: untimed calls (a compiled row's compile and capture are in its first).
        repeat: timed calls.

    Returns:
        Timings by name.
    """
    from wamdiff2_ros.decoding.fast_model import LeanDecoder
    from wamdiff2_ros.decoding.fast_vision import LeanVision
    from wamdiff2_ros.decoding.prefill import prompt_inputs
    from wamdiff2_ros.decoding.static_cache import StaticBlockCache

    timings = {"hf eager": measure_prefill(model, prompt, block_size, warmup, repeat)}
    towers = {fast: LeanVision(model, compile=fast, cuda_graph=fast) for fast in _fast_variants(model)}
    if prompt.pixel_values is not None:
        pixels = prompt.pixel_values.to(model.device, model.dtype)
        grid = prompt.image_grid_thw.to(model.device)
        with torch.no_grad():
            timings["vision tower"] = time_call(
                lambda: model.model.get_image_features(pixels, grid), model.device, warmup, repeat
            )
        for fast, tower in towers.items():
            timings[f"vision lean{' compile graph' if fast else ''}"] = time_call(
                lambda t=tower: t(pixels, grid), model.device, warmup, repeat
            )
    inputs = prompt_inputs(model, prompt, towers[False])
    decoders = {fast: LeanDecoder(model, compile=fast) for fast in towers}  # compiled once, for every backend
    for backend in backends:
        for fast, tower in towers.items():
            cache = StaticBlockCache(
                model,
                block_size,
                1,
                prompt.length,
                block_size,
                "sdpa" if backend == "flex" else backend,  # the answer's (unused here); flex: prompts only
                fast,
                decoder=decoders[fast],
                vision=tower,
                prompt_backend=backend,
            )
            suffix = " compile graph" if fast else ""
            timings[f"lean {backend}{suffix}"] = time_call(
                lambda c=cache: c.prefill(prompt), model.device, warmup, repeat
            )
            timings[f"text lean {backend}{suffix}"] = time_call(
                lambda c=cache: c.prefill_text(inputs), model.device, warmup, repeat
            )
    return timings


def measure_decode(
    name: str,
    model: Any,
    tokenizer: Any,
    prompt: Any,
    config: Any,
    prefill: Timing,
    decoder: Any = None,
    warmup: int = 1,
    repeat: int = 5,
) -> SpeedRow:
    """Decode one prompt repeatedly with ``config`` and build its row.

    Args:
        name: row name.
        model: the model.
        tokenizer: the tokenizer.
        prompt: prompt tensors.
        config: a ``DecodeConfig``.
        prefill: the prompt's prefill timing (subtracted to get the answer time).
        decoder: a ``FastDecoder`` to reuse (its graphs stay captured); ``engine.decode`` when None.
        warmup: untimed decodes (graph capture, JIT).
        repeat: timed decodes.

    Returns:
        The row; ``block_forward`` is one B-query forward over the prompt (fast path: as it runs, graph or
        not; eager: transformers' forward).
    """
    from dataclasses import fields

    from wamdiff2_ros.decoding.config import DecodeConfig
    from wamdiff2_ros.decoding.cost import forward_cost
    from wamdiff2_ros.decoding.engine import decode

    results = []

    def run() -> None:
        results.append(
            decoder.decode(tokenizer, prompt) if decoder else decode(model, tokenizer, prompt, config)
        )

    whole = time_call(run, model.device, warmup, repeat)
    result = results[-1]
    answer_tokens = min(config.max_new_tokens, len(result.steps_per_block) * config.block_size)
    decode_median = whole.median_ms - prefill.median_ms
    decode_timing = Timing(decode_median, whole.p99_ms - prefill.median_ms, whole.samples)
    forwards = result.forwards - 1
    context = prompt.length + answer_tokens // 2  # a representative mid-answer context
    size = config.block_size
    per_forward = forward_cost(model.config.text_config, size, context, config.candidates).floor_ms()
    block_forward = _time_block_forward(model, prompt, config, decoder)
    defaults = DecodeConfig()
    settings = {
        f.name: getattr(config, f.name)
        for f in fields(config)
        if getattr(config, f.name) != getattr(defaults, f.name)
    }
    return SpeedRow(
        name=name,
        settings=settings,
        prompt_tokens=prompt.length,
        answer_tokens=answer_tokens,
        forwards=forwards,
        decode=decode_timing,
        plan_ms=whole.median_ms,
        block_forward=block_forward,
        floor_ms_per_token=forwards * per_forward / answer_tokens,
        note="" if result.candidates[0].stopped is False else "stopped early at <|im_end|>",
    )


def _time_block_forward(model: Any, prompt: Any, config: Any, decoder: Any) -> Timing:
    # One forward of B queries per row right after the prompt, timed as the decoder runs it.
    from wamdiff2_ros.decoding.kv_cache import BlockCache
    from wamdiff2_ros.model.tokenizer import MASK_ID

    block = torch.full(
        (config.candidates, config.block_size), MASK_ID, dtype=torch.int64, device=model.device
    )
    if decoder is None:
        cache = BlockCache(model, config.block_size, config.candidates)
        cache.prefill(prompt)
        return time_call(lambda: cache.denoise(block), model.device, 2, 20)
    cache = decoder.cache
    cache.prefill(prompt)
    if not config.cuda_graphs or cache.graphs is not None:
        return time_call(lambda: cache.denoise(block), model.device, 2, 20)
    # The device loop captures whole steps, so its cache has no forward graphs: give it one for the timing
    # (else this times the forward ungraphed, host-bound: 13-14 ms where the graphed one takes ~2).
    from wamdiff2_ros.decoding.cuda_graph import ForwardGraphs

    cache.graphs = ForwardGraphs(cache.raw_forward)
    try:
        return time_call(lambda: cache.denoise(block), model.device, 2, 20)
    finally:
        cache.graphs = None


# Kernel kinds by name (cuBLAS/CUTLASS GEMMs, attention, Inductor's Triton kernels); the rest is "other".
KERNEL_KINDS = (
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "splitk")),
    ("attention", ("flashinfer", "prefill", "fmha", "flash", "attention")),
    ("compiled", ("triton",)),
)


def kernel_kind(name: str) -> str:
    """``gemm``, ``attention``, ``compiled`` or ``other`` for a CUDA kernel name."""
    lowered = name.lower()
    return next((kind for kind, marks in KERNEL_KINDS if any(mark in lowered for mark in marks)), "other")


def profile_replays(replay: Callable[[], object], device: torch.device, repeat: int = 20) -> dict[str, Any]:
    """Time ``replay`` (median of ``repeat`` after 2 warm-ups) and sum its kernels' device time by kind.

    Args:
        replay: the work, e.g. one CUDA graph replay.
        device: the CUDA device.
        repeat: calls timed and profiled.

    Returns:
        ``ms`` (median wall time per call), ``kernels`` (per call), ``gpu_ms`` (per call, by kind) and ``top``
        (the 8 costliest kernels: name, ms and launches per call).
    """
    timing = time_call(replay, device, warmup=2, repeat=repeat)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(repeat):
            replay()
        _sync(device)
    kernels = [e for e in profile.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_kind: dict[str, float] = {}
    for event in kernels:
        kind = kernel_kind(event.key)
        by_kind[kind] = by_kind.get(kind, 0.0) + event.self_device_time_total / 1e3 / repeat
    top = sorted(kernels, key=lambda e: -e.self_device_time_total)[:8]
    return {
        "ms": timing.median_ms,
        "kernels": sum(e.count for e in kernels) / repeat,
        "gpu_ms": by_kind,
        "top": [(e.key[:70], e.self_device_time_total / 1e3 / repeat, e.count / repeat) for e in top],
    }


# The chain the paper reports for its block decoder (ms/token: AR, Block-32, +FlashInfer, +CUDA Graphs).
PAPER_CHAIN_MS = (22.7, 8.1, 4.6, 1.5)


def plot_chain(
    rows: list[dict[str, Any]], names: list[str], labels: list[str], floor_ms: float, path: str
) -> None:
    """Bar chart of ms/token along a chain of rows beside the paper's chain, log scale, floor as a line.

    Args:
        rows: rows as written by ``write_json`` (``rows`` list).
        names: row names of the chain, in order.
        labels: one short label per name.
        floor_ms: the weights-read floor per token of the last configuration.
        path: PNG to write.

    Raises:
        KeyError: a name is not among the rows.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers
    import matplotlib.pyplot as plt

    by_name = {row["name"]: row for row in rows}
    ours = [by_name[name]["ms_per_token"] for name in names]
    figure, axes = plt.subplots(figsize=(8, 4.5))
    positions = range(len(ours))
    axes.bar([p - 0.2 for p in positions], ours, width=0.4, label="wamdiff2_ros (H200)")
    paper = list(PAPER_CHAIN_MS) + [float("nan")] * (len(ours) - len(PAPER_CHAIN_MS))
    axes.bar([p + 0.2 for p in positions], paper[: len(ours)], width=0.4, label="WAM-Diff2 paper")
    for p, value in zip(positions, ours, strict=True):
        axes.annotate(f"{value:.2f}", (p - 0.2, value), ha="center", va="bottom", fontsize=8)
    axes.axhline(floor_ms, color="k", linestyle="--", linewidth=1, label=f"weights-read floor {floor_ms:.2f}")
    axes.set_yscale("log")
    axes.set_xticks(list(positions), labels, fontsize=8)
    axes.set_ylabel("ms per answer token (median, batch 1)")
    axes.set_title("Latency chain, 2b preset, 2,106-token prompt (1920x1080 frame)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
