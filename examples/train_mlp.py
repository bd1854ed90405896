"""The main job: train a small MLP on an openreg device and show what ran where.

Run with `make demo`. The model learns y = sin(x0) + x1 * x2 on random data,
first on openreg:0, then the same steps on the CPU as the oracle; it also moves
the trained model to openreg:1 to show a second device.
"""

import time

import torch
import torch_openreg  # noqa: F401  (registers the openreg devices; `import torch` alone also does, by autoload)


# Ops that allocate, view or move data rather than compute: left out of the compute share.
BOOKKEEPING = {
    "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::_reshape_alias",
    "aten::_copy_from", "aten::_copy_from_and_resize", "aten::resize_", "aten::_local_scalar_dense",
    "aten::set_.source_Storage", "aten::set_.source_Storage_storage_offset", "aten::set_.source_Tensor",
}


def make_data(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = (torch.sin(x[:, 0]) + x[:, 1] * x[:, 2]).unsqueeze(1)
    return x, y


def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))


def train(device, steps=300):
    x, y = make_data()
    x, y = x.to(device), y.to(device)
    model = make_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, losses, time.perf_counter() - start


def main():
    print(f"torch {torch.__version__}; accelerator: {torch.accelerator.current_accelerator()}; "
          f"{torch.openreg.device_count()} openreg devices")
    torch.openreg.reset_op_counts()
    model, losses, seconds = train("openreg:0")
    print(f"\ntrained on openreg:0: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {len(losses)} steps ({seconds:.2f} s)")
    _, cpu_losses, cpu_seconds = train("cpu")
    worst = max(abs(a - b) for a, b in zip(losses, cpu_losses))
    print(f"same steps on cpu:   loss {cpu_losses[0]:.4f} -> {cpu_losses[-1]:.4f} ({cpu_seconds:.2f} s); "
          f"largest loss difference {worst:.2e}")
    print("  (device kernels and torch's CPU kernels round some results differently in the last bit: the device's\n"
          "  float32 sqrt is correctly rounded, the CPU's is not, and their tanh differ by up to an ulp; the late\n"
          "  loss oscillates at this learning rate, and 300 Adam steps amplify such differences into a shift of it)")
    per_step, cpu_per_step = seconds / len(losses) * 1e3, cpu_seconds / len(cpu_losses) * 1e3
    print(f"time per step: openreg {per_step:.2f} ms, cpu {cpu_per_step:.2f} ms "
          f"(openreg takes {per_step / cpu_per_step:.1f}x CPU's time; {torch.get_num_threads()} CPU threads, "
          f"{torch.openreg.get_device_properties(0).workers} workers per device)")

    stats = torch.openreg.memory_stats(0)
    print(f"\nopenreg:0 memory: {torch.openreg.memory_allocated(0) / 2**20:.2f} MiB allocated, "
          f"{torch.openreg.memory_reserved(0) / 2**20:.2f} MiB reserved, "
          f"peak {torch.openreg.max_memory_allocated(0) / 2**20:.2f} MiB, "
          f"{stats['allocation.all.allocated']} allocations")

    on_second = model.to("openreg:1")
    probe = torch.tensor([[0.5, -1.0, 2.0]], device="openreg:1")
    print(f"model moved to {next(on_second.parameters()).device}: f([0.5, -1, 2]) = {on_second(probe).item():.4f} "
          f"(target {torch.sin(torch.tensor(0.5)).item() - 2.0:.4f})")

    counts = torch.openreg.op_counts()
    compute = {name: c for name, c in counts.items() if name not in BOOKKEEPING}
    on_device = sum(c["device"] for c in compute.values())
    total = on_device + sum(c["fallback"] for c in compute.values())
    rest = ("none through the CPU fallback" if on_device == total
            else "the rest through the CPU fallback (copied to the host and back)")
    print(f"\ncompute ops: {on_device} of {total} runs ({100 * on_device / max(total, 1):.0f}%) computed by "
          f"WebAssembly kernels on the device, {rest}; "
          f"not counted: {sum(c['device'] + c['fallback'] for n, c in counts.items() if n in BOOKKEEPING)} "
          f"allocations, views and copies")
    top = sorted(compute.items(), key=lambda kv: -(kv[1]["device"] + kv[1]["fallback"]))[:14]
    width = max(len(name) for name, _ in top)
    for name, c in top:
        print(f"  {name:<{width}}  device {c['device']:>6}  fallback {c['fallback']:>6}")


if __name__ == "__main__":
    main()
