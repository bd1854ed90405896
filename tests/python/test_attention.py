"""scaled_dot_product_attention on openreg: the PrivateUse1 fused-attention path
(_fused_sdp_choice picks the overrideable kernel) matches the math path on CPU,
forward and backward; what it does not handle goes to the math path."""

import math

import pytest
import torch
import torch.nn.functional as F

OVERRIDEABLE, MATH = 4, 0


def _inputs(dtype, L=7, S=5, E=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, L, E, dtype=dtype, generator=g)
    k = torch.randn(2, 3, S, E, dtype=dtype, generator=g)
    v = torch.randn(2, 3, S, 6, dtype=dtype, generator=g)
    return q, k, v


CASES = {
    "plain": {},
    "causal": {"is_causal": True},
    "scale": {"scale": 0.3},
    "bool mask": {"attn_mask": "bool"},
    "float mask": {"attn_mask": "float"},
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", list(CASES))
def test_fused_attention_matches_the_math_path_forward_and_backward(case, dtype):
    q, k, v = _inputs(dtype, L=5 if case == "causal" else 7)
    kwargs = dict(CASES[case])
    mask = kwargs.pop("attn_mask", None)
    if mask == "bool":
        kwargs["attn_mask"] = torch.rand(q.shape[-2], k.shape[-2], generator=torch.Generator().manual_seed(1)) > 0.3
    elif mask == "float":
        kwargs["attn_mask"] = torch.randn(q.shape[-2], k.shape[-2], dtype=dtype).requires_grad_()
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    dev = [t.to("openreg").requires_grad_() for t in (q, k, v)]
    dev_kwargs = {key: (value.detach().to("openreg").requires_grad_(value.requires_grad)
                        if isinstance(value, torch.Tensor) else value) for key, value in kwargs.items()}
    choice_kwargs = {key: value for key, value in dev_kwargs.items() if key != "scale"}
    assert torch._fused_sdp_choice(*dev, **choice_kwargs) == OVERRIDEABLE
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(*cpu, **kwargs)
    out = F.scaled_dot_product_attention(*dev, **dev_kwargs)
    assert "FusedAttentionOverrideable" in out.grad_fn.name()
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    torch.testing.assert_close(out.cpu(), expected, **tol)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    out.backward(grad.to("openreg"))
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, **tol)
    if mask == "float":
        torch.testing.assert_close(dev_kwargs["attn_mask"].grad.cpu(), kwargs["attn_mask"].grad, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["plain", "causal", "scale", "masked row"])
def test_fused_forward_returns_the_scores_logsumexp(case, dtype):
    """The op's log-sum-exp output (one launch with the weights) against CPU's
    logsumexp of the scores, and bit for bit against openreg's own logsumexp;
    a fully masked row gives -inf, as logsumexp does."""
    q, k, v = _inputs(dtype, L=6, S=37)
    bias, causal, scale = None, case == "causal", 0.3 if case == "scale" else None
    if case == "masked row":
        bias = torch.randn(6, 37, dtype=dtype)
        bias[2] = float("-inf")
    dev = [t.to("openreg") for t in (q, k, v)]
    results = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *dev, None if bias is None else bias.to("openreg"), 0.0, causal, False, scale=scale)
    lse = results[1]
    assert lse.shape == (2, 3, 6)

    def scores(q, k, bias):
        # as the kernel computes them: the query scaled, then the product
        s = (q * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
        if causal:
            s = s.masked_fill(torch.ones(6, 37, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        return s if bias is None else s + bias

    expected = torch.logsumexp(scores(q, k, bias), -1)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    torch.testing.assert_close(lse.cpu(), expected, **tol)
    if case == "masked row":
        assert (lse[:, :, 2].cpu() == float("-inf")).all()
    own = torch.logsumexp(scores(*dev[:2], None if bias is None else bias.to("openreg")), -1)
    assert torch.equal(lse.cpu(), own.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mask", ["bool", "float"])
def test_a_row_the_mask_leaves_no_key_gives_zeros_like_the_math_path(mask, dtype):
    """A query row every key is masked from: output 0 and gradients 0 through
    it (the math path's safe softmax), not NaN; the other rows as before."""
    q, k, v = _inputs(dtype)
    keep = torch.rand(7, 5, generator=torch.Generator().manual_seed(2)) > 0.3
    keep[3] = False
    attn_mask = keep if mask == "bool" else torch.zeros(7, 5, dtype=dtype).masked_fill(~keep, float("-inf"))
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    dev = [t.to("openreg").requires_grad_() for t in (q, k, v)]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        expected = F.scaled_dot_product_attention(*cpu, attn_mask=attn_mask)
    out = F.scaled_dot_product_attention(*dev, attn_mask=attn_mask.to("openreg"))
    assert "FusedAttentionOverrideable" in out.grad_fn.name()
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    assert (out[:, :, 3].cpu() == 0).all()
    torch.testing.assert_close(out.cpu(), expected, **tol)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    out.backward(grad.to("openreg"))
    for d, c in zip(dev, cpu):
        assert torch.isfinite(d.grad.cpu()).all()
        torch.testing.assert_close(d.grad.cpu(), c.grad, **tol)


def test_half_precision_attention_computes_in_float32_like_the_math_path():
    q, k, v = (t.half() for t in _inputs(torch.float32))
    out = F.scaled_dot_product_attention(*(t.to("openreg") for t in (q, k, v)))
    assert out.dtype == torch.float16
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float()).half()
    torch.testing.assert_close(out.cpu(), expected, rtol=2e-3, atol=2e-3)


def test_what_the_fused_kernel_does_not_handle_goes_to_the_math_path():
    q, k, v = (t.to("openreg") for t in _inputs(torch.float32))
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.5) == MATH
    assert torch._fused_sdp_choice(q[0], k[0], v[0]) == MATH  # 3-d inputs
    assert torch._fused_sdp_choice(q, k[:, :1], v[:, :1], enable_gqa=True) == MATH
    torch.manual_seed(0)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert out.shape == (2, 3, 7, 6) and torch.isfinite(out.cpu()).all()
    torch.testing.assert_close(F.scaled_dot_product_attention(q[0], k[0], v[0]).cpu(),
                               F.scaled_dot_product_attention(q[0].cpu(), k[0].cpu(), v[0].cpu()), rtol=1e-5, atol=1e-5)


def test_a_transformer_encoder_layer_trains_through_the_fused_path():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    reference = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    reference.load_state_dict(layer.state_dict())
    layer = layer.to("openreg")
    x = torch.randn(3, 5, 16)
    layer(x.to("openreg")).pow(2).mean().backward()
    reference(x).pow(2).mean().backward()
    for a, b in zip(layer.parameters(), reference.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-5)
