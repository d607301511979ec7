"""The speed paths compute what the plain paths compute: folded eval-mode blocks, one-pass pixel
scaling, fp32 strided depthwise under CPU autocast, running-statistics target passes."""

import pytest
import torch
from torch import nn

from sgi_lab.augment.ops import intensity
from sgi_lab.config import PretrainConfig, build_config
from sgi_lab.nets import InvertedResidual, SGIModel, make_target
from sgi_lab.nets.encoders import PIXEL_SCALE, scale_pixels
from sgi_lab.runtime.device import autocast, cpu_has_native_bf16, keep_freed_memory, use_bf16
from sgi_lab.train.pretrain_step import target_passes


def _block_with_statistics(stride: int, channels_last: bool) -> InvertedResidual:
    torch.manual_seed(0)
    block = InvertedResidual(8, 16, stride, expand_ratio=2)
    with torch.no_grad():
        for m in block.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
                m.running_mean.uniform_(-1.0, 1.0)
                m.running_var.uniform_(0.5, 2.0)
    if channels_last:
        block = block.to(memory_format=torch.channels_last)
    return block.eval()


@pytest.mark.parametrize("stride,channels_last", [(1, False), (2, True)])
def test_folded_eval_forward_matches_the_batch_norm_one(stride, channels_last):
    block = _block_with_statistics(stride, channels_last)
    x = torch.randn(3, 8, 14, 14)
    plain = block(x)  # gradient enabled: convs, then norms
    with torch.no_grad():
        folded = block(x)  # eval mode, no gradient: norms folded into the convs
    torch.testing.assert_close(folded, plain.detach(), atol=1e-5, rtol=1e-5)


def test_train_mode_without_gradient_keeps_batch_statistics():
    block = _block_with_statistics(1, False)
    x = torch.randn(4, 8, 7, 7) * 3 + 2
    with torch.no_grad():
        running = block(x)
        block.train()
        batch = block(x)
    torch.testing.assert_close(batch, block(x).detach())  # the plain path, batch statistics
    assert (batch - running).abs().max() > 0.1  # and not the running statistics


def test_scale_pixels_is_autocasts_own_cast():
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(scale_pixels(x), x.float() * PIXEL_SCALE)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = scale_pixels(x, channels_last=True)
    assert y.dtype == torch.bfloat16
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y, (x.float() * PIXEL_SCALE).to(torch.bfloat16))


def test_intensity_on_uint8_equals_intensity_on_float():
    x = torch.randint(0, 256, (3, 2, 4, 8, 8), dtype=torch.uint8)
    a = intensity(x, generator=torch.Generator().manual_seed(1))
    b = intensity(x.float(), generator=torch.Generator().manual_seed(1))
    assert a.dtype == torch.float32 and torch.equal(a, b)


def test_strided_depthwise_gradient_under_cpu_autocast():
    block = _block_with_statistics(2, True).train()
    x = torch.randn(4, 8, 14, 14).contiguous(memory_format=torch.channels_last)
    block(x).sum().backward()
    reference = block.depthwise.weight.grad.clone()
    block.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        block(x).float().sum().backward()
    torch.testing.assert_close(block.depthwise.weight.grad, reference, atol=0.1, rtol=0.05)


def test_autocast_and_allocator_settings():
    cpu = torch.device("cpu")
    with autocast(cpu, cpu=False):
        assert not torch.is_autocast_enabled("cpu")
    with autocast(cpu, cpu=True):
        assert torch.is_autocast_enabled("cpu") == cpu_has_native_bf16()
    assert keep_freed_memory() == keep_freed_memory()  # idempotent; False without glibc


@pytest.mark.parametrize("mode", ["batch", "running"])
def test_target_passes_mode(mode):
    config = build_config(PretrainConfig, {"target_batch_norm": mode})
    target = make_target(SGIModel("nature", 4, hidden_size=8, noisy=False)).train()
    with target_passes(config, target):
        assert not torch.is_grad_enabled()
        assert target.training == (mode == "batch")
    assert target.training and torch.is_grad_enabled()


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_narrow_channels_last_train_norm_is_the_batch_norm(monkeypatch, momentum, dtype):
    """The fast gradient-free training-mode norm of 8-channel channels-last activations gives
    batch norm's output, running statistics and batch count, without calling it."""
    from sgi_lab.nets.encoders import _train_norm

    torch.manual_seed(1)
    x = (torch.randn(5, 8, 12, 12) * torch.linspace(0.5, 3, 8).view(1, 8, 1, 1) + 4).to(dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    plain = nn.BatchNorm2d(8, momentum=momentum)
    with torch.no_grad():
        plain.weight.uniform_(0.5, 1.5)
        plain.bias.uniform_(-0.5, 0.5)
        plain.running_mean.uniform_(-1.0, 1.0)
    fast = nn.BatchNorm2d(8, momentum=momentum)
    fast.load_state_dict(plain.state_dict())
    monkeypatch.setattr(fast, "forward", lambda _: pytest.fail("took the plain path"))
    with torch.no_grad():
        for _ in range(2):  # twice: the cumulative average depends on the batch count
            expected = plain(x)
            ours = _train_norm(fast, x)
    assert ours.dtype == dtype and ours.is_contiguous(memory_format=torch.channels_last)
    tol = {"atol": 0.02, "rtol": 0.01} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(ours, expected, **tol)
    torch.testing.assert_close(fast.running_mean, plain.running_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast.running_var, plain.running_var, atol=1e-5, rtol=1e-5)
    assert int(fast.num_batches_tracked) == int(plain.num_batches_tracked) == 2


def test_train_norm_falls_back_to_the_module_elsewhere():
    from sgi_lab.nets.encoders import _train_norm

    calls = []
    narrow, wide, plain = nn.BatchNorm2d(8), nn.BatchNorm2d(16), nn.BatchNorm2d(8, affine=False)
    for bn in (narrow, wide, plain):
        bn.register_forward_hook(lambda *args: calls.append(1))
    x = torch.randn(2, 8, 4, 4).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        _train_norm(narrow, x.contiguous())  # NCHW
        _train_norm(wide, torch.cat([x, x], 1).contiguous(memory_format=torch.channels_last))
        _train_norm(plain, x)  # no affine parameters
        _train_norm(narrow.eval(), x)  # eval mode
        assert len(calls) == 4
        _train_norm(narrow.train(), x)  # the fast path
    _train_norm(narrow, x.requires_grad_()).sum().backward()  # the fast path, with gradient
    assert len(calls) == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_narrow_train_norm_gradients_are_batch_norms(monkeypatch, dtype):
    """With a gradient wanted, the wide-view norm gives batch norm's output, input gradient,
    weight and bias gradients and running statistics, without calling it."""
    from sgi_lab.nets.encoders import _train_norm

    torch.manual_seed(2)
    x0 = torch.randn(6, 8, 12, 12) * torch.linspace(0.5, 3, 8).view(1, 8, 1, 1) + 4
    grad = torch.randn(6, 8, 12, 12).to(dtype).contiguous(memory_format=torch.channels_last)
    plain = nn.BatchNorm2d(8)
    with torch.no_grad():
        plain.weight.uniform_(0.5, 1.5)
        plain.bias.uniform_(-0.5, 0.5)
    fast = nn.BatchNorm2d(8)
    fast.load_state_dict(plain.state_dict())
    monkeypatch.setattr(fast, "forward", lambda _: pytest.fail("took the plain path"))
    results = []
    for bn, norm in ((plain, lambda b, x: b(x)), (fast, _train_norm)):
        x = x0.to(dtype).contiguous(memory_format=torch.channels_last).requires_grad_()
        out = norm(bn, x)
        assert out._base is None  # not a view: an in-place ReLU after it costs no CopySlices
        out.backward(grad)
        assert out.dtype == x.grad.dtype == dtype
        assert out.is_contiguous(memory_format=torch.channels_last)
        results.append((out.detach().float(), x.grad.float(), bn.weight.grad, bn.bias.grad))
    loose = {"atol": 0.04, "rtol": 0.01}  # one bf16 rounding more than the library's kernel
    tol = loose if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    for ours, expected in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(ours, expected, **tol)
    assert results[1][1].abs().max() > 0.5  # the input gradient is not trivially small
    torch.testing.assert_close(fast.running_mean, plain.running_mean)
    torch.testing.assert_close(fast.running_var, plain.running_var)


@pytest.mark.parametrize("max_norm", [0.5, 100.0, 1e9])
def test_clip_gradients_is_clip_grad_norm(max_norm):
    """Clipped or not, the same gradients and the same returned norm as the library."""
    from sgi_lab.runtime.device import clip_gradients

    def model_with_grads():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
        net(torch.randn(4, 6)).square().sum().backward()
        return list(net.parameters())

    ours, library = model_with_grads(), model_with_grads()
    norm = clip_gradients(ours, max_norm)
    expected = torch.nn.utils.clip_grad_norm_(library, max_norm, foreach=True)
    torch.testing.assert_close(norm, expected)
    for a, b in zip(ours, library, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    if max_norm == 0.5:  # really clipped
        clipped = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in ours]))
        torch.testing.assert_close(clipped, torch.tensor(0.5), rtol=1e-5, atol=1e-6)


def test_use_bf16_is_the_one_decision(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert use_bf16(cuda) and not use_bf16(cuda, cuda=False)
    assert not use_bf16(cpu, cpu=False) and not use_bf16(torch.device("meta"))
    assert use_bf16(cpu) == cpu_has_native_bf16()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the message of a machine without CUDA")
def test_a_cuda_device_on_a_machine_without_one_is_one_line_naming_device(tmp_path, capsys):
    from sgi_lab.config import ConfigError
    from sgi_lab.launch.cli import main
    from sgi_lab.runtime.device import resolve_device

    for name in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError, match=f"device: '{name}' is not usable here: .*device=cpu"):
            resolve_device(name)
    with pytest.raises(ConfigError, match="device: 'tpu' is not a device"):
        resolve_device("tpu")
    assert resolve_device("cpu") == torch.device("cpu")
    # through the CLI: one line, exit 2, nothing written (the run fails before its folder)
    out = tmp_path / "run"
    argv = ["finetune", "--params", "params/finetune/minatar_none.yaml", "--game",
            "minatar/breakout", "--set", "device=cuda", "--set", "steps=10", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "device: 'cuda' is not usable here" in err and "Traceback" not in err
    assert not out.exists()
    assert "--set device=" in main_hint(capsys)


def main_hint(capsys) -> str:
    """What `sgi-lab pretrain --device cuda` (an option the command does not have) says."""
    from sgi_lab.launch.cli import main

    with pytest.raises(SystemExit):
        main(["pretrain", "--params", "p", "--data", "d", "--out", "o", "--device", "cuda"])
    return capsys.readouterr().err


@pytest.mark.parametrize("max_norm", [0.5, 1e9])
def test_per_agent_clipping_is_each_agents_clip_grad_norm(max_norm):
    """A population's stacked gradients clipped per agent equal each agent's own
    ``clip_grad_norm_``; the norms are one multi-tensor pass (operators independent of the
    number of tensors), the scaling one multi-tensor product."""
    from sgi_lab.runtime.device import clip_gradients
    from sgi_lab.runtime.graphs import count_ops

    def agent_grads(seed):
        torch.manual_seed(seed)
        net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 2))
        net(torch.randn(4, 6)).square().mul(10.0**seed).sum().backward()
        return list(net.parameters())

    agents = [agent_grads(s) for s in range(3)]
    stacked = [torch.stack([a[t] for a in agents]).detach().requires_grad_() for t in range(4)]
    for t, p in enumerate(stacked):
        p.grad = torch.stack([a[t].grad for a in agents])
    ops = count_ops(lambda: clip_gradients(stacked, max_norm, host_checks=False, per_agent=True))
    for t, p in enumerate(stacked):  # the counted call clipped; start again from the raw grads
        p.grad = torch.stack([a[t].grad for a in agents])
    norms = clip_gradients(stacked, max_norm, host_checks=False, per_agent=True)
    for i, params in enumerate(agents):
        expected = torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        torch.testing.assert_close(norms[i], expected)
        for t, p in enumerate(params):
            torch.testing.assert_close(stacked[t].grad[i], p.grad)
    assert ops["_foreach_norm"] == 1 and "linalg_vector_norm" in ops
    assert ops["linalg_vector_norm"] == 1 and ops["_foreach_mul_"] == 1 and "mul_" not in ops


def test_a_cuda_training_loop_sets_tf32_explicitly():
    """Whatever a notebook or library set before, a CUDA loop starts with the `TF32` switches
    (full fp32 matmuls, TF32 cuDNN convolutions); a CPU loop leaves them alone. Settable and
    readable without a GPU."""
    from sgi_lab.runtime.device import TF32, prepare_device, tf32_settings

    before = tf32_settings()
    try:
        torch.backends.cuda.matmul.allow_tf32 = not TF32["matmul"]
        torch.backends.cudnn.allow_tf32 = not TF32["cudnn"]
        prepare_device(torch.device("cpu"))
        assert tf32_settings() == {k: not v for k, v in TF32.items()}
        prepare_device(torch.device("cuda"))
        assert tf32_settings() == TF32 == {"matmul": False, "cudnn": True}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before["matmul"]
        torch.backends.cudnn.allow_tf32 = before["cudnn"]
