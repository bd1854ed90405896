;; negate_f32.wat: an example kernel module written by hand in WAT.
;;
;; `negate_f32(out, in, n)` computes out[i] = -in[i] for n floats, four lanes
;; at a time with SIMD, then one at a time. `out` may equal `in`. Like the
;; built-in kernels it traps (`unreachable`) when a nonempty range starts at
;; address 0 or runs past 4 GiB; wasm traps on its own when a range runs past
;; the end of the device memory.
;;
;; Build: `wat2wasm negate_f32.wat -o negate_f32.wasm` (wabt; Debian 12's 1.0.32
;; has SIMD on by default) or `wasm-tools parse negate_f32.wat -o negate_f32.wasm`.
;; wasmtime also compiles the text directly (tests/kernels.rs does).
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

  (func (export "negate_f32") (param $out i32) (param $in i32) (param $n i32)
    (local $bytes i32)
    (local $i i32)
    (call $check_range (local.get $out) (i64.shl (i64.extend_i32_u (local.get $n)) (i64.const 2)))
    (call $check_range (local.get $in) (i64.shl (i64.extend_i32_u (local.get $n)) (i64.const 2)))
    (local.set $bytes (i32.shl (local.get $n) (i32.const 2)))
    ;; 16 bytes at a time while at least 16 remain (`bytes - i >= 16` cannot wrap).
    (block $simd_done
      (loop $simd
        (br_if $simd_done (i32.lt_u (i32.sub (local.get $bytes) (local.get $i)) (i32.const 16)))
        (v128.store align=1
          (i32.add (local.get $out) (local.get $i))
          (f32x4.neg (v128.load align=1 (i32.add (local.get $in) (local.get $i)))))
        (local.set $i (i32.add (local.get $i) (i32.const 16)))
        (br $simd)))
    ;; The last 0-3 floats.
    (block $done
      (loop $tail
        (br_if $done (i32.ge_u (local.get $i) (local.get $bytes)))
        (f32.store align=1
          (i32.add (local.get $out) (local.get $i))
          (f32.neg (f32.load align=1 (i32.add (local.get $in) (local.get $i)))))
        (local.set $i (i32.add (local.get $i) (i32.const 4)))
        (br $tail)))))
