"""User kernels from Python (``torch_openreg.kernels``): loading, binding to
operators, launching, and what happens when a module or a kernel is bad.

The kernels here are small WAT modules written inline; the Rust and C paths
(and the SDK's tensor views) are covered by the examples in
``examples/kernels/`` (``test_kernel_examples.py``).
"""

import pathlib

import pytest
import torch

from torch_openreg import kernels

from adversarial.adversary import run_python


def python_output(code: str, **env: str) -> str:
    """What ``code`` prints (stdout and stderr) in a fresh interpreter."""
    done = run_python(code, **env)
    return done.stdout + done.stderr

HEADER = """(module
  (import "env" "memory" (memory 1))
  (global (export "__data_end") i32 (i32.const 1024))
  (global (export "__heap_base") i32 (i32.const 1024))"""


def wat(body: str) -> str:
    return f"{HEADER}\n{body})"


# scale(x: view, f: f32, out: view): out = f * x for contiguous float32 x.
# Reads the descriptor: data at +0 (u64), numel at +8 (i64).
SCALE = wat("""
  (func (export "scale") (param $x i32) (param $f f32) (param $out i32)
    (local $i i32) (local $n i32) (local $src i32) (local $dst i32)
    (local.set $n (i32.wrap_i64 (i64.load offset=8 (local.get $x))))
    (local.set $src (i32.wrap_i64 (i64.load (local.get $x))))
    (local.set $dst (i32.wrap_i64 (i64.load (local.get $out))))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (f32.store (i32.add (local.get $dst) (i32.shl (local.get $i) (i32.const 2)))
        (f32.mul (local.get $f) (f32.load (i32.add (local.get $src) (i32.shl (local.get $i) (i32.const 2))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l))))
  (func (export "add_ptr") (param $out i32) (param $a i32) (param $b i32) (param $n i32) (local $i i32)
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (f32.store (local.get $out) (f32.add (f32.load (local.get $a)) (f32.load (local.get $b))))
      (local.set $out (i32.add (local.get $out) (i32.const 4)))
      (local.set $a (i32.add (local.get $a) (i32.const 4)))
      (local.set $b (i32.add (local.get $b) (i32.const 4)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l))))
  (func (export "copy_descriptor") (param $x i32) (param $out i32)
    (memory.copy (i32.wrap_i64 (i64.load (local.get $out))) (local.get $x) (i32.const 160)))
  (func (export "whoami") (param $out i32) (param $w i32) (param $n i32)
    (i32.store (i32.add (local.get $out) (i32.shl (local.get $w) (i32.const 2)))
      (i32.add (i32.mul (local.get $n) (i32.const 100)) (local.get $w))))
  (func (export "abort") (param $x i32) (param $out i32) unreachable)
  (func (export "forever") (param $x i32) (param $out i32) (loop $l (br $l)))
  (func (export "wild_store") (param $x i32) (param $out i32)
    (f32.store (i32.const -16) (f32.const 1)))""")


@pytest.fixture(scope="module")
def module():
    return kernels.load(SCALE, name="test_kernels")


@pytest.fixture(scope="module")
def scale(module):
    @kernels.custom_op("openreg_test::scale", module["scale"])
    def scale(x: torch.Tensor, f: float) -> torch.Tensor:
        """Scales a contiguous float32 tensor."""
        return torch.empty_like(x)

    return scale


def test_load_lists_kernels_with_their_parameter_types(module):
    assert module.name == "test_kernels"
    assert module["scale"].params == ("i32", "f32", "i32")
    assert module["add_ptr"].params == ("i32", "i32", "i32", "i32")
    assert "scale" in module and "nope" not in module
    with pytest.raises(KeyError, match="has no kernel 'nope'; it exports scale, add_ptr"):
        module["nope"]


def test_load_takes_text_bytes_and_paths_and_returns_one_module_per_content(module, tmp_path):
    assert kernels.load(SCALE, name="test_kernels") is module
    assert kernels.load(SCALE.encode(), name="test_kernels") is module
    text = tmp_path / "test_kernels.wat"
    text.write_text(SCALE)
    assert kernels.load(text) is module  # the name is the file's stem
    binary = kernels.build(text, tmp_path / "out" / "test_kernels.wasm")
    assert binary.read_bytes().startswith(b"\0asm")
    from_binary = kernels.load(binary)
    assert from_binary.kernels.keys() == module.kernels.keys()
    with pytest.raises(FileNotFoundError, match="no kernel module or source"):
        kernels.load(tmp_path / "missing.wasm")
    with pytest.raises(TypeError, match="takes a path, bytes or WAT text"):
        kernels.load(42)


def test_a_custom_op_runs_its_kernel_on_the_device_and_matches_cpu(scale, device):
    x = torch.randn(1000)
    with torch.openreg.device(device):
        torch.openreg.reset_op_counts()
        y = torch.ops.openreg_test.scale(x.to(device), 2.5)
    assert y.device == device
    torch.testing.assert_close(y.cpu(), x * 2.5)
    torch.testing.assert_close(scale(x.to(device), -1.0).cpu(), -x)
    assert torch.ops.openreg_test.scale(torch.empty(0, device=device), 1.0).shape == (0,)


def test_a_custom_op_passes_opcheck(scale):
    x = torch.randn(33, device="openreg")
    torch.library.opcheck(scale, (x, 3.0))


def test_a_custom_op_runs_in_order_on_the_current_stream(scale):
    x = torch.ones(1 << 16, device="openreg")
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        y = scale(x, 2.0)
        z = scale(y, 3.0)  # reads y: queued after it on the same stream
    torch.openreg.current_stream().wait_stream(side)
    assert torch.equal(z.cpu(), torch.full((1 << 16,), 6.0))


def test_a_tensor_reaches_the_kernel_as_a_descriptor_with_sizes_strides_and_dtype(module):
    copy = module["copy_descriptor"]
    base = torch.arange(60, dtype=torch.float64, device="openreg").reshape(3, 4, 5)
    views = {
        "contiguous": base,
        "transposed": base.transpose(0, 2),
        "sliced": base[1:, ::2, 3],
        "expanded": torch.zeros(3, 1, dtype=torch.int16, device="openreg").expand(3, 7),
        "scalar": torch.tensor(5, dtype=torch.uint8, device="openreg"),
    }
    data = {}
    for label, view in views.items():
        out = torch.zeros(20, dtype=torch.int64, device="openreg")
        copy(view, out)
        d = out.cpu().tolist()
        data[label] = d[0]
        assert d[1] == view.numel(), label
        assert d[2] & 0xFFFFFFFF == kernels.DTYPE_CODES[view.dtype], label
        assert d[2] >> 32 == view.dim(), label
        assert d[3] & 0xFFFFFFFF == view.element_size(), label
        assert d[3] >> 32 == (1 if view.is_contiguous() else 0), label
        assert d[4 : 4 + view.dim()] == list(view.shape), label
        assert d[12 : 12 + view.dim()] == list(view.stride()), label
        assert d[4 + view.dim() : 12] == [0] * (8 - view.dim()), label
    # `data` is the device offset of the first element: the storage offset applies.
    assert data["sliced"] - data["contiguous"] == (20 + 3) * 8


def test_args_maps_op_arguments_to_kernel_parameters(module):
    @kernels.custom_op("openreg_test::add", module["add_ptr"], args=lambda a, b, out: (kernels.ptr(out), kernels.ptr(a), kernels.ptr(b), a.numel()))
    def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(a)

    a, b = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(add(a.to("openreg"), b.to("openreg")).cpu(), a + b)


def test_an_op_that_mutates_its_input_returns_nothing(module):
    @kernels.custom_op("openreg_test::scale_", module["scale"], mutates_args=("x",), args=lambda x, f: (x, f, x))
    def scale_(x: torch.Tensor, f: float) -> None:
        return None

    x = torch.arange(8.0, device="openreg")
    assert scale_(x, 0.5) is None
    torch.testing.assert_close(x.cpu(), torch.arange(8.0) * 0.5)


def test_a_backward_formula_makes_the_op_differentiable(module):
    @kernels.custom_op("openreg_test::scale_grad", module["scale"])
    def scale_grad(x: torch.Tensor, f: float) -> torch.Tensor:
        return torch.empty_like(x)

    def backward(ctx, grad):
        return scale_grad(grad.contiguous(), ctx.f), None

    def setup_context(ctx, inputs, output):
        ctx.f = inputs[1]

    scale_grad.register_autograd(backward, setup_context=setup_context)
    x = torch.randn(16, device="openreg", requires_grad=True)
    (scale_grad(x, 3.0) ** 2).sum().backward()
    expected = 2 * (x.detach().cpu() * 3.0) * 3.0
    torch.testing.assert_close(x.grad.cpu(), expected)
    torch.library.opcheck(scale_grad, (torch.randn(5, device="openreg"), 2.0))
    # With inputs that require grad, opcheck's autograd-registration check
    # raises NotImplementedError for any device but CPU/CUDA/XPU (torch 2.15);
    # every other check runs, the backward formula included.
    grad_checks = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    x = torch.randn(5, device="openreg", requires_grad=True)
    torch.library.opcheck(scale_grad, (x, 2.0), test_utils=grad_checks)


def test_a_kernel_launches_directly_with_pointers_and_counts(module):
    a, b = torch.randn(10, device="openreg"), torch.randn(10, device="openreg")
    out = torch.empty(10, device="openreg")
    module["add_ptr"](kernels.ptr(out), kernels.ptr(a), kernels.ptr(b), 10)
    torch.testing.assert_close(out.cpu(), (a + b).cpu())
    side = torch.openreg.Stream(device=1)
    a1, out1 = a.to("openreg:1"), torch.empty(10, device="openreg:1")
    with pytest.raises(ValueError, match="the stream is on openreg:1, the launch on openreg:0"):
        kernels.launch(module["add_ptr"], kernels.ptr(out), kernels.ptr(a), kernels.ptr(b), 10, stream=side)
    kernels.launch(module["add_ptr"], kernels.ptr(out1), kernels.ptr(a1), kernels.ptr(a1), 10, stream=side)
    side.synchronize()
    torch.testing.assert_close(out1.cpu(), 2 * a.cpu())


def test_relaxed_simd_has_one_result_on_every_host_a_madd_is_fused():
    # (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24 exactly; rounding the product first
    # gives 0. The runtime compiles relaxed SIMD in wasmtime's deterministic
    # mode, where relaxed_madd is fused whether or not the CPU has FMA.
    module = kernels.load(wat("""
  (func (export "madd") (param $out i32) (param $a i32) (param $b i32) (param $c i32)
    (v128.store (local.get $out)
      (f32x4.relaxed_madd (v128.load (local.get $a)) (v128.load (local.get $b)) (v128.load (local.get $c)))))"""),
        name="test_relaxed_simd")
    x = 1 + 2.0**-12
    a = torch.tensor([x, x, 3.0, -x], device="openreg")
    b = torch.tensor([x, -x, 0.5, x], device="openreg")
    c = torch.tensor([-(1 + 2.0**-11), 1 + 2.0**-11, 1.0, 1 + 2.0**-11], device="openreg")
    out = torch.empty(4, device="openreg")
    module["madd"](kernels.ptr(out), kernels.ptr(a), kernels.ptr(b), kernels.ptr(c))
    assert out.cpu().tolist() == [2.0**-24, -(2.0**-24), 2.5, -(2.0**-24)]


def test_a_launch_with_worker_arguments_runs_once_on_every_worker(module):
    workers = torch.openreg.get_device_properties(0).workers
    out = torch.full((20,), -1, dtype=torch.int32, device="openreg")
    module["whoami"](kernels.ptr(out), kernels.WORKER_INDEX, kernels.WORKER_COUNT)
    expected = [100 * workers + w for w in range(workers)] + [-1] * (20 - workers)
    assert out.cpu().tolist() == expected
    # Without them it runs once, with the values given.
    out.fill_(-1)
    module["whoami"](kernels.ptr(out), 3, 7)
    assert out.cpu().tolist()[:5] == [-1, -1, -1, 703, -1]
    with pytest.raises(TypeError, match="argument 1 is a str"):
        module["whoami"](kernels.ptr(out), "worker-index", 1)


def test_launch_arguments_are_checked_against_the_signature_and_devices(module):
    a = torch.randn(4, device="openreg")
    add = module["add_ptr"]
    with pytest.raises(ValueError, match="takes 4 arguments, 3 given"):
        add(kernels.ptr(a), kernels.ptr(a), kernels.ptr(a))
    with pytest.raises(ValueError, match="parameter 3 is i32 but the argument is the float 1.5"):
        add(kernels.ptr(a), kernels.ptr(a), kernels.ptr(a), 1.5)
    with pytest.raises(RuntimeError, match="argument 1 is on openreg:1 and an earlier one on openreg:0"):
        add(kernels.ptr(a), kernels.ptr(a.to("openreg:1")), kernels.ptr(a), 4)
    with pytest.raises(RuntimeError, match="argument 0 is a tensor on cpu"):
        add(kernels.ptr(a.cpu()), kernels.ptr(a), kernels.ptr(a), 4)
    with pytest.raises(TypeError, match="argument 3 is a str"):
        add(kernels.ptr(a), kernels.ptr(a), kernels.ptr(a), "4")
    with pytest.raises(TypeError, match="complex64 tensor, which a kernel cannot take"):
        module["copy_descriptor"](torch.zeros(2, dtype=torch.complex64, device="openreg"), a)
    # A raw address of another device's memory is refused before anything runs.
    other = torch.zeros(4, device="openreg:1")
    with pytest.raises(RuntimeError, match="is on openreg:1, but the operation runs on openreg:0"):
        add(kernels.ptr(a), other.data_ptr(), kernels.ptr(a), 4)
    assert torch.equal(other.cpu(), torch.zeros(4))


def test_binding_checks_the_kernel_signature_and_the_schema(module):
    def too_few(a: torch.Tensor, b: torch.Tensor) -> None:
        return None

    with pytest.raises(ValueError, match="takes 4 parameters .* but the op passes 2: the inputs, then the outputs"):
        kernels.custom_op("openreg_test::bad1", module["add_ptr"])(too_few)

    def wrong_order(x: torch.Tensor, out_scale: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    with pytest.raises(ValueError, match="out_scale is a tensor, passed as i32 or i64, but kernel 'scale' takes f32"):
        kernels.custom_op("openreg_test::bad2", module["scale"])(wrong_order)

    def takes_list(x: list[torch.Tensor]) -> torch.Tensor:
        return torch.empty_like(x[0])

    with pytest.raises(TypeError, match="argument 'x' is a List\\[Tensor\\]"):
        kernels.custom_op("openreg_test::bad3", module["scale"])(takes_list)
    with pytest.raises(ValueError, match="has a namespace"):
        kernels.custom_op("bad4", module["scale"])
    with pytest.raises(TypeError, match="takes a Kernel"):
        kernels.custom_op("openreg_test::bad5", "scale")


def test_a_custom_op_refuses_cpu_and_mixed_device_inputs(scale, module):
    with pytest.raises(NotImplementedError):
        scale(torch.ones(3), 2.0)

    @kernels.custom_op("openreg_test::mixed", module["add_ptr"], args=lambda a, b, out: (kernels.ptr(out), kernels.ptr(a), kernels.ptr(b), a.numel()))
    def mixed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(a)

    with pytest.raises(RuntimeError, match="expected all tensors to be on the same device"):
        mixed(torch.ones(3, device="openreg:0"), torch.ones(3, device="openreg:1"))


@pytest.mark.parametrize("kernel", ["abort", "wild_store"])
def test_a_trap_names_the_op_the_kernel_and_the_device_and_the_device_stays_usable(module, kernel):
    name = f"openreg_test::fault_{kernel}"

    @kernels.custom_op(name, module[kernel])
    def fault(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    x = torch.ones(4, device="openreg:1")
    fault(x)  # queued: the fault surfaces at the next synchronizing call
    trap = "unreachable" if kernel == "abort" else "out-of-bounds"
    with pytest.raises(RuntimeError, match=f"operator `{name}` \\(kernel `{kernel}`\\) trapped on openreg:1: {trap}"):
        torch.openreg.synchronize(1)
    torch.testing.assert_close((x + 1).cpu(), torch.full((4,), 2.0))


def test_the_watchdog_stops_an_endless_kernel_and_names_the_op(tmp_path):
    module_path = tmp_path / "forever.wat"
    module_path.write_text(SCALE)
    code = f"""
import torch, torch_openreg
from torch_openreg import kernels
m = kernels.load({str(module_path)!r})
@kernels.custom_op("openreg_test::forever", m["forever"])
def forever(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)
x = torch.ones(4, device="openreg")
forever(x)
try:
    torch.openreg.synchronize()
except RuntimeError as e:
    print("ERROR", e)
print("AFTER", (x * 3).cpu().tolist())
"""
    out = python_output(code, OPENREG_KERNEL_TIMEOUT_MS="300")
    assert "ERROR operator `openreg_test::forever` (kernel `forever`) on openreg:0 ran longer than the watchdog limit of 300 ms" in out
    assert "AFTER [3.0, 3.0, 3.0, 3.0]" in out


BROKEN = {
    "not wasm": (b"\x00asm\x05\x00\x00\x00garbage", "not a valid wasm module"),
    "text that is not WAT": ("(module (func (export \"k\") (i32.bogus)))", "not a wasm module"),
    "host import": (
        '(module (import "env" "memory" (memory 1)) (import "env" "print" (func $print (param i32)))\n'
        '  (func (export "k") (param i32) (call $print (local.get 0))))',
        "it imports `env.print`; a kernel module may import only its memory",
    ),
    "start function": (wat('(func $init) (start $init)\n  (func (export "k"))'), "has a start function"),
    "returns a value": (wat('(func (export "k") (result i32) (i32.const 1))'), "export `k` returns values; kernels return nothing"),
    "v128 parameter": (wat('(func (export "k") (param v128))'), "kernel `k` parameter 0 is v128"),
    "no kernels": (wat(""), "exports no functions"),
    "own memory": (
        '(module (memory 1) (func (export "k")))',
        "defines its own memory",
    ),
    "data outside the static area": (
        wat('(data (i32.const 0x1000000) "x")\n  (func (export "k"))'),
        "static data .* lies outside the device's static area",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=list(BROKEN))
def test_a_broken_module_is_rejected_at_load_with_what_to_fix(case):
    source, message = BROKEN[case]
    with pytest.raises(ValueError, match=message):
        kernels.load(source, name=f"broken {case}")
    assert torch.equal((torch.ones(2, device="openreg") * 2).cpu(), torch.full((2,), 2.0))


def test_modules_whose_static_data_overlaps_are_rejected_with_a_free_address():
    def with_data(value):
        return (
            '(module (import "env" "memory" (memory 1))\n'
            '  (global (export "__data_end") i32 (i32.const 0x20100))\n'
            f'  (data (i32.const 0x20000) "{value}")\n'
            '  (func (export "k")))'
        )

    kernels.load(with_data("a"), name="static_a")
    with pytest.raises(ValueError, match="conflicts with `static_a` .* link it at a free address, e.g. `-Wl,--global-base="):
        kernels.load(with_data("b"), name="static_b")


def test_the_kernel_sdk_sources_are_written_out_for_compilers():
    sdk = kernels.sdk_dir()
    assert (sdk / "openreg_kernel.h").read_text().startswith("/*")
    assert "pub struct Tensor" in (sdk / "openreg_kernel.rs").read_text()
    assert "typedef struct openreg_tensor" in (sdk / "openreg_kernel.h").read_text()


def test_build_says_what_to_install_when_no_compiler_is_found(tmp_path):
    src = tmp_path / "k.c"
    src.write_text("void k(void) {}\n")
    out = python_output(
        f"""
from torch_openreg import kernels
try:
    kernels.build({str(src)!r})
except kernels.KernelBuildError as e:
    print("ERROR", e)
""",
        OPENREG_WASM_CC="/nonexistent/clang",
        OPENREG_WASM_RUSTC="/nonexistent/rustc",
    )
    assert "ERROR no C compiler for wasm32 kernels: tried /nonexistent/clang ($OPENREG_WASM_CC): not found" in out
    assert "apt-get install clang-19 lld-19" in out


def test_build_reports_the_compilers_message(tmp_path):
    src = tmp_path / "broken.c"
    src.write_text("#include <openreg_kernel.h>\nOPENREG_KERNEL(k) void k(void) { undefined_call(); }\n")
    with pytest.raises(kernels.KernelBuildError, match="(?s)broken.c did not compile:.*undefined_call"):
        kernels.build(src)
    with pytest.raises(ValueError, match="kernel sources are .rs \\(Rust\\), .c \\(C\\) or .wat"):
        kernels.build(pathlib.Path(__file__))


def test_the_command_line_builds_and_lists_kernels(tmp_path):
    src = tmp_path / "cli.wat"
    src.write_text(SCALE)
    out = python_output(
        "import sys\nfrom torch_openreg.kernels.__main__ import main\n"
        f"print('BUILD', main(['build', {str(src)!r}, '-o', {str(tmp_path / 'cli.wasm')!r}]))\n"
        f"print('INFO', main(['info', {str(tmp_path / 'cli.wasm')!r}]))\n"
        f"print('MISSING', main(['build', {str(tmp_path / 'missing.c')!r}]))\n"
    )
    assert "BUILD 0" in out and (tmp_path / "cli.wasm").read_bytes().startswith(b"\0asm")
    assert "  scale(i32, f32, i32)" in out and "INFO 0" in out
    assert "MISSING 1" in out
