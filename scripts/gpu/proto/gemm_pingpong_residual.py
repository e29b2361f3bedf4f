#!/usr/bin/env python3
# Prototype (not part of rlx-cuda), kept with its results: see README.md beside this file.
# Variant of ffn_gemm_pingpong.py: adds a residual epilogue (MODE 128, the residual tile TMA-loaded
# into the staging buffer at tile start) and BN=192. Writes gemm_pp.cu; on the GPU machine:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DBN=128 -DSTAGES=4 ffn_pp.cu -lcuda -lcublas -o pp
#   ./pp [M N K]
# Ping-pong variant: producer warpgroup (TMA) + two consumer warpgroups that each own a
# 128 x BN tile (two m64 wgmmas per k16), taking turns on the tensor cores so that one's
# epilogue (bias + GELU + TMA store) overlaps the other's MMAs.
import sys
def wgmma_fn(n):
    regs=n//2
    lst=", ".join(f"%{i}" for i in range(regs))
    outs=", ".join(f'"+f"(acc[{i}])' for i in range(regs))
    return (f'__device__ __forceinline__ void wgmma_n{n}(float (&acc)[{regs}], unsigned long long da, unsigned long long db) {{\n'
            f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs+2}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 {{{lst}}}, %{regs}, %{regs+1}, p, 1, 1, 0, 1;\\n}}\\n"'
            f' : {outs} : "l"(da), "l"(db), "r"(1));\n}}\n')
src = r'''
#include <cuda.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cmath>
#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("%s:%d error %d: %s\n", __FILE__, __LINE__, (int)e_, #x); exit(1); } } while (0)
#ifndef STAGES
#define STAGES 4
#endif
#ifndef BN
#define BN 128
#endif
#ifndef PREGS
#define PREGS 40
#endif
#ifndef CREGS
#define CREGS 232
#endif
#if BN == 128
#define WGMMA_N wgmma_n128
#elif BN == 192
#define WGMMA_N wgmma_n192
#elif BN == 64
#define WGMMA_N wgmma_n64
#else
#define WGMMA_N wgmma_n256
#endif
#define STR2(x) #x
#define STR(x) STR2(x)
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned b, unsigned count) { asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(count)); }
__device__ __forceinline__ void mbar_expect(unsigned b, unsigned bytes) { asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory"); }
__device__ __forceinline__ void mbar_arrive(unsigned b) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory"); }
__device__ __forceinline__ void mbar_wait(unsigned b, unsigned parity) {
  asm volatile("{\n.reg .pred p;\nW:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n" :: "r"(b), "r"(parity) : "memory");
}
__device__ __forceinline__ void tma2d(unsigned dst, const CUtensorMap* map, int c0, int c1, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
    :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
__device__ __forceinline__ float erf_as(float x) {
  const float ax = fabsf(x), t = __fdividef(1.0f, 1.0f + 0.3275911f * ax);
  const float p = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  return copysignf(1.0f - p * __expf(-ax * ax), x);
}
// erf(x) ~ x P(x^2) / Q(x^2) on [-4, 4] (clamped; erfc(4) = 1.5e-8), own fit, max abs error 4e-7 in f32
__device__ __forceinline__ float erf_rat(float x) {
  x = fminf(fmaxf(x, -4.0f), 4.0f);
  const float s = x * x;
  float p = 1.9216642499486625e-08f;
  p = fmaf(p, s, -1.9902813619410153e-06f); p = fmaf(p, s, 0.00015553525008726865f); p = fmaf(p, s, 0.004293061792850494f);
  p = fmaf(p, s, 0.05243358016014099f); p = fmaf(p, s, 0.2139454185962677f); p = fmaf(p, s, 1.1283786296844482f);
  float q = 0.0010980337392538786f;
  q = fmaf(q, s, 0.015551144257187843f); q = fmaf(q, s, 0.12079992890357971f); q = fmaf(q, s, 0.5229318737983704f); q = fmaf(q, s, 1.0f);
  return __fdividef(x * p, q);
}
__device__ __forceinline__ float tanh_approx(float x) { float y; asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
template <int MODE> __device__ __forceinline__ float act(float x) {
  if constexpr ((MODE & 16) != 0) return 0.5f * x * (1.0f + erf_rat(x * 0.70710678118654752f));
  else if constexpr ((MODE & 32) != 0) return 0.5f * x * (1.0f + tanh_approx(0.7978845608f * fmaf(0.044715f * x, x * x, x)));
  else if constexpr ((MODE & 8) != 0) return 0.5f * x * (1.0f + erf_as(x * 0.70710678118654752f));
  else if constexpr ((MODE & 1) != 0) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  else return x;
}
@WGMMAFN@
// smem: STAGES x (A 128x64 | B 64xBN), then two f16 result tiles 128xBN, then barriers, then bias (2 x BN f32)
template <int MODE> __global__ void __launch_bounds__(384, 1) ffn_pp(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
    const half* __restrict__ bias, int M, int N, int K, const __grid_constant__ CUtensorMap tmC, const __grid_constant__ CUtensorMap tmR) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  constexpr int ABYTES = 128 * 64 * 2, BBYTES = 64 * BN * 2, STAGE = ABYTES + BBYTES, CBYTES = 128 * BN * 2;
  const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  unsigned char* gbase = smem_raw + (base - smem_u32(smem_raw));
  const unsigned cbuf0 = base + STAGES * STAGE;
  const unsigned bars = cbuf0 + 2 * CBYTES; // full[s] at +8s, empty[s] at +8(STAGES+s)
  const unsigned rbar0 = bars + 16 * STAGES;
  float* biasS0 = reinterpret_cast<float*>(gbase + (bars - base) + 16 * STAGES + 16);
  const int tid = threadIdx.x, wg = tid >> 7;
  const int nt = (N + BN - 1) / BN, tiles = ((M + 127) / 128) * nt, KT = (K + 63) / 64;
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) { mbar_init(bars + 8 * s, 1); mbar_init(bars + 8 * (STAGES + s), 4); }
    mbar_init(rbar0, 1); mbar_init(rbar0 + 8, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 " STR(PREGS) ";\n");
    if (tid == 0) {
      int s = 0; unsigned ph = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int m0 = (tile / nt) * 128, n0 = (tile % nt) * BN;
        for (int kt = 0; kt < KT; ++kt) {
          mbar_wait(bars + 8 * (STAGES + s), ph ^ 1);
          const unsigned full = bars + 8 * s, dst = base + s * STAGE;
          mbar_expect(full, STAGE);
          tma2d(dst, &tmA, kt * 64, m0, full);
#pragma unroll
          for (int nb = 0; nb < BN / 64; ++nb) tma2d(dst + ABYTES + nb * 8192, &tmB, n0 + nb * 64, kt * 64, full);
          if (++s == STAGES) { s = 0; ph ^= 1; }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 " STR(CREGS) ";\n");
    const int cw = wg - 1, ctid = tid - 128 * wg, warp = ctid >> 5, lane = tid & 31;
    const unsigned cbuf = cbuf0 + cw * CBYTES;
    unsigned char* cptr = gbase + (cbuf - base);
    float* biasS = biasS0 + cw * BN;
    float acc0[BN / 2], acc1[BN / 2];
    int i = 0; unsigned rph = 0; const unsigned rbar = rbar0 + 8 * cw;
    for (int tile = blockIdx.x + cw * gridDim.x; tile < tiles; tile += 2 * gridDim.x, i += 2) {
      const int li = i + cw; // this CTA's local tile index
      const int m0 = (tile / nt) * 128, n0 = (tile % nt) * BN;
      if constexpr ((MODE & 128) != 0) {
        if (ctid == 0) {
          asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
          mbar_expect(rbar, CBYTES);
#pragma unroll
          for (int box = 0; box < BN / 64; ++box) tma2d(cbuf + box * 128 * 128, &tmR, n0 + box * 64, m0, rbar);
        }
      }
      if (ctid < BN) biasS[ctid] = n0 + ctid < N ? __half2float(bias[n0 + ctid]) : 0.0f;
#pragma unroll
      for (int q = 0; q < BN / 2; ++q) { acc0[q] = 0.0f; acc1[q] = 0.0f; }
      // wait for our turn on the tensor cores (the other warpgroup finished its MMAs)
      if (li > 0) asm volatile("bar.sync %0, 256;" :: "r"(1 + cw) : "memory");
      int prev = -1;
      for (int kt = 0; kt < KT; ++kt) {
        const int pos = li * KT + kt, s = pos % STAGES;
        const unsigned ph = (pos / STAGES) & 1;
        mbar_wait(bars + 8 * s, ph);
        const unsigned as = base + s * STAGE, bs = as + ABYTES;
#pragma unroll
        for (int q = 0; q < BN / 2; ++q) asm volatile("" : "+f"(acc0[q]), "+f"(acc1[q]) :: "memory");
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const unsigned long long db = (unsigned long long)(((bs + kk * 2048) & 0x3FFFF) >> 4) | (512ull << 16) | (64ull << 32) | (1ull << 62);
          const unsigned long long da0 = (unsigned long long)(((as + kk * 32) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
          const unsigned long long da1 = (unsigned long long)(((as + 64 * 128 + kk * 32) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
          if constexpr ((MODE & 64) == 0) {
          WGMMA_N(acc0, da0, db);
          WGMMA_N(acc1, da1, db);
          }
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#pragma unroll
        for (int q = 0; q < BN / 2; ++q) asm volatile("" : "+f"(acc0[q]), "+f"(acc1[q]) :: "memory");
        if (prev >= 0) { __syncwarp(); if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev)); }
        prev = s;
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
      for (int q = 0; q < BN / 2; ++q) asm volatile("" : "+f"(acc0[q]), "+f"(acc1[q]) :: "memory");
      __syncwarp(); if (lane == 0) mbar_arrive(bars + 8 * (STAGES + prev));
      // the other warpgroup's turn on the tensor cores
      asm volatile("bar.arrive %0, 256;" :: "r"(2 - cw) : "memory");
      if constexpr ((MODE & 4) != 0) continue;
      // epilogue: bias + activation, f16, into this warpgroup's staging tile (128-byte swizzle), then a TMA store
      if (ctid == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      asm volatile("bar.sync %0, 128;" :: "r"(3 + cw) : "memory");
      if constexpr ((MODE & 128) != 0) { mbar_wait(rbar, rph); rph ^= 1; }
      const int c0 = (lane & 3) * 2;
      float2 bias_r[BN / 8];
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) bias_r[j] = *reinterpret_cast<const float2*>(biasS + j * 8 + c0);
#pragma unroll
      for (int half_ = 0; half_ < 2; ++half_) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const float2 bb = bias_r[j];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int lr = half_ * 64 + warp * 16 + (lane >> 2) + h * 8, box = j >> 3, ch = j & 7;
            const float a0 = half_ ? acc1[4 * j + 2 * h] : acc0[4 * j + 2 * h];
            const float a1 = half_ ? acc1[4 * j + 2 * h + 1] : acc0[4 * j + 2 * h + 1];
            const unsigned off = box * (128 * 128) + lr * 128 + ((ch ^ (lr & 7)) << 4) + (lane & 3) * 4;
            float r0 = 0.f, r1 = 0.f;
            if constexpr ((MODE & 128) != 0) { const float2 rr = __half22float2(*reinterpret_cast<const half2*>(cptr + off)); r0 = rr.x; r1 = rr.y; }
            *reinterpret_cast<half2*>(cptr + off) = __floats2half2_rn(act<MODE>(a0 + bb.x) + r0, act<MODE>(a1 + bb.y) + r1);
          }
        }
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("bar.sync %0, 128;" :: "r"(3 + cw) : "memory");
      if (ctid == 0 && (MODE & 2) == 0) {
#pragma unroll
        for (int box = 0; box < BN / 64; ++box)
          asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" :: "l"(&tmC), "r"(n0 + box * 64), "r"(m0), "r"(cbuf + box * 128 * 128) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
    if (ctid == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
}
__global__ void ref_gemm(const half* A, const half* B, const half* bias, float* C, int M, int N, int K, int gelu, const half* res) {
  int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y; if (n >= N) return;
  float s = 0.f; for (int k = 0; k < K; ++k) s += __half2float(A[(long long)m * K + k]) * __half2float(B[(long long)k * N + n]);
  s += __half2float(bias[n]); if (gelu) s = 0.5f * s * (1.0f + erff(s * 0.70710678118654752f)); if (res) s += __half2float(res[(long long)m * N + n]); C[(long long)m * N + n] = s;
}
__global__ void init(half* p, long long n, unsigned seed, float scale) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
  unsigned x = (unsigned)i * 2654435761u ^ seed; x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
  p[i] = __float2half(((x & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f) * scale);
}
static CUtensorMap make_map(const half* p, int inner, int outer, int box_inner, int box_outer) {
  CUtensorMap m; cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer}; cuuint64_t strides[1] = {(cuuint64_t)inner * 2};
  cuuint32_t box[2] = {(cuuint32_t)box_inner, (cuuint32_t)box_outer}; cuuint32_t es[2] = {1, 1};
  CK(cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void*)p, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return m;
}
template <typename F> static float time_ms(F f, int iters) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); std::vector<float> t;
  for (int i = 0; i < 10; ++i) f();
  for (int i = 0; i < iters; ++i) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms); }
  std::sort(t.begin(), t.end()); return t[t.size() / 2];
}
template <int MODE> static void run(int M, int N, int K, half* A, half* B, half* bias, half* C, float* R, int sms, half* Res) {
  CUtensorMap ta = make_map(A, K, M, 64, 128), tb = make_map(B, N, K, 64, 64), tc = make_map(C, N, M, 64, 128), tr = make_map(Res, N, M, 64, 128);
  const int smem = STAGES * (128 * 64 * 2 + 64 * BN * 2) + 2 * 128 * BN * 2 + 1024 + 16 * STAGES + 16 + 2 * BN * 4;
  CK(cudaFuncSetAttribute(ffn_pp<MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(ffn_pp<MODE | 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(ffn_pp<MODE | 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int tiles = ((M + 127) / 128) * ((N + BN - 1) / BN);
  const int grid = std::min(tiles, sms);
  CK(cudaMemset(C, 0xFF, (size_t)M * N * 2));
  ffn_pp<MODE><<<grid, 384, smem>>>(ta, tb, bias, M, N, K, tc, tr); CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  ref_gemm<<<dim3((N + 127) / 128, M), 128>>>(A, B, bias, R, M, N, K, MODE & 57, (MODE & 128) ? Res : nullptr); CK(cudaDeviceSynchronize());
  std::vector<half> c((size_t)M * N); std::vector<float> r((size_t)M * N);
  CK(cudaMemcpy(c.data(), C, c.size() * 2, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(r.data(), R, r.size() * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0; size_t bad = 0;
  for (size_t i = 0; i < c.size(); ++i) { double d = (double)__half2float(c[i]) - r[i]; if (!std::isfinite(d)) ++bad; num += d * d; den += (double)r[i] * r[i]; }
  float ms = time_ms([&] { ffn_pp<MODE><<<grid, 384, smem>>>(ta, tb, bias, M, N, K, tc, tr); }, 200);
  float ms2 = time_ms([&] { ffn_pp<MODE | 2><<<grid, 384, smem>>>(ta, tb, bias, M, N, K, tc, tr); }, 200);
  float ms3 = time_ms([&] { ffn_pp<MODE | 4><<<grid, 384, smem>>>(ta, tb, bias, M, N, K, tc, tr); }, 200);
  float ms4 = -1;
  if constexpr ((MODE & 64) != 0) { ms4 = time_ms([&] { ffn_pp<MODE><<<grid, 384, smem>>>(ta, tb, bias, M, N, K, tc, tr); }, 200); }
  printf("pingpong BN=%d stages=%d m%d n%d k%d mode=%d: %.4f ms  %.0f TFLOP/s  rel L2 %.2e  nonfinite %zu | no stores %.4f | no epilogue %.4f\n", BN, STAGES, M, N, K, MODE, ms,
         2.0 * M * N * K / ms / 1e9, std::sqrt(num / den), bad, ms2, ms3);
}
__global__ void bias_gelu(half* C, const half* bias, long long total, int N) {
  long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 8; if (i >= total) return;
  uint4 v = *reinterpret_cast<uint4*>(C + i); half2* h = reinterpret_cast<half2*>(&v); int c = (int)(i % N);
#pragma unroll
  for (int q = 0; q < 4; ++q) { float2 f = __half22float2(h[q]); f.x += __half2float(bias[c + 2*q]); f.y += __half2float(bias[c + 2*q + 1]);
    f.x = 0.5f * f.x * (1.0f + erff(f.x * 0.70710678f)); f.y = 0.5f * f.y * (1.0f + erff(f.y * 0.70710678f)); h[q] = __floats2half2_rn(f.x, f.y); }
  *reinterpret_cast<uint4*>(C + i) = v;
}
int main(int argc, char** argv) {
  int M = 32768, N = 1536, K = 384;
  if (argc > 3) { M = atoi(argv[1]); N = atoi(argv[2]); K = atoi(argv[3]); }
  cuInit(0); int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  half *A, *B, *bias, *C, *Res; float* R;
  CK(cudaMalloc(&A, (size_t)M * K * 2)); CK(cudaMalloc(&B, (size_t)K * N * 2)); CK(cudaMalloc(&bias, N * 2)); CK(cudaMalloc(&C, (size_t)M * N * 2)); CK(cudaMalloc(&R, (size_t)M * N * 4)); CK(cudaMalloc(&Res, (size_t)M * N * 2));
  init<<<(M * N + 255) / 256, 256>>>(Res, (long long)M * N, 4, 1.0f);
  init<<<(M * K + 255) / 256, 256>>>(A, (long long)M * K, 1, 2.0f); init<<<(K * N + 255) / 256, 256>>>(B, (long long)K * N, 2, 0.1f); init<<<(N + 255) / 256, 256>>>(bias, N, 3, 0.5f);
  CK(cudaDeviceSynchronize());
  cublasHandle_t h; cublasCreate(&h);
  float one = 1, zero = 0;
  auto gemm = [&] { cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, CUDA_R_16F, N, A, CUDA_R_16F, K, &zero, C, CUDA_R_16F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT); };
  long long total = (long long)M * N;
  auto epi = [&] { bias_gelu<<<(total / 8 + 255) / 256, 256>>>(C, bias, total, N); };
  for (int rep = 0; rep < 2; ++rep) {
    float g = time_ms(gemm, 200), e = time_ms(epi, 200);
    printf("cublas gemm %.4f ms (%.0f TFLOP/s)  bias+gelu kernel %.4f\n", g, 2.0 * M * N * K / g / 1e9, e);
    run<0>(M, N, K, A, B, bias, C, R, sms, Res);
    run<128>(M, N, K, A, B, bias, C, R, sms, Res);
  }
  return 0;
}
'''
bn=int(sys.argv[2]) if len(sys.argv)>2 else 128
open(sys.argv[1] if len(sys.argv)>1 else 'gemm_pp.cu','w').write(src.replace('@WGMMAFN@', wgmma_fn(128)+wgmma_fn(64)+wgmma_fn(192)+wgmma_fn(256)))
