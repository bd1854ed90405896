//! Configuration from the environment. Its own test binary, with one test, so
//! that setting variables races no other thread of the process.

use openreg_host::Config;

const MIB: u64 = 1 << 20;

#[test]
fn configuration_comes_from_the_environment_and_bad_values_are_named() {
    std::env::set_var("OPENREG_DEVICE_COUNT", "3");
    std::env::set_var("OPENREG_DEVICE_MEMORY", "96MiB");
    let config = Config::from_env().unwrap();
    assert_eq!((config.device_count, config.memory_bytes), (3, 96 * MIB));
    std::env::set_var("OPENREG_DEVICE_MEMORY", "lots");
    let err = Config::from_env().unwrap_err();
    assert!(err.to_string().starts_with("OPENREG_DEVICE_MEMORY=\"lots\""), "{err}");
    std::env::remove_var("OPENREG_DEVICE_COUNT");
    std::env::remove_var("OPENREG_DEVICE_MEMORY");

    // The compile cache: on unless turned off, under the cache directory
    // (else under $XDG_CACHE_HOME's torch_openreg).
    std::env::remove_var("OPENREG_COMPILE_CACHE");
    std::env::set_var("XDG_CACHE_HOME", "/xdg");
    let config = Config::from_env().unwrap();
    assert_eq!(config.compile_cache.as_deref(), Some(std::path::Path::new("/xdg/torch_openreg/compiled")));
    std::env::set_var("OPENREG_CACHE_DIR", "/some/cache");
    let config = Config::from_env().unwrap();
    assert_eq!(config.compile_cache.as_deref(), Some(std::path::Path::new("/some/cache/compiled")));
    assert_eq!(Config::default().compile_cache, None);
    std::env::set_var("OPENREG_COMPILE_CACHE", "0");
    assert_eq!(Config::from_env().unwrap().compile_cache, None);
    std::env::set_var("OPENREG_COMPILE_CACHE", "sometimes");
    let err = Config::from_env().unwrap_err();
    assert!(err.to_string().starts_with("OPENREG_COMPILE_CACHE=\"sometimes\""), "{err}");
    std::env::remove_var("OPENREG_COMPILE_CACHE");
    std::env::remove_var("OPENREG_CACHE_DIR");
    std::env::remove_var("XDG_CACHE_HOME");
}
