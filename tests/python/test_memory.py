"""Device memory statistics return to their baseline once tensors are freed, and
empty_cache gives cached memory back. torch.accelerator reads the same numbers."""

import weakref

import torch
from torch import nn


def test_memory_allocated_returns_to_baseline_after_tensors_are_freed(device, collect):
    collect()
    baseline = torch.openreg.memory_allocated(device)
    tensors = [torch.randn(1 << 16, device=device) for _ in range(8)]
    tensors.append(tensors[0] @ tensors[1])
    tensors.append(torch.ones(3, 3, device=device).t().contiguous())
    assert torch.openreg.memory_allocated(device) >= baseline + 8 * (1 << 18)
    probe = weakref.ref(tensors[0])
    del tensors
    collect()
    assert probe() is None
    assert torch.openreg.memory_allocated(device) == baseline


def test_training_leaves_no_memory_behind(device, collect):
    collect()
    baseline = torch.openreg.memory_allocated(device)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(16, 32, device=device)).pow(2).mean().backward()
        opt.step()
    assert torch.openreg.memory_allocated(device) > baseline
    del model, opt
    collect()
    assert torch.openreg.memory_allocated(device) == baseline


def test_empty_cache_brings_memory_reserved_down(device, collect):
    collect()
    torch.openreg.empty_cache(device)
    baseline = torch.openreg.memory_reserved(device)
    t = torch.empty(32 << 20, dtype=torch.uint8, device=device)
    t.fill_(1)
    del t
    collect()
    cached = torch.openreg.memory_reserved(device)
    assert cached >= baseline + (32 << 20), "the freed block should stay cached until empty_cache"
    torch.openreg.empty_cache(device)
    assert torch.openreg.memory_reserved(device) < cached
    assert torch.openreg.memory_reserved(device) == baseline


def test_freed_memory_is_reused(device, collect):
    collect()
    torch.empty(8 << 20, dtype=torch.uint8, device=device)
    collect()
    reserved = torch.openreg.memory_reserved(device)
    torch.empty(8 << 20, dtype=torch.uint8, device=device)
    assert torch.openreg.memory_reserved(device) == reserved


def test_torch_accelerator_memory_api_agrees(device, collect):
    t = torch.empty(1 << 20, dtype=torch.uint8, device=device)
    collect()
    idx = device.index
    assert torch.accelerator.memory_allocated(idx) == torch.openreg.memory_allocated(idx)
    assert torch.accelerator.memory_reserved(idx) == torch.openreg.memory_reserved(idx)
    assert torch.accelerator.max_memory_allocated(idx) == torch.openreg.max_memory_allocated(idx)
    free, total = torch.accelerator.get_memory_info(idx)
    assert (free, total) == torch.openreg.mem_get_info(idx)
    del t
