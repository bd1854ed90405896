//! Runtime benchmarks, each against a native baseline measured in the same run.
//!
//! `cargo run --release -p openreg-host --example bench [-- --markdown FILE]`
//! (`make bench` runs it and writes the table into `docs/performance.md`).

use std::hint::black_box;
use std::time::{Duration, Instant};

use openreg_host::abi::*;
use openreg_host::{Config, Runtime};

/// The best (shortest) of `reps` runs of `f`.
fn best<F: FnMut()>(reps: usize, mut f: F) -> Duration {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

struct Row {
    what: String,
    openreg: String,
    native: String,
    ratio: String,
}

fn main() -> Result<(), openreg_host::Error> {
    let markdown = std::env::args().skip_while(|a| a != "--markdown").nth(1);
    let mut rows = Vec::new();

    // Bring-up: runtime, first device (compiles the built-in library), second device.
    let t = Instant::now();
    let rt = Runtime::new(Config::default())?;
    let runtime_new = t.elapsed();
    let t = Instant::now();
    rt.properties(0)?;
    let first_device = t.elapsed();
    let t = Instant::now();
    rt.properties(1)?;
    let second_device = t.elapsed();
    rows.push(Row {
        what: "bring up: runtime / first device (compiles built-ins) / next device".into(),
        openreg: format!(
            "{:.2} ms / {:.2} ms / {:.3} ms",
            runtime_new.as_secs_f64() * 1e3,
            first_device.as_secs_f64() * 1e3,
            second_device.as_secs_f64() * 1e3
        ),
        native: "-".into(),
        ratio: "-".into(),
    });

    let s = rt.default_stream(0)?;
    let noop = rt.find_kernel(0, "noop")?;

    // Launch overhead: enqueue + execute an empty kernel, amortised over a queue.
    let n = 200_000;
    let queued = best(5, || {
        for _ in 0..n {
            rt.launch(s, noop, &[]).unwrap();
        }
        rt.synchronize_stream(s).unwrap();
    });
    let round_trip = best(5, || {
        for _ in 0..2000 {
            rt.launch(s, noop, &[]).unwrap();
            rt.synchronize_stream(s).unwrap();
        }
    });
    rows.push(Row {
        what: "empty kernel launch, queued back to back (per launch)".into(),
        openreg: format!("{:.0} ns", queued.as_nanos() as f64 / n as f64),
        native: "-".into(),
        ratio: "-".into(),
    });
    // The same with a parameter block: the engine's elementwise kernel copying one
    // float32 (a 776-byte block, two relocated device addresses), as every torch op
    // on the device launches it.
    let one = rt.allocate(0, 8, s)?;
    let mut bytes = vec![0u8; 776];
    let mut put = |at: usize, v: &[u8]| bytes[at..at + v.len()].copy_from_slice(v);
    put(0, &1u32.to_le_bytes()); // op: COPY
    put(8, &2u32.to_le_bytes()); // two operands
    put(12, &1u32.to_le_bytes()); // one dimension
    put(16, &6u32.to_le_bytes()); // float32 out
    put(20, &6u32.to_le_bytes()); // float32 in
    put(40, &1i64.to_le_bytes()); // one element
    put(168, &(one + 4).to_le_bytes());
    put(176, &one.to_le_bytes());
    put(200, &4i64.to_le_bytes());
    put(328, &4i64.to_le_bytes());
    let block = ParamBlock { bytes, pointers: vec![168, 176] };
    let elementwise = rt.module_kernel(0, openreg_host::ENGINE_MODULE, "elementwise")?;
    let per_launch = |worker: KernelArg, workers: KernelArg| {
        let elapsed = best(5, || {
            for _ in 0..n {
                let args = [KernelArg::Params(block.clone()), worker.clone(), workers.clone()];
                rt.launch(s, elementwise, &args).unwrap();
            }
            rt.synchronize_stream(s).unwrap();
        });
        format!("{:.0} ns", elapsed.as_nanos() as f64 / n as f64)
    };
    rows.push(Row {
        what: "engine launch with a 776-byte parameter block, 1-element op, queued (per launch)".into(),
        openreg: per_launch(KernelArg::I32(0), KernelArg::I32(1)),
        native: "-".into(),
        ratio: "-".into(),
    });
    rows.push(Row {
        what: format!(
            "the same launch run on all {} workers of the device (a parallel launch), queued (per launch)",
            rt.config().workers
        ),
        openreg: per_launch(KernelArg::WorkerIndex, KernelArg::WorkerCount),
        native: "-".into(),
        ratio: "-".into(),
    });
    rows.push(Row {
        what: "empty kernel launch + stream synchronize (round trip)".into(),
        openreg: format!("{:.1} us", round_trip.as_secs_f64() * 1e6 / 2000.0),
        native: "-".into(),
        ratio: "-".into(),
    });

    // Copies: 64 MiB host <-> device against a host memcpy of the same size.
    let len = 64usize << 20;
    let host: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut back = vec![0u8; len];
    let mut other = vec![0u8; len];
    let dev = rt.allocate(0, len as u64, s)?;
    rt.copy_to_device(s, dev, &host)?; // touch the device pages once
    let h2d = best(10, || rt.copy_to_device(s, dev, &host).unwrap());
    let d2h = best(10, || rt.copy_to_host_slice(s, &mut back, dev).unwrap());
    assert_eq!(back, host);
    let memcpy = best(10, || {
        other.copy_from_slice(black_box(&host));
        black_box(&other);
    });
    for (what, d) in [("host to device, 64 MiB", h2d), ("device to host, 64 MiB", d2h)] {
        rows.push(Row {
            what: what.into(),
            openreg: format!("{:.1} GB/s", gbps(len as u64, d)),
            native: format!("{:.1} GB/s (memcpy)", gbps(len as u64, memcpy)),
            ratio: format!("{:.2}x", memcpy.as_secs_f64() / d.as_secs_f64()),
        });
    }

    // Giving memory back: empty_cache returns a freed 256 MiB segment's pages to
    // the OS, and the next allocation faults them in again as it is written.
    // Against the same write into cached, resident memory.
    let big = 256usize << 20;
    let fill = vec![1u8; big];
    let p = rt.allocate(0, big as u64, s)?;
    rt.copy_to_device(s, p, &fill)?;
    let warm = best(5, || rt.copy_to_device(s, p, &fill).unwrap());
    rt.free(p)?;
    let (mut release, mut refault) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        let t = Instant::now();
        rt.empty_cache(0)?;
        release = release.min(t.elapsed());
        let p = rt.allocate(0, big as u64, s)?;
        let t = Instant::now();
        rt.copy_to_device(s, p, &fill)?;
        refault = refault.min(t.elapsed());
        rt.free(p)?;
    }
    rows.push(Row {
        what: "empty_cache releasing a written 256 MiB segment (pages back to the OS)".into(),
        openreg: format!("{:.1} ms", release.as_secs_f64() * 1e3),
        native: "-".into(),
        ratio: "-".into(),
    });
    rows.push(Row {
        what: "writing 256 MiB into released memory (pages fault back in)".into(),
        openreg: format!("{:.1} GB/s", gbps(big as u64, refault)),
        native: format!("{:.1} GB/s (into cached memory)", gbps(big as u64, warm)),
        ratio: format!("{:.2}x", warm.as_secs_f64() / refault.as_secs_f64()),
    });

    // 16M-element f32 add: the wasm SIMD kernel against a native Rust loop.
    let n = 16usize << 20;
    let bytes = (n * 4) as u64;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let to_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (pa, pb, po) = (rt.allocate(0, bytes, s)?, rt.allocate(0, bytes, s)?, rt.allocate(0, bytes, s)?);
    rt.copy_to_device(s, pa, &to_bytes(&a))?;
    rt.copy_to_device(s, pb, &to_bytes(&b))?;
    let add = rt.find_kernel(0, "add_f32")?;
    let args = [KernelArg::Ptr(po), KernelArg::Ptr(pa), KernelArg::Ptr(pb), KernelArg::I32(n as i32)];
    rt.launch(s, add, &args)?;
    rt.synchronize_stream(s)?;
    let wasm_add = best(10, || {
        rt.launch(s, add, &args).unwrap();
        rt.synchronize_stream(s).unwrap();
    });
    let mut out = vec![0f32; n];
    let native_add = best(10, || {
        for ((o, x), y) in out.iter_mut().zip(black_box(&a)).zip(black_box(&b)) {
            *o = x + y;
        }
        black_box(&out);
    });
    let check = rt.copy_to_host(s, po + 4 * 12345, 4)?;
    assert_eq!(f32::from_le_bytes(check.try_into().unwrap()), a[12345] + b[12345]);
    let traffic = 3 * bytes;
    rows.push(Row {
        what: "add_f32, 16M elements (bytes read + written)".into(),
        openreg: format!("{:.1} GB/s", gbps(traffic, wasm_add)),
        native: format!("{:.1} GB/s (Rust loop)", gbps(traffic, native_add)),
        ratio: format!("{:.2}x", native_add.as_secs_f64() / wasm_add.as_secs_f64()),
    });

    let mut table =
        String::from("| measurement | openreg | native, same run | openreg / native speed |\n|---|---|---|---|\n");
    for r in &rows {
        table.push_str(&format!("| {} | {} | {} | {} |\n", r.what, r.openreg, r.native, r.ratio));
    }
    print!("{table}");
    if let Some(path) = markdown {
        write_section(&path, &table).map_err(|e| openreg_host::Error::InvalidArgument(format!("{path}: {e}")))?;
        println!("wrote {path}");
    }
    Ok(())
}

/// Replaces the runtime section of the performance report with `table`.
fn write_section(path: &str, table: &str) -> std::io::Result<()> {
    const BEGIN: &str = "<!-- runtime-bench:begin -->";
    const END: &str = "<!-- runtime-bench:end -->";
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let section = format!(
        "{BEGIN}\nMeasured by `make bench` (`host/examples/bench.rs`, release build) on {machine}, {} cores. \
         Best of several runs; the native column is measured in the same process.\n\n{table}{END}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) => format!("{}{section}{}", &old[..b], &old[e + END.len()..]),
        _ => format!("{old}{section}\n"),
    };
    std::fs::write(path, new)
}
