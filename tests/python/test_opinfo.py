"""PyTorch's own OpInfo database run on openreg, with CPU as the oracle.

Every op in ``ALLOWED`` runs each of its OpInfo sample inputs on an openreg device and on
CPU, forward and (where the op supports autograd) backward, and the results must agree.
The list is an allow-list: it grows as ops are checked (device kernels replacing the CPU
fallback must keep these passing).
"""

import torch
import torch.utils._pytree as pytree
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase
from torch_openreg.coverage import FLOAT64_ORACLE

ALLOWED = {
    # elementwise
    "abs", "add", "sub", "mul", "div.no_rounding_mode", "div.floor_rounding", "neg", "exp", "log",
    "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "pow", "clamp", "maximum", "minimum", "where",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu",
    # reductions and scans
    "sum", "mean", "amax", "amin", "argmax", "cumsum", "softmax", "log_softmax",
    # linear algebra
    "matmul", "mm", "bmm", "addmm", "nn.functional.linear",
    # shape and indexing
    "t", "transpose", "permute", "reshape", "view", "flatten", "squeeze", "unsqueeze", "expand",
    "cat", "stack", "flip", "tril", "triu", "index_select", "gather", "masked_fill",
    # ops with several outputs
    "sort", "topk", "max.reduction_with_dim",
    # losses and layers
    "nn.functional.mse_loss", "nn.functional.cross_entropy", "nn.functional.layer_norm",
    "nn.functional.embedding",
}

OPS = [op for op in op_db if op.full_name in ALLOWED]

# Ops the backend claims as device kernels: each runs its OpInfo samples under the "error"
# fallback policy (so a claimed op that falls back fails) and must agree with CPU, forward and,
# where the op is differentiable, in its gradients (also computed on the device).
DEVICE = {
    "abs", "add", "sub", "mul", "div.no_rounding_mode", "div.trunc_rounding", "div.floor_rounding", "true_divide",
    "floor_divide", "remainder", "fmod", "maximum", "minimum", "neg", "positive", "sign", "sqrt", "rsqrt",
    "reciprocal", "floor", "ceil", "trunc", "round", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "erf", "tanh", "sigmoid", "lerp", "addcmul", "addcdiv", "eq", "ne", "lt", "le", "gt", "ge",
    "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_not", "isnan", "where", "clamp_min",
    "clamp_max", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "nn.functional.mish",
    "nn.functional.softplus", "nn.functional.elu", "nn.functional.selu", "nn.functional.leaky_relu",
    "nn.functional.threshold", "zero_", "fill", "full_like", "zeros_like", "ones_like", "contiguous", "clone",
    "float", "double", "half", "to", "sin", "cos", "tan", "pow", "clamp", "nn.functional.hardtanh", "nan_to_num",
    "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh",
    # reductions and scans
    "sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "max.reduction_with_dim", "max.reduction_no_dim",
    "min.reduction_with_dim", "min.reduction_no_dim", "max.binary", "min.binary", "argmax", "argmin", "aminmax",
    "all", "any", "count_nonzero", "var", "var.unbiased", "std", "std.unbiased", "var_mean", "var_mean.unbiased",
    "std_mean", "std_mean.unbiased", "linalg.vector_norm", "norm", "norm.fro", "norm.inf", "logsumexp", "cumsum",
    "cumprod", "masked_fill", "sort", "argsort", "msort", "topk",
    # indexing and data movement
    "cat", "stack", "hstack", "vstack", "flip", "fliplr", "flipud", "roll", "tril", "triu", "repeat", "arange",
    "linspace", "eye", "gather", "scatter", "scatter_add", "index_select", "index_add", "index_fill", "index_put",
    "__getitem__", "masked_select", "masked_scatter", "nonzero", "take_along_dim",
    # linear algebra
    "mm", "addmm", "addmm.decomposed", "bmm", "baddbmm", "addmv", "mv", "dot", "vdot", "inner", "matmul",
    "nn.functional.linear", "tensordot", "einsum", "linalg.multi_dot", "nn.functional.bilinear",
    # softmax and losses
    "softmax", "softmax.with_dtype", "log_softmax", "log_softmax.with_dtype", "_softmax_backward_data",
    "nn.functional.softmin", "nn.functional.linear_cross_entropy",
    "nn.functional.mse_loss", "nn.functional.nll_loss", "nn.functional.cross_entropy",
    # normalization, embedding, infinities
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.instance_norm", "nn.functional.embedding",
    "isposinf", "isneginf",
    # convolution and pooling
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.max_pool1d",
    "nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d", "nn.functional.avg_pool1d",
    "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_max_pool1d", "nn.functional.adaptive_max_pool2d",
    # upsampling and padding
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.nearest-exact", "nn.functional.interpolate.linear",
    "nn.functional.interpolate.bilinear", "nn.functional.interpolate.trilinear", "nn.functional.upsample_nearest",
    "nn.functional.upsample_bilinear", "nn.functional.pad.constant", "nn.functional.pad.reflect",
    "nn.functional.pad.replicate", "nn.functional.pad.replicate_negative", "nn.functional.pad.circular",
    # group normalization, binary cross entropy, log-sigmoid
    "nn.functional.group_norm", "native_group_norm", "nn.functional.binary_cross_entropy",
    "nn.functional.binary_cross_entropy_with_logits", "nn.functional.logsigmoid", "logit",
    # shifts, number theory, more binary and unary ops, special functions
    "bitwise_left_shift", "bitwise_right_shift", "gcd", "lcm", "logaddexp", "logaddexp2", "hypot", "copysign",
    "xlogy", "special.xlog1py", "heaviside", "fmax", "fmin", "frac", "signbit", "sinc", "round.decimals_0",
    "round.decimals_3", "round.decimals_neg_3", "erfc", "erfinv", "lgamma", "digamma", "polygamma.polygamma_n_0",
    "special.polygamma.special_polygamma_n_0", "polygamma.polygamma_n_1", "polygamma.polygamma_n_2",
    "polygamma.polygamma_n_3", "polygamma.polygamma_n_4", "mvlgamma.mvlgamma_p_1", "mvlgamma.mvlgamma_p_3",
    "mvlgamma.mvlgamma_p_5",
    # more activations and regression losses
    "nn.functional.hardsigmoid", "nn.functional.hardswish", "nn.functional.hardshrink", "nn.functional.softshrink",
    "nn.functional.glu", "nn.functional.prelu", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
    # scans with indices, order statistics, comparisons of whole tensors
    "cummax", "cummin", "logcumsumexp", "median", "nanmedian", "kthvalue", "mode", "equal", "trace",
    "dist", "nn.functional.pairwise_distance", "nn.functional.cosine_similarity", "cdist", "cross", "linalg.cross",
    # indexing, binning and ranges
    "take", "put", "index_copy", "index_reduce.prod", "index_reduce.mean", "index_reduce.amax", "index_reduce.amin",
    "scatter_reduce.sum", "scatter_reduce.prod", "scatter_reduce.mean", "scatter_reduce.amax", "scatter_reduce.amin",
    "repeat_interleave", "bincount", "histc", "searchsorted", "bucketize", "logspace", "logspace.tensor_overload",
    "isin", "tril_indices", "triu_indices", "narrow_copy", "nn.functional.pixel_shuffle", "nn.functional.pixel_unshuffle",
    "nn.functional.channel_shuffle",
    # more special functions, reverse arithmetic, batched products
    "special.entr", "special.erfcx", "special.ndtri", "special.log_ndtr", "i0", "special.i0e", "special.i1",
    "special.i1e", "signal.windows.kaiser", "angle", "renorm", "rsub", "__rsub__", "addbmm",
    # unfolding, unpooling, static nonzero
    "nn.functional.unfold", "nn.functional.max_unpool1d", "nn.functional.max_unpool2d", "nn.functional.max_unpool3d",
    "nn.functional.max_unpool1d.grad", "nn.functional.max_unpool2d.grad", "nn.functional.max_unpool3d.grad",
    "nonzero_static", "nn.functional.embedding_bag", "nn.functional.cosine_embedding_loss",
    "nn.functional.hinge_embedding_loss", "nn.functional.conv3d", "nn.functional.conv_transpose3d",
    "nn.functional.max_pool3d", "nn.functional.avg_pool3d", "nn.functional.adaptive_avg_pool3d",
    "nn.functional.adaptive_max_pool3d", "nn.functional.local_response_norm",
    "_native_batch_norm_legit", "_batch_norm_with_update",
}
DEVICE_OPS = [op for op in op_db if op.full_name in DEVICE]

# Ops compared with CPU's float64 results rounded to float32: FLOAT64_ORACLE, shared with the
# coverage tool.

# Composite ops may decompose differently on a PrivateUse1 device than on CPU (layer_norm
# does), so float32 results can differ in the last bits.
RTOL, ATOL = 1e-5, 1e-4


def _cpu(tree):
    return pytree.tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, tree)


def _tensors(tree):
    return [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


class TestOpenRegOpInfo(TestCase):
    def test_allow_list_names_real_ops(self, device):
        self.assertEqual(ALLOWED - {op.full_name for op in OPS}, set())

    @ops(OPS, allowed_dtypes=(torch.float32,))
    def test_forward_matches_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype):
            cpu = sample.transform(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x)
            expected = op(cpu.input, *cpu.args, **cpu.kwargs)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            for t in _tensors(actual):
                self.assertEqual(t.device.type, "openreg")
            torch.testing.assert_close(
                _cpu(actual), expected, rtol=RTOL, atol=ATOL, equal_nan=True, msg=lambda m: f"{sample}: {m}"
            )

    @ops([op for op in OPS if op.supports_autograd], allowed_dtypes=(torch.float32,))
    def test_gradients_match_cpu(self, device, dtype, op):
        for sample in op.sample_inputs(device, dtype, requires_grad=True):
            cpu = sample.transform(
                lambda x: x.detach().cpu().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
            )
            results = []
            for s in (sample, cpu):
                out = [t for t in _tensors(op(s.input, *s.args, **s.kwargs)) if t.requires_grad]
                inputs = [t for t in _tensors((s.input, s.args, s.kwargs)) if t.requires_grad]
                if not out or not inputs:
                    break
                loss = sum((t.float() * (i + 1)).sum() for i, t in enumerate(out))
                results.append(torch.autograd.grad(loss, inputs, allow_unused=True))
            if len(results) == 2:
                torch.testing.assert_close(_cpu(results[0]), results[1], rtol=RTOL, atol=ATOL, equal_nan=True)


def _on_cpu(sample, dtype=None):
    """The sample with its tensors, and any device argument, on the CPU (floating tensors
    converted to `dtype` when given)."""

    def move(x):
        if isinstance(x, torch.Tensor):
            x_cpu = x.detach().cpu()
            if dtype is not None and x_cpu.is_floating_point():
                x_cpu = x_cpu.to(dtype)
            return x_cpu.requires_grad_(x.requires_grad)
        if isinstance(x, torch.device) or (isinstance(x, str) and x.startswith("openreg")):
            return torch.device("cpu")
        return x

    cpu = sample.transform(move)  # tensors only
    cpu.args = tuple(move(a) for a in cpu.args)
    cpu.kwargs = {k: move(v) for k, v in cpu.kwargs.items()}
    return cpu


# Ops whose choice among equal elements is unspecified (an unstable sort, topk, CPU's
# quickselect for kthvalue and median, the run CPU's mode reports): their indices are compared
# by the values they select, not by position.
TIE_ORDER_FREE = {"sort", "argsort", "topk", "kthvalue", "median", "nanmedian", "mode"}


def _ties_resolved(name, cpu, actual, expected):
    if name != "argsort" and not isinstance(actual, (tuple, list)):
        return actual, expected  # a value without indices (median() of everything)
    a, kw = cpu.args, cpu.kwargs
    if name in ("topk", "kthvalue"):
        dim = kw.get("dim", a[1] if len(a) > 1 else -1)
    else:
        dim = kw.get("dim", a[0] if a and isinstance(a[0], int) else -1)
    source = cpu.input.detach()
    dim = dim % source.dim()

    def picked(indices):
        # indices of a reduction without keepdim lack the dimension they index
        kept = indices.dim() == source.dim()
        values = torch.take_along_dim(source, indices if kept else indices.unsqueeze(dim), dim)
        return values if kept else values.squeeze(dim)

    if name == "argsort":
        return picked(actual), picked(expected)
    return (actual[0], picked(actual[1])), (expected[0], picked(expected[1]))


def _pooled_by_value(source, grads):
    # The input's gradient summed over each set of equal input values (ties pooled), so that
    # picking a different one of equal elements gives the same result; other gradients as they are.
    _, inverse = torch.unique(source.flatten(), return_inverse=True)
    grad = grads[0]
    pooled = None
    if grad is not None:
        pooled = torch.zeros(int(inverse.max()) + 1, dtype=grad.dtype).index_add_(0, inverse, grad.flatten())
    return (pooled, *grads[1:])


class TestOpenRegDeviceKernels(TestCase):
    def test_claims_name_real_ops(self, device):
        self.assertEqual(DEVICE - {op.full_name for op in DEVICE_OPS}, set())

    @ops(DEVICE_OPS, allowed_dtypes=(torch.float32, torch.float64, torch.int64, torch.bool))
    def test_claimed_op_runs_on_the_device_and_matches_cpu(self, device, dtype, op):
        # Samples are made first (random numbers are not device kernels yet), then the op runs
        # with the fallback refused.
        oracle = torch.float64 if dtype == torch.float32 and op.full_name in FLOAT64_ORACLE else None
        for sample in list(op.sample_inputs(device, dtype)):
            cpu = _on_cpu(sample, oracle)
            try:
                expected = op(cpu.input, *cpu.args, **cpu.kwargs)
                if oracle is not None:
                    expected = pytree.tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) else t, expected)
            except Exception as error:  # noqa: BLE001 - CPU's refusal must be the device's too
                with self.assertRaises(type(error)), torch.openreg.fallback_policy("error"):
                    op(sample.input, *sample.args, **sample.kwargs)
                continue
            with torch.openreg.fallback_policy("error"):
                actual = op(sample.input, *sample.args, **sample.kwargs)
            if op.name in TIE_ORDER_FREE and cpu.input.dim() > 0:
                actual, expected = _ties_resolved(op.name, cpu, _cpu(actual), expected)
            torch.testing.assert_close(
                _cpu(actual), expected, rtol=RTOL, atol=ATOL, equal_nan=True, msg=lambda m: f"{sample}: {m}"
            )

    @ops([op for op in DEVICE_OPS if op.supports_autograd], allowed_dtypes=(torch.float32,))
    def test_claimed_op_gradients_match_cpu(self, device, dtype, op):
        # Forward and backward both run with the fallback refused: the gradient is computed on
        # the device too.
        oracle = torch.float64 if op.full_name in FLOAT64_ORACLE else None
        for sample in list(op.sample_inputs(device, dtype, requires_grad=True)):
            cpu = _on_cpu(sample, oracle)
            results = []
            for s, policy in ((sample, "error"), (cpu, "allow")):
                with torch.openreg.fallback_policy(policy):
                    out = [t for t in _tensors(op(s.input, *s.args, **s.kwargs)) if t.requires_grad]
                    inputs = [t for t in _tensors((s.input, s.args, s.kwargs)) if t.requires_grad]
                    if not out or not inputs:
                        break
                    seeds = [torch.full_like(t, float(i + 1)) for i, t in enumerate(out)]
                    results.append(torch.autograd.grad(out, inputs, seeds, allow_unused=True))
            if len(results) == 2:
                expected = pytree.tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) else t, results[1])
                actual = _cpu(results[0])
                if op.name in TIE_ORDER_FREE and cpu.input.unique().numel() < cpu.input.numel():
                    # the gradient lands where each side's pick among equal values is
                    source = cpu.input.detach()
                    actual, expected = _pooled_by_value(source, actual), _pooled_by_value(source, expected)
                torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, equal_nan=True)


instantiate_device_type_tests(TestOpenRegDeviceKernels, globals(), only_for="openreg")
instantiate_device_type_tests(TestOpenRegOpInfo, globals(), only_for="openreg")
