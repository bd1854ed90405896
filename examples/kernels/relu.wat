;; relu.wat: ReLU over a flat float32 buffer, as a user kernel module written
;; by hand in WAT, with bare pointers (no tensor descriptor).
;;
;;   out[i] = x[i] < 0 ? 0 : x[i]    for i in 0 .. n
;;
;; Kernel ABI (wasm signature):
;;
;;   relu_f32(out: i32, x: i32, n: i32)
;;
;; `out` and `x` are device addresses (byte offsets into the device memory) of
;; n float32 elements each, any alignment; n is an element count (unsigned).
;; With bare pointers the Python side must pass contiguous tensors: their
;; data pointers and numel (e.g. out = torch.empty_like(x) and x.contiguous()).
;; `out` may equal `x` (in place) but must not overlap it partially. Like the
;; SDK kernels it traps (`unreachable`) when a nonempty range starts at address
;; 0 or runs past 4 GiB; wasm traps on its own past the end of the device
;; memory.
;;
;; Semantics: NaN stays NaN (NaN < 0 is false) and -0.0 stays -0.0 (-0.0 < 0
;; is false); every other negative becomes +0.0. This is a select on
;; `x < 0`, not f32.max(x, 0), which also keeps NaN but turns -0.0 into
;; +0.0. (Whether torch.relu(-0.0) on CPU keeps the sign is not pinned down
;; here: compare zeros without their sign.)
;;
;; Loops: four lanes at a time with SIMD (`f32x4.lt` makes an all-ones mask in
;; the negative lanes, `v128.andnot` clears them), then one float at a time.
;;
;; Build: `wat2wasm relu.wat -o relu.wasm` (wabt; Debian 12's 1.0.32 has SIMD on
;; by default) or `wasm-tools parse relu.wat -o relu.wasm`; wasmtime also
;; compiles the text directly.
(module
  ;; The device memory: the only import a kernel module may have.
  (import "env" "memory" (memory 1))

  ;; No static data and no shadow stack: the static footprint is empty, and
  ;; `__data_end` = `__heap_base` mark where it would start (the device's
  ;; static area starts at 1024).
  (global (export "__data_end") i32 (i32.const 1024))
  (global (export "__heap_base") i32 (i32.const 1024))

  ;; Traps unless the range [ptr, ptr + bytes) is empty, or starts above 0
  ;; and ends at or below 4 GiB.
  (func $check_range (param $ptr i32) (param $bytes i64)
    (if (i64.eqz (local.get $bytes)) (then (return)))
    (if (i32.eqz (local.get $ptr)) (then (unreachable)))
    (if (i64.gt_u
          (i64.add (i64.extend_i32_u (local.get $ptr)) (local.get $bytes))
          (i64.const 0x1_0000_0000))
      (then (unreachable))))

  (func (export "relu_f32") (param $out i32) (param $x i32) (param $n i32)
    (local $bytes i32)
    (local $i i32)
    (local $v v128)
    (local $s f32)
    (call $check_range (local.get $out) (i64.shl (i64.extend_i32_u (local.get $n)) (i64.const 2)))
    (call $check_range (local.get $x) (i64.shl (i64.extend_i32_u (local.get $n)) (i64.const 2)))
    (local.set $bytes (i32.shl (local.get $n) (i32.const 2)))
    ;; 16 bytes at a time while at least 16 remain (`bytes - i >= 16` cannot wrap).
    (block $simd_done
      (loop $simd
        (br_if $simd_done (i32.lt_u (i32.sub (local.get $bytes) (local.get $i)) (i32.const 16)))
        (local.set $v (v128.load align=1 (i32.add (local.get $x) (local.get $i))))
        ;; v & ~(v < 0): the negative lanes become +0.0, NaN and -0.0 stay.
        (v128.store align=1
          (i32.add (local.get $out) (local.get $i))
          (v128.andnot (local.get $v) (f32x4.lt (local.get $v) (v128.const f32x4 0 0 0 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $simd)))
    ;; The last 0-3 floats.
    (block $done
      (loop $tail
        (br_if $done (i32.ge_u (local.get $i) (local.get $bytes)))
        (local.set $s (f32.load align=1 (i32.add (local.get $x) (local.get $i))))
        (f32.store align=1
          (i32.add (local.get $out) (local.get $i))
          (select (f32.const 0) (local.get $s) (f32.lt (local.get $s) (f32.const 0))))
        (local.set $i (i32.add (local.get $i) (i32.const 4)))
        (br $tail)))))
