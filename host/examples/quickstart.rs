//! Host to device, a kernel, device to host: the runtime's smallest program.
//!
//! `cargo run -p openreg-host --example quickstart`

use openreg_host::abi::*;
use openreg_host::{Bytes, Runtime};

fn main() -> Result<(), openreg_host::Error> {
    let rt = Runtime::from_env()?;
    println!("{} openreg devices of {} each", rt.device_count(), Bytes(rt.config().memory_bytes));

    let device = 0;
    let stream = rt.default_stream(device)?;
    let a: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..8).map(|i| 10.0 * i as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();

    let len = (a.len() * 4) as u64;
    let (pa, pb, out) =
        (rt.allocate(device, len, stream)?, rt.allocate(device, len, stream)?, rt.allocate(device, len, stream)?);
    rt.copy_to_device(stream, pa, &bytes(&a))?;
    rt.copy_to_device(stream, pb, &bytes(&b))?;
    println!("a   = {a:?} at device address {pa:#x} (openreg:{})", rt.device_of(pa).unwrap_or(u32::MAX));
    println!("b   = {b:?}");

    let add = rt.find_kernel(device, "add_f32")?;
    rt.launch(
        stream,
        add,
        &[KernelArg::Ptr(out), KernelArg::Ptr(pa), KernelArg::Ptr(pb), KernelArg::I32(a.len() as i32)],
    )?;
    let result: Vec<f32> =
        rt.copy_to_host(stream, out, len)?.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    println!("a+b = {result:?} (computed by the wasm kernel add_f32 on openreg:{device})");

    let stats = rt.stats(device)?;
    println!(
        "openreg:{device} memory: {} allocated in {} blocks, {} reserved",
        Bytes(stats.allocated_bytes),
        stats.active_blocks,
        Bytes(stats.reserved_bytes)
    );
    for p in [pa, pb, out] {
        rt.free(p)?;
    }
    Ok(())
}
