/*
 * scale_f32.c: an example kernel module in C, built with the OpenReg kernel
 * SDK (sdk/openreg_kernel.h). device-kernels/build.rs compiles it to
 * `example_c.wasm` (module name `openreg.example_c`) with:
 *
 *   clang --target=wasm32-unknown-unknown -nostdlib -O3 -msimd128 -mbulk-memory \
 *     -I sdk -Wl,--no-entry -Wl,--import-memory -Wl,-z,stack-size=65536 \
 *     -Wl,--export=__data_end -Wl,--export=__heap_base \
 *     -o example_c.wasm examples/scale_f32.c
 *
 * Every kernel here accepts unaligned pointers, and traps when a nonempty
 * range starts at NULL or runs past the 32-bit address space.
 */
#include <openreg_kernel.h>
#include <wasm_simd128.h>

/*
 * out[i] = in[i] * factor for n floats. `out` may equal `in` (in place) but
 * must not overlap it partially.
 */
OPENREG_KERNEL(scale_f32)
void scale_f32(openreg_f32_ptr out, openreg_const_f32_ptr in, uint32_t n, float factor) {
  openreg_check_range(out, n, sizeof(float));
  openreg_check_range(in, n, sizeof(float));
  const v128_t f = wasm_f32x4_splat(factor);
  uint32_t i = 0;
  for (; n - i >= 4; i += 4) {
    wasm_v128_store(out + i, wasm_f32x4_mul(wasm_v128_load(in + i), f));
  }
  for (; i < n; i++) {
    openreg_store_f32(out + i, openreg_load_f32(in + i) * factor);
  }
}

/*
 * *out = in[0] + ... + in[n - 1] for n floats (0.0f when n is 0). Four
 * partial sums run in SIMD lanes and are added at the end, so the rounding
 * differs from a sequential sum, as it does for torch.sum on CPU.
 */
OPENREG_KERNEL(sum_f32)
void sum_f32(openreg_f32_ptr out, openreg_const_f32_ptr in, uint32_t n) {
  openreg_check_range(out, 1, sizeof(float));
  openreg_check_range(in, n, sizeof(float));
  v128_t acc = wasm_f32x4_splat(0.0f);
  uint32_t i = 0;
  for (; n - i >= 4; i += 4) {
    acc = wasm_f32x4_add(acc, wasm_v128_load(in + i));
  }
  float s = (wasm_f32x4_extract_lane(acc, 0) + wasm_f32x4_extract_lane(acc, 1)) +
            (wasm_f32x4_extract_lane(acc, 2) + wasm_f32x4_extract_lane(acc, 3));
  for (; i < n; i++) {
    s += openreg_load_f32(in + i);
  }
  openreg_store_f32(out, s);
}

/*
 * The bit-reversal table: kBitReverse[b] is b with its 8 bits in reverse
 * order (0x01 -> 0x80, 0x0f -> 0xf0). It is static data, so this module has
 * an active data segment: the example of a kernel module with a static
 * footprint in the device's static area.
 */
#define R2(n) n, n + 2 * 64, n + 1 * 64, n + 3 * 64
#define R4(n) R2(n), R2(n + 2 * 16), R2(n + 1 * 16), R2(n + 3 * 16)
#define R6(n) R4(n), R4(n + 2 * 4), R4(n + 1 * 4), R4(n + 3 * 4)
static const uint8_t kBitReverse[256] = {R6(0), R6(2), R6(1), R6(3)};

/*
 * out[i] = kBitReverse[in[i]] for n bytes: reverses the bits of each byte.
 * `out` may equal `in` (in place).
 */
OPENREG_KERNEL(lut_u8)
void lut_u8(openreg_u8_ptr out, openreg_const_u8_ptr in, uint32_t n) {
  openreg_check_range(out, n, 1);
  openreg_check_range(in, n, 1);
  for (uint32_t i = 0; i < n; i++) {
    out[i] = kBitReverse[in[i]];
  }
}
