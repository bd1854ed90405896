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


instantiate_device_type_tests(TestOpenRegOpInfo, globals(), only_for="openreg")
