//! Runtime configuration, from code or from the environment.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OPENREG_DEVICE_COUNT` | number of devices | 2 |
//! | `OPENREG_DEVICE_MEMORY` | memory per device: bytes, or `512MiB`, `4GiB`, `8G` | 4 GiB |
//! | `OPENREG_MEMORY64` | `1` gives devices 64-bit (memory64) addressing, needed above 4 GiB | 0 |
//! | `OPENREG_KERNEL_TIMEOUT_MS` | watchdog limit for one kernel launch | 30000 |
//! | `OPENREG_DEVICE_THREADS` | worker threads per device, for parallel launches (1 to 16) | the host's cores, at most 16 |
//! | `OPENREG_PERF_MAP` | `1` writes `/tmp/perf-<pid>.map`, so `perf` names the wasm functions it samples | 0 |
//! | `OPENREG_COMPILE_CACHE` | `0` compiles the built-in modules in every process instead of keeping their machine code in `$OPENREG_CACHE_DIR/compiled` | 1 |
//! | `OPENREG_CACHE_DIR` | the cache directory, shared with `torch_openreg.kernels` | `$XDG_CACHE_HOME/torch_openreg`, else `~/.cache/torch_openreg` |

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Bytes, Error, Result};
use crate::layout;

/// How many devices there are and what each one looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Number of virtual devices.
    pub device_count: u32,
    /// Bytes of linear memory per device (a multiple of 64 KiB).
    pub memory_bytes: u64,
    /// Whether devices use 64-bit (memory64) addressing.
    pub memory64: bool,
    /// Longest a single kernel launch may run before the watchdog stops it.
    pub kernel_timeout: Duration,
    /// Worker threads per device: how many calls a parallel launch makes at once.
    pub workers: u32,
    /// Whether compiled wasm functions are listed in `/tmp/perf-<pid>.map`
    /// for Linux `perf` (wasmtime's perf map).
    pub perf_map: bool,
    /// Where the built-in modules' machine code is kept between processes, so
    /// that only the first process after a build compiles them (about 2 s on
    /// two cores). `None` compiles them in every process.
    pub compile_cache: Option<PathBuf>,
}

/// The largest memory a 32-bit device can have.
pub const MAX_MEMORY32: u64 = 1 << 32;
/// The largest memory a memory64 device can have here (address space per device).
pub const MAX_MEMORY64: u64 = 1 << 40;
/// The most worker threads a device can have: each needs a slice of the
/// kernel stack (`layout.rs`), and more workers than cores only add overhead.
pub const MAX_WORKERS: u32 = 16;

/// The default number of workers per device: the host's hardware threads, at most [`MAX_WORKERS`].
fn default_workers() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32).min(MAX_WORKERS)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            device_count: 2,
            memory_bytes: 4 << 30,
            memory64: false,
            kernel_timeout: Duration::from_secs(30),
            workers: default_workers(),
            perf_map: false,
            compile_cache: None,
        }
    }
}

impl Config {
    /// The default configuration, overridden by the `OPENREG_*` environment variables.
    pub fn from_env() -> Result<Config> {
        let mut config = Config::default();
        if let Some(v) = env("OPENREG_DEVICE_COUNT") {
            config.device_count = v.trim().parse().map_err(|_| Error::Config {
                var: "OPENREG_DEVICE_COUNT",
                value: v.clone(),
                reason: "expected a whole number of devices".into(),
            })?;
        }
        if let Some(v) = env("OPENREG_DEVICE_MEMORY") {
            config.memory_bytes = parse_size(&v).ok_or_else(|| Error::Config {
                var: "OPENREG_DEVICE_MEMORY",
                value: v.clone(),
                reason: "expected a size such as 536870912, 512MiB, 4GiB or 8G".into(),
            })?;
        }
        if let Some(v) = env("OPENREG_MEMORY64") {
            config.memory64 = flag("OPENREG_MEMORY64", v)?;
        }
        if let Some(v) = env("OPENREG_PERF_MAP") {
            config.perf_map = flag("OPENREG_PERF_MAP", v)?;
        }
        if let Some(v) = env("OPENREG_KERNEL_TIMEOUT_MS") {
            let ms: u64 = v.trim().parse().map_err(|_| Error::Config {
                var: "OPENREG_KERNEL_TIMEOUT_MS",
                value: v.clone(),
                reason: "expected milliseconds as a whole number".into(),
            })?;
            config.kernel_timeout = Duration::from_millis(ms);
        }
        if let Some(v) = env("OPENREG_DEVICE_THREADS") {
            config.workers = v.trim().parse().map_err(|_| Error::Config {
                var: "OPENREG_DEVICE_THREADS",
                value: v.clone(),
                reason: "expected a whole number of threads".into(),
            })?;
        }
        let cache = match env("OPENREG_COMPILE_CACHE") {
            Some(v) => flag("OPENREG_COMPILE_CACHE", v)?,
            None => true,
        };
        config.compile_cache = cache.then(user_cache_dir).flatten().map(|dir| dir.join("compiled"));
        config.validate()?;
        Ok(config)
    }

    /// Checks that the values can make working devices.
    pub fn validate(&self) -> Result<()> {
        let bad = |var, value: String, reason: String| Err(Error::Config { var, value, reason });
        if self.device_count == 0 || self.device_count > 64 {
            return bad(
                "OPENREG_DEVICE_COUNT",
                self.device_count.to_string(),
                "between 1 and 64 devices are supported".into(),
            );
        }
        let max = if self.memory64 { MAX_MEMORY64 } else { MAX_MEMORY32 };
        if self.memory_bytes < layout::MIN_CAPACITY
            || self.memory_bytes > max
            || !self.memory_bytes.is_multiple_of(layout::WASM_PAGE)
        {
            return bad(
                "OPENREG_DEVICE_MEMORY",
                self.memory_bytes.to_string(),
                format!(
                    "device memory must be a multiple of 64 KiB between {} and {}{}",
                    Bytes(layout::MIN_CAPACITY),
                    Bytes(max),
                    if self.memory64 { "" } else { " (set OPENREG_MEMORY64=1 for more)" }
                ),
            );
        }
        if self.workers == 0 || self.workers > MAX_WORKERS {
            return bad(
                "OPENREG_DEVICE_THREADS",
                self.workers.to_string(),
                format!("between 1 and {MAX_WORKERS} worker threads per device are supported"),
            );
        }
        if self.kernel_timeout.is_zero() {
            return bad("OPENREG_KERNEL_TIMEOUT_MS", "0".into(), "the watchdog limit must be positive".into());
        }
        Ok(())
    }
}

/// `$OPENREG_CACHE_DIR`, else `torch_openreg` in `$XDG_CACHE_HOME` or
/// `~/.cache`: where `torch_openreg.kernels` keeps its builds too.
fn user_cache_dir() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = var("OPENREG_CACHE_DIR") {
        return Some(dir);
    }
    let base = var("XDG_CACHE_HOME").or_else(|| std::env::home_dir().map(|home| home.join(".cache")))?;
    Some(base.join("torch_openreg"))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// An on/off variable: `1`, `true`, `yes`, `on` or their opposites.
fn flag(var: &'static str, v: String) -> Result<bool> {
    match v.trim() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err(Error::Config { var, value: v, reason: "expected 0 or 1".into() }),
    }
}

/// Parses `4096`, `512KiB`, `512MiB`, `4GiB`, `8G`, `1TiB` (binary units).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let number: u64 = digits.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    number.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("4GiB"), Some(4 << 30));
        assert_eq!(parse_size(" 8G "), Some(8 << 30));
        assert_eq!(parse_size("1.5GiB"), None);
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("99999999999999TiB"), None);
    }

    #[test]
    fn flags_take_the_usual_spellings_and_refuse_others() {
        for on in ["1", "true", "yes", "on", " 1 "] {
            assert!(flag("OPENREG_PERF_MAP", on.into()).unwrap(), "{on}");
        }
        for off in ["0", "false", "no", "off"] {
            assert!(!flag("OPENREG_PERF_MAP", off.into()).unwrap(), "{off}");
        }
        let err = flag("OPENREG_PERF_MAP", "maybe".into()).unwrap_err();
        assert!(err.to_string().contains("OPENREG_PERF_MAP"), "{err}");
    }

    #[test]
    fn validate_rejects_memory_a_32_bit_device_cannot_address() {
        let config = Config { memory_bytes: 8 << 30, ..Config::default() };
        let err = config.validate().unwrap_err();
        assert!(err.to_string().contains("OPENREG_MEMORY64=1"), "{err}");
        let config = Config { memory_bytes: 8 << 30, memory64: true, ..Config::default() };
        config.validate().unwrap();
    }

    #[test]
    fn validate_rejects_zero_devices_and_tiny_memories() {
        assert!(Config { device_count: 0, ..Config::default() }.validate().is_err());
        assert!(Config { memory_bytes: 1 << 20, ..Config::default() }.validate().is_err());
        assert!(Config { memory_bytes: (64 << 20) + 1, ..Config::default() }.validate().is_err());
        assert!(Config { workers: 0, ..Config::default() }.validate().is_err());
        assert!(Config { workers: MAX_WORKERS + 1, ..Config::default() }.validate().is_err());
    }
}
