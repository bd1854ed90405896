//! The device ABI, generated from `wit/` by `build.rs`: the WIT types as Rust
//! types, and one trait per WIT interface (`DevicesApi`, `MemoryApi`,
//! `CopiesApi`, `KernelsApi`, `StreamsApi`, `EventsApi`, `ActivityApi`), all implemented by
//! [`crate::Runtime`]. Bring them into scope with `use openreg_host::abi::*`.

include!(concat!(env!("OUT_DIR"), "/abi.rs"));
