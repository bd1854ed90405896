/*
 * openreg_kernel.h: the OpenReg kernel SDK for C.
 *
 * A kernel module in C is one or more translation units compiled with clang
 * (LLVM 13 or newer, with lld's wasm-ld) to a wasm32 core module that imports
 * the device memory:
 *
 *   clang --target=wasm32-unknown-unknown -nostdlib -O3 -msimd128 -mbulk-memory \
 *     -I path/to/device-kernels/sdk \
 *     -Wl,--no-entry -Wl,--import-memory -Wl,-z,stack-size=65536 \
 *     -Wl,--export=__data_end -Wl,--export=__heap_base \
 *     -o my_kernels.wasm my_kernels.c
 *
 * What each flag is for:
 *   --target=wasm32-unknown-unknown  32-bit wasm, no OS, no libc.
 *   -nostdlib                        link no C library or crt1.o: there is none.
 *   -O3                              kernels are hot loops.
 *   -msimd128                        wasm SIMD (128-bit vectors, wasm_simd128.h).
 *   -mbulk-memory                    memset/memcpy/memmove become memory.fill /
 *                                    memory.copy (without it the link fails on an
 *                                    undefined `memset`).
 *   -Wl,--no-entry                   a library of kernels: no `_start`.
 *   -Wl,--import-memory              the module's memory is the device memory,
 *                                    imported as `env.memory`.
 *   -Wl,-z,stack-size=65536          keep the linker's stack reservation small;
 *                                    the runtime points `__stack_pointer` at a
 *                                    stack of its own anyway.
 *   -Wl,--export=__data_end          the runtime reads `__data_end` to find the
 *   -Wl,--export=__heap_base         module's static data footprint.
 * Debian 12: `apt-get install clang-19 lld-19` and call `clang-19`.
 *
 * The kernel module ABI (see device-kernels/README.md and wit/kernels.wit):
 *  - the module imports exactly one thing, `env.memory`, and has no start
 *    function; an undefined function becomes an import and the runtime
 *    rejects the module, so call nothing that is not defined in the module;
 *  - a kernel is an exported function returning void whose parameters are
 *    32/64-bit integers, floats or doubles (`OPENREG_KERNEL`);
 *  - a device pointer is a 32-bit byte offset into the device memory, which
 *    in C is simply a pointer (the module's address space *is* the device
 *    memory). NULL is the null device pointer: the runtime never hands out
 *    address 0 for an allocation;
 *  - a contract violation traps (`OPENREG_TRAP()` / `OPENREG_REQUIRE()`); an
 *    access outside the device memory traps on its own. The runtime reports a
 *    trap as a failed launch and the device stays usable;
 *  - keep static data small: it is placed at fixed addresses in the device's
 *    static area, which every module on a device shares.
 */
#ifndef OPENREG_KERNEL_H
#define OPENREG_KERNEL_H

#if !defined(__wasm32__)
#error "openreg_kernel.h: compile kernels with --target=wasm32-unknown-unknown"
#endif

#include <stddef.h>
#include <stdint.h>

/*
 * Declares an exported kernel named `name`:
 *
 *   OPENREG_KERNEL(scale_f32)
 *   void scale_f32(openreg_f32_ptr out, openreg_const_f32_ptr in, uint32_t n, float factor) { ... }
 *
 * The export name is exactly `name`. The function must return void and take
 * only int32_t/uint32_t/int64_t/uint64_t/float/double or pointer parameters.
 */
#define OPENREG_KERNEL(name) __attribute__((export_name(#name), visibility("default")))

/* Stops the kernel with a trap (the wasm `unreachable` instruction). */
#define OPENREG_TRAP() __builtin_trap()

/* Traps unless `cond` holds: the kernel-side assert. */
#define OPENREG_REQUIRE(cond) \
  do {                        \
    if (!(cond)) {            \
      __builtin_trap();       \
    }                         \
  } while (0)

/* A device pointer as an integer: a byte offset into the device memory. */
typedef uint32_t openreg_device_ptr;

/*
 * Device pointers to element types. They are ordinary C pointers; the typedefs
 * document that a parameter is device data. wasm_v128_load / wasm_v128_store
 * accept any address. C assumes natural alignment for scalar accesses through
 * a typed pointer, so where a pointer may be misaligned (a tensor view at an
 * odd byte offset), access elements with openreg_load_f32 / openreg_store_f32
 * as examples/scale_f32.c does.
 */
typedef float *openreg_f32_ptr;
typedef const float *openreg_const_f32_ptr;
typedef int32_t *openreg_i32_ptr;
typedef const int32_t *openreg_const_i32_ptr;
typedef uint8_t *openreg_u8_ptr;
typedef const uint8_t *openreg_const_u8_ptr;

/* The C pointer for a device address passed as an integer. */
static inline void *openreg_ptr(openreg_device_ptr addr) {
  return (void *)(uintptr_t)addr;
}

/* Reads a float at any address, aligned or not. */
static inline float openreg_load_f32(const void *p) {
  float v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

/* Writes a float at any address, aligned or not. */
static inline void openreg_store_f32(void *p, float v) {
  __builtin_memcpy(p, &v, sizeof v);
}

/*
 * Traps unless the range of `n` elements of `elem_size` bytes at `p` is
 * empty, or starts at a non-null address and ends within the 32-bit address
 * space (does not wrap around).
 */
static inline void openreg_check_range(const void *p, uint32_t n, uint32_t elem_size) {
  uint64_t bytes = (uint64_t)n * elem_size;
  if (bytes != 0) {
    OPENREG_REQUIRE(p != NULL);
    OPENREG_REQUIRE((uint64_t)(uintptr_t)p + bytes <= ((uint64_t)1 << 32));
  }
}

#endif /* OPENREG_KERNEL_H */
