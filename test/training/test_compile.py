"""The compiled training forward (``TrainConfig.compile``) is the eager one: the same logits and gradients
to rounding in fp32, for batches of other lengths and sizes (the text layers' one graph takes any length),
and with autograd off as the teacher and the held-out loss run it.

On the CPU the graphs run through ``aot_eager`` (what Dynamo captures and AOT autograd differentiates, with
no code generated: Inductor's C++ build of the same graphs takes minutes on two cores); on the GPU through
Inductor, as training runs them.
"""

from __future__ import annotations

import copy
from functools import partial

import pytest
import torch

from wamdiff2_ros.errors import InputError
from wamdiff2_ros.training.collate import DiffusionCollator, model_rope_index
from wamdiff2_ros.training.config import TrainConfig
from wamdiff2_ros.training.forward import MaskedLogits


def _logits_and_grads(forward: MaskedLogits, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    logits = forward(batch)
    logits.square().mean().backward()
    grads = {name: p.grad.clone() for name, p in forward.model.named_parameters() if p.grad is not None}
    forward.model.zero_grad(set_to_none=True)
    return logits.detach(), grads


# Tolerances in fp32: on the CPU aot_eager reorders nothing (rounding only); on CUDA Inductor's Triton kernels
# reduce in other orders and use the fast exp/rsqrt (logits 3.7e-5 apart at most on the H200, 2026-12-03)
TOLERANCES = {"cpu": {"logits": 1e-5, "grad_rtol": 1e-4, "grad_atol": 1e-6}}
TOLERANCES["cuda"] = {"logits": 2e-4, "grad_rtol": 1e-3, "grad_atol": 1e-5}


def _compiled_is_eager(model, examples, device: str) -> None:
    tol = TOLERANCES[device]
    torch._dynamo.utils.counters.clear()
    model = copy.deepcopy(model).float().to(device).train()
    eager, compiled = MaskedLogits(model), MaskedLogits(copy.deepcopy(model), compile=True)
    collate = DiffusionCollator(model_rope_index(model), 8, schedule="stratified")
    batches = [
        collate(examples, torch.Generator().manual_seed(1)).to(device),
        collate(examples[2:], torch.Generator().manual_seed(2)).to(device),  # one row, a shorter answer
    ]
    assert batches[0].input_ids.shape[1] != batches[1].input_ids.shape[1]
    for batch in batches:
        theirs, their_grads = _logits_and_grads(eager, batch)
        mine, my_grads = _logits_and_grads(compiled, batch)
        torch.testing.assert_close(mine, theirs, rtol=tol["logits"], atol=tol["logits"])
        assert my_grads.keys() == their_grads.keys()
        assert any(name.startswith("model.visual.") for name in my_grads)
        for name, grad in my_grads.items():
            torch.testing.assert_close(
                grad, their_grads[name], rtol=tol["grad_rtol"], atol=tol["grad_atol"], msg=name
            )
    with torch.no_grad():  # the teacher's and the held-out loss's forward
        no_grad = compiled(batches[0]), eager(batches[0])
        torch.testing.assert_close(*no_grad, rtol=tol["logits"], atol=tol["logits"])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 0  # compiled, not eager in disguise


@pytest.fixture
def aot_eager(monkeypatch):
    """torch.compile through ``aot_eager`` for the test; its graphs are dropped before and after."""
    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", partial(torch.compile, backend="aot_eager"))
    try:
        yield
    finally:
        torch._dynamo.reset()  # the graphs hold the monkeypatched backend: no later test may find them


def test_compiled_forward_gives_the_eager_logits_and_gradients(tiny_model, examples, aot_eager):
    _compiled_is_eager(tiny_model, examples, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (run through the device tool)")
def test_inductor_compiled_forward_gives_the_eager_logits_and_gradients_on_cuda(tiny_model, examples):
    _compiled_is_eager(tiny_model, examples, "cuda")


@pytest.mark.parametrize(
    "keys", [{"gradient_checkpointing": True}, {"on_policy": True}, {"eval_data": {"planning": "e.json"}}]
)
def test_compile_is_refused_beside_checkpointing_and_decoding_with_the_model(keys):
    with pytest.raises(InputError, match="compile goes with none of"):
        TrainConfig(
            stage="adapt", model="tiny", out_dir="x", data={"planning": "p.json"}, compile=True, **keys
        )
