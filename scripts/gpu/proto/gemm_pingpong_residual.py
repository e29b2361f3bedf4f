#!/usr/bin/env python3
# Prototype (not part of rlx-cuda), kept with its results (bench/gpu/pingpong-gemm-shapes-2026-12-01-s18.txt):
# ffn_gemm_pingpong.py with a residual epilogue (MODE 128: the residual tile is TMA-loaded into
# the warpgroup's staging buffer at tile start and added before the store) and BN=192 (spills,
# and its results are wrong; not used). Applies its edits to ffn_gemm_pingpong.py's text and
# runs that. Writes gemm_pp.cu; on the GPU machine:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DBN=128 -DSTAGES=4 gemm_pp.cu -lcuda -lcublas -o pp
#   ./pp [M N K]      (cuBLAS, then MODE 0 = bias and MODE 128 = bias + residual)
import os
import re
import sys

base = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ffn_gemm_pingpong.py")).read()
edits = [
    ("const __grid_constant__ CUtensorMap tmC) {",
     "const __grid_constant__ CUtensorMap tmC, const __grid_constant__ CUtensorMap tmR) {"),
    ("float* biasS0 = reinterpret_cast<float*>(gbase + (bars - base) + 16 * STAGES);",
     "const unsigned rbar0 = bars + 16 * STAGES;\n  float* biasS0 = reinterpret_cast<float*>(gbase + (bars - base) + 16 * STAGES + 16);"),
    ('asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");',
     'mbar_init(rbar0, 1); mbar_init(rbar0 + 8, 1);\n    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");'),
    ("    int i = 0;\n    for (int tile",
     "    int i = 0; unsigned rph = 0; const unsigned rbar = rbar0 + 8 * cw;\n    for (int tile"),
    ("      if (ctid < BN) biasS[ctid]",
     """      if constexpr ((MODE & 128) != 0) {
        if (ctid == 0) {
          asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
          mbar_expect(rbar, CBYTES);
#pragma unroll
          for (int box = 0; box < BN / 64; ++box) tma2d(cbuf + box * 128 * 128, &tmR, n0 + box * 64, m0, rbar);
        }
      }
      if (ctid < BN) biasS[ctid]"""),
    ("      const int c0 = (lane & 3) * 2;",
     "      if constexpr ((MODE & 128) != 0) { mbar_wait(rbar, rph); rph ^= 1; }\n      const int c0 = (lane & 3) * 2;"),
    ("            *reinterpret_cast<half2*>(cptr + off) = __floats2half2_rn(act<MODE>(a0 + bb.x), act<MODE>(a1 + bb.y));",
     """            float r0 = 0.f, r1 = 0.f;
            if constexpr ((MODE & 128) != 0) { const float2 rr = __half22float2(*reinterpret_cast<const half2*>(cptr + off)); r0 = rr.x; r1 = rr.y; }
            *reinterpret_cast<half2*>(cptr + off) = __floats2half2_rn(act<MODE>(a0 + bb.x) + r0, act<MODE>(a1 + bb.y) + r1);"""),
    ("__global__ void ref_gemm(const half* A, const half* B, const half* bias, float* C, int M, int N, int K, int gelu) {",
     "__global__ void ref_gemm(const half* A, const half* B, const half* bias, float* C, int M, int N, int K, int gelu, const half* res) {"),
    ("C[(long long)m * N + n] = s;", "if (res) s += __half2float(res[(long long)m * N + n]); C[(long long)m * N + n] = s;"),
    ("template <int MODE> static void run(int M, int N, int K, half* A, half* B, half* bias, half* C, float* R, int sms) {",
     "template <int MODE> static void run(int M, int N, int K, half* A, half* B, half* bias, half* C, float* R, int sms, half* Res) {"),
    ("tc = make_map(C, N, M, 64, 128);", "tc = make_map(C, N, M, 64, 128), tr = make_map(Res, N, M, 64, 128);"),
    ("+ 1024 + 16 * STAGES + 2 * BN * 4;", "+ 1024 + 16 * STAGES + 16 + 2 * BN * 4;"),
    ("(ta, tb, bias, M, N, K, tc)", "(ta, tb, bias, M, N, K, tc, tr)"),
    ("ref_gemm<<<dim3((N + 127) / 128, M), 128>>>(A, B, bias, R, M, N, K, MODE & 57);",
     "ref_gemm<<<dim3((N + 127) / 128, M), 128>>>(A, B, bias, R, M, N, K, MODE & 57, (MODE & 128) ? Res : nullptr);"),
    ("#elif BN == 64", "#elif BN == 192\n#define WGMMA_N wgmma_n192\n#elif BN == 64"),
    ("wgmma_fn(128)+wgmma_fn(64)+wgmma_fn(256)", "wgmma_fn(128)+wgmma_fn(64)+wgmma_fn(192)+wgmma_fn(256)"),
    ("half *A, *B, *bias, *C; float* R;", "half *A, *B, *bias, *C, *Res; float* R;"),
    ("CK(cudaMalloc(&R, (size_t)M * N * 4));",
     "CK(cudaMalloc(&R, (size_t)M * N * 4)); CK(cudaMalloc(&Res, (size_t)M * N * 2));\n  init<<<(M * N + 255) / 256, 256>>>(Res, (long long)M * N, 4, 1.0f);"),
    ("'ffn_pp.cu'", "'gemm_pp.cu'"),
]
for old, new in edits:
    assert old in base, old
    base = base.replace(old, new)
base, n = re.subn(r"    run<16>\(.*?\n  \}\n  return 0;",
                  "    run<0>(M, N, K, A, B, bias, C, R, sms, Res);\n    run<128>(M, N, K, A, B, bias, C, R, sms, Res);\n  }\n  return 0;",
                  base, flags=re.S)
assert n == 1
exec(compile(base, "ffn_gemm_pingpong.py (residual variant)", "exec"))
