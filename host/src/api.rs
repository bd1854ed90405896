//! The device ABI implemented: one `impl` per WIT interface, generated trait by
//! generated trait, so the signatures here are the WIT's.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use wasmtime::Val;

use crate::abi::*;
use crate::device::{lock, Task, WorkerArg, PRIORITY_GREATEST, PRIORITY_LEAST};
use crate::error::{Error, Result};
use crate::event::EventInner;
use crate::layout;
use crate::memory_view::HostPtr;
use crate::runtime::Runtime;

/// The alignment of each parameter block of a launch in the parameter area.
const PARAMS_ALIGN: usize = 16;

impl DevicesApi for Runtime {
    fn device_count(&self) -> u32 {
        self.inner.config.device_count
    }

    fn properties(&self, device: DeviceIndex) -> Result<DeviceProperties> {
        let dev = self.inner.device(device)?;
        Ok(DeviceProperties {
            index: device,
            capacity_bytes: dev.capacity,
            memory64: dev.memory64,
            kernel_timeout_ms: self.inner.config.kernel_timeout.as_millis() as u64,
            workers: self.inner.config.workers,
        })
    }

    fn device_of(&self, ptr: DevicePtr) -> Option<DeviceIndex> {
        self.inner.decode(ptr).ok().map(|(device, _)| device)
    }
}

impl MemoryApi for Runtime {
    fn allocate(&self, device: DeviceIndex, size: u64, stream: StreamRef) -> Result<DevicePtr> {
        if stream.device != device {
            return Err(Error::WrongDevice {
                what: format!("stream {}", stream.id),
                expected: device,
                actual: stream.device,
            });
        }
        let dev = self.inner.device(device)?;
        dev.check_stream(stream.id)?;
        if size == 0 {
            return Ok(0);
        }
        let offset = lock(&dev.allocator).allocate(size, stream.id, &**dev)?;
        Ok(self.inner.space.address(device, offset))
    }

    fn free(&self, ptr: DevicePtr) -> Result<()> {
        // A fork child owns none of the blocks it inherited: nothing to free.
        if ptr == 0 || crate::in_bad_fork() {
            return Ok(());
        }
        let (device, offset) = self.inner.decode(ptr)?;
        let dev = self.inner.device(device)?;
        let result = lock(&dev.allocator).free(offset, &|s| dev.ticket(s));
        result.map_err(|_| Error::InvalidPointer {
            ptr,
            reason: "not an allocated block (freed twice, or never allocated)",
        })
    }

    fn record_stream(&self, ptr: DevicePtr, stream: StreamRef) -> Result<()> {
        if ptr == 0 {
            return self.inner.device(stream.device)?.check_stream(stream.id);
        }
        let (dev, offset) = self.inner.region(ptr, 0, stream.device, "recorded")?;
        dev.check_stream(stream.id)?;
        let result = lock(&dev.allocator).record_stream(offset, stream.id);
        result.map_err(|_| Error::InvalidPointer { ptr, reason: "not the start of an allocated block" })
    }

    fn stats(&self, device: DeviceIndex) -> Result<MemoryStats> {
        Ok(lock(&self.inner.device(device)?.allocator).stats())
    }

    fn reset_peak_stats(&self, device: DeviceIndex) -> Result<()> {
        lock(&self.inner.device(device)?.allocator).reset_peaks();
        Ok(())
    }

    fn reset_accumulated_stats(&self, device: DeviceIndex) -> Result<()> {
        lock(&self.inner.device(device)?.allocator).reset_accumulated();
        Ok(())
    }

    fn empty_cache(&self, device: DeviceIndex) -> Result<()> {
        let dev = self.inner.device(device)?;
        lock(&dev.allocator).empty_cache(&**dev);
        Ok(())
    }

    fn mem_get_info(&self, device: DeviceIndex) -> Result<MemoryInfo> {
        let dev = self.inner.device(device)?;
        let alloc = lock(&dev.allocator);
        Ok(MemoryInfo { free_bytes: alloc.total() - alloc.stats().reserved_bytes, total_bytes: dev.capacity })
    }
}

impl CopiesApi for Runtime {
    fn copy_to_device(&self, stream: StreamRef, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return self.inner.device(stream.device)?.check_stream(stream.id);
        }
        let len = src.len() as u64;
        let (dev, offset) = self.inner.region(dst, len, stream.device, "destination")?;
        // Blocking until the copy has run (or was cancelled) keeps `src` borrowed while it is read.
        dev.copy_blocking(stream.id, Task::CopyIn { dst: offset, src: HostPtr(src.as_ptr().cast_mut()), len })
    }

    fn copy_to_host(&self, stream: StreamRef, src: DevicePtr, len: u64) -> Result<Vec<u8>> {
        if len > 0 {
            // Check before allocating the host buffer: a bad length is an error, not an abort.
            self.inner.region(src, len, stream.device, "source")?;
        }
        let len =
            usize::try_from(len).map_err(|_| Error::InvalidArgument(format!("{len} bytes do not fit host memory")))?;
        let mut out = vec![0u8; len];
        self.copy_to_host_slice(stream, &mut out, src)?;
        Ok(out)
    }

    unsafe fn copy_to_device_async(&self, stream: StreamRef, dst: DevicePtr, src: u64, len: u64) -> Result<()> {
        if len == 0 {
            return self.inner.device(stream.device)?.check_stream(stream.id);
        }
        let (dev, offset) = self.inner.region(dst, len, stream.device, "destination")?;
        dev.enqueue(stream.id, Task::CopyIn { dst: offset, src: HostPtr(src as *mut u8), len }).map(drop)
    }

    unsafe fn copy_to_host_async(&self, stream: StreamRef, dst: u64, src: DevicePtr, len: u64) -> Result<()> {
        if len == 0 {
            return self.inner.device(stream.device)?.check_stream(stream.id);
        }
        let (dev, offset) = self.inner.region(src, len, stream.device, "source")?;
        dev.enqueue(stream.id, Task::CopyOut { src: offset, dst: HostPtr(dst as *mut u8), len }).map(drop)
    }

    fn copy_device_to_device(
        &self,
        stream: StreamRef,
        dst_device: DeviceIndex,
        dst: DevicePtr,
        src_device: DeviceIndex,
        src: DevicePtr,
        len: u64,
    ) -> Result<()> {
        if stream.device != src_device && stream.device != dst_device {
            return Err(Error::WrongDevice {
                what: format!("the stream of a copy from openreg:{src_device} to openreg:{dst_device}"),
                expected: dst_device,
                actual: stream.device,
            });
        }
        let runner = self.inner.device(stream.device)?;
        if len == 0 {
            return runner.check_stream(stream.id);
        }
        let (source, src_offset) = self.inner.region(src, len, src_device, "source")?;
        let (dest, dst_offset) = self.inner.region(dst, len, dst_device, "destination")?;
        let task = if src_device == dst_device {
            Task::CopyWithin { dst: dst_offset, src: src_offset, len }
        } else {
            Task::CopyPeer { from: Arc::clone(source), src: src_offset, to: Arc::clone(dest), dst: dst_offset, len }
        };
        runner.enqueue(stream.id, task).map(drop)
    }
}

impl KernelsApi for Runtime {
    fn load_module(&self, device: DeviceIndex, name: &str, wasm: &[u8]) -> Result<ModuleId> {
        self.load(device, name, wasm)
    }

    fn module_kernels(&self, device: DeviceIndex, module: ModuleId) -> Result<Vec<KernelInfo>> {
        Ok(self.inner.device(device)?.module(module)?.kernels().to_vec())
    }

    fn find_kernel(&self, device: DeviceIndex, name: &str) -> Result<KernelRef> {
        let dev = self.inner.device(device)?;
        let modules = dev.modules.read().unwrap_or_else(|e| e.into_inner());
        let found: Vec<_> = modules.iter().filter_map(|m| m.kernel_index(name).map(|index| (m, index))).collect();
        match found.as_slice() {
            [(m, index)] => Ok(KernelRef { module: m.id, index: *index as u32 }),
            [] => Err(Error::KernelNotFound { device, name: name.to_string() }),
            many => Err(Error::InvalidArgument(format!(
                "kernel `{name}` is exported by several modules on openreg:{device} ({}); launch it through its module id",
                many.iter().map(|(m, _)| format!("{} = {}", m.id, m.module.name)).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn module_kernel(&self, device: DeviceIndex, module: ModuleId, name: &str) -> Result<KernelRef> {
        let index = self
            .inner
            .device(device)?
            .module(module)?
            .kernel_index(name)
            .ok_or_else(|| Error::KernelNotFound { device, name: format!("{name} (in module {module})") })?;
        Ok(KernelRef { module, index: index as u32 })
    }

    fn params_max_bytes(&self) -> u32 {
        layout::PARAMS_MAX as u32
    }

    fn launch(&self, stream: StreamRef, kernel: KernelRef, args: &[KernelArg]) -> Result<()> {
        self.enqueue_launch(stream, kernel, args, None)
    }

    fn launch_op(&self, stream: StreamRef, kernel: KernelRef, args: &[KernelArg], op: &str) -> Result<()> {
        self.enqueue_launch(stream, kernel, args, Some(op.into()))
    }
}

impl Runtime {
    /// Checks a launch against the kernel's signature, relocates its pointers
    /// and parameter blocks, and queues it; `op` names the operator it runs for.
    fn enqueue_launch(
        &self,
        stream: StreamRef,
        kernel: KernelRef,
        args: &[KernelArg],
        op: Option<Box<str>>,
    ) -> Result<()> {
        let dev = self.inner.device(stream.device)?;
        let module = dev.module(kernel.module)?;
        let index = kernel.index as usize;
        let info = module.kernels().get(index).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "module {} on openreg:{} has no kernel {index} (it has {})",
                kernel.module,
                stream.device,
                module.kernels().len()
            ))
        })?;
        if info.params.len() != args.len() {
            return Err(Error::InvalidArgument(format!(
                "kernel `{}` takes {} arguments, {} given",
                info.name,
                info.params.len(),
                args.len()
            )));
        }
        let pointer_type = if dev.memory64 { ValueType::I64 } else { ValueType::I32 };
        let pointer = |offset: u64| if dev.memory64 { Val::I64(offset as i64) } else { Val::I32(offset as u32 as i32) };
        let mut vals = Vec::with_capacity(args.len());
        let mut worker_args = Vec::new();
        // The parameter blocks, back to back at 16-byte aligned offsets.
        let mut params: Vec<u8> = Vec::new();
        for (i, (param, arg)) in info.params.iter().zip(args).enumerate() {
            let val = match (param, arg) {
                (p, KernelArg::Ptr(ptr)) if *p == pointer_type => pointer(self.kernel_offset(*ptr, stream.device)?),
                (p, KernelArg::Params(block)) if *p == pointer_type => {
                    let at = params.len().next_multiple_of(PARAMS_ALIGN);
                    let end = at as u64 + block.bytes.len() as u64;
                    if end > layout::PARAMS_MAX {
                        return Err(Error::InvalidArgument(format!(
                            "kernel `{}`: its parameter blocks take {end} bytes (each aligned to {PARAMS_ALIGN}), more \
                             than the {} bytes of the parameter area",
                            info.name,
                            layout::PARAMS_MAX
                        )));
                    }
                    params.resize(at, 0);
                    params.extend_from_slice(&self.relocate(block, stream.device, &info.name)?);
                    pointer(layout::PARAMS_START + at as u64)
                }
                (ValueType::I32, KernelArg::I32(v)) => Val::I32(*v),
                (ValueType::I32, KernelArg::WorkerIndex) => {
                    worker_args.push((i, WorkerArg::Index));
                    Val::I32(0)
                }
                (ValueType::I32, KernelArg::WorkerCount) => {
                    worker_args.push((i, WorkerArg::Count));
                    Val::I32(1)
                }
                (ValueType::I64, KernelArg::I64(v)) => Val::I64(*v),
                (ValueType::F32, KernelArg::F32(v)) => Val::F32(v.to_bits()),
                (ValueType::F64, KernelArg::F64(v)) => Val::F64(v.to_bits()),
                (param, arg) => {
                    return Err(Error::InvalidArgument(format!(
                        "kernel `{}` parameter {i} is {} but the argument is {arg:?}",
                        info.name,
                        param.wit_name()
                    )))
                }
            };
            vals.push(val);
        }
        let params = (!params.is_empty()).then(|| params.into_boxed_slice());
        dev.enqueue(stream.id, Task::Launch { module, kernel: index, args: vals, params, op, worker_args }).map(drop)
    }

    /// The bytes of a parameter block as the kernel sees them: every device
    /// address in it checked to be on `device` and replaced by its offset.
    fn relocate(&self, block: &ParamBlock, device: DeviceIndex, kernel: &str) -> Result<Box<[u8]>> {
        let mut bytes = block.bytes.clone().into_boxed_slice();
        for &at in &block.pointers {
            let at = at as usize;
            let slot = bytes.get_mut(at..at.saturating_add(8)).filter(|s| s.len() == 8).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "kernel `{kernel}`: pointer position {at} lies outside the {}-byte parameter block",
                    block.bytes.len()
                ))
            })?;
            let ptr = u64::from_le_bytes(slot.try_into().expect("8 bytes"));
            slot.copy_from_slice(&self.kernel_offset(ptr, device)?.to_le_bytes());
        }
        Ok(bytes)
    }

    /// The offset a kernel on `device` receives for a pointer argument.
    fn kernel_offset(&self, ptr: DevicePtr, device: DeviceIndex) -> Result<u64> {
        if ptr == 0 {
            return Ok(0);
        }
        self.inner.region(ptr, 0, device, "kernel argument").map(|(_, offset)| offset)
    }
}

impl StreamsApi for Runtime {
    fn stream_priority_range(&self) -> PriorityRange {
        PriorityRange { least: PRIORITY_LEAST, greatest: PRIORITY_GREATEST }
    }

    fn default_stream(&self, device: DeviceIndex) -> Result<StreamRef> {
        self.inner.device(device)?;
        Ok(StreamRef { device, id: 0 })
    }

    fn create_stream(&self, device: DeviceIndex, priority: i32) -> Result<StreamRef> {
        let id = self.inner.device(device)?.create_stream(priority);
        Ok(StreamRef { device, id })
    }

    fn stream_priority(&self, stream: StreamRef) -> Result<i32> {
        self.inner.device(stream.device)?.stream_priority(stream.id)
    }

    fn query_stream(&self, stream: StreamRef) -> Result<bool> {
        self.inner.device(stream.device)?.query(stream.id)
    }

    fn synchronize_stream(&self, stream: StreamRef) -> Result<()> {
        self.inner.device(stream.device)?.wait(stream.id, None)
    }

    fn wait_event(&self, stream: StreamRef, event: EventId) -> Result<()> {
        let dev = self.inner.device(stream.device)?;
        let event = self.inner.event(event)?;
        dev.check_stream(stream.id)?;
        let generation = event.wait_target(dev);
        if event.is_complete(generation) {
            return Ok(());
        }
        dev.enqueue(stream.id, Task::Wait { event, generation }).map(drop)
    }

    fn synchronize_device(&self, device: DeviceIndex) -> Result<()> {
        self.inner.device(device)?.synchronize()
    }
}

impl EventsApi for Runtime {
    fn create_event(&self, enable_timing: bool) -> EventId {
        let id = self.inner.next_event.fetch_add(1, Ordering::Relaxed);
        lock(&self.inner.events).insert(id, EventInner::new(id, enable_timing));
        id
    }

    fn destroy_event(&self, event: EventId) -> Result<()> {
        lock(&self.inner.events)
            .remove(&event)
            .map(drop)
            .ok_or(Error::InvalidEvent { event, reason: "no such event (destroyed twice?)" })
    }

    fn record_event(&self, event: EventId, stream: StreamRef) -> Result<()> {
        let dev = self.inner.device(stream.device)?;
        dev.record(stream.id, self.inner.event(event)?)
    }

    fn query_event(&self, event: EventId) -> Result<bool> {
        Ok(self.inner.event(event)?.query())
    }

    fn synchronize_event(&self, event: EventId) -> Result<()> {
        let event = self.inner.event(event)?;
        if let Some(dev) = event.device().and_then(|d| self.inner.device(d).ok()) {
            dev.help_until(|| event.query());
        }
        event.synchronize()
    }

    fn elapsed_time(&self, start: EventId, end: EventId) -> Result<f32> {
        self.inner.event(start)?.elapsed_ms(&*self.inner.event(end)?)
    }
}
