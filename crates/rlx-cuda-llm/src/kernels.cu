// rlx-cuda-llm: the kernels of Llama-family decoding on CUDA. Weights stay in their stored
// format (f32, f16, bf16 or a GGML block format) and are dequantized 8 values at a time
// inside the matrix-vector products; activations are f32; the KV cache is paged (blocks of
// BS rows, a block table per sequence) in f16 or f32. Every scalar parameter is 8 bytes
// (long long or double) so the host passes all arguments as 64-bit words. Positions, tokens
// and sequence slots live in device memory, so one captured CUDA graph serves every step.
#define D __device__ __forceinline__
typedef unsigned char u8;
typedef long long i64;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Programmatic dependent launch (sm_90+): every kernel first waits until the kernel before it
// has finished and its writes are visible, then lets the next one be scheduled at once, so
// launch latency overlaps the running kernel. No-ops when launched normally.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GRID_WAIT() asm volatile("griddepcontrol.wait;\n griddepcontrol.launch_dependents;" ::: "memory")
#else
#define GRID_WAIT()
#endif

D float h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
D unsigned short f2h(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
D float bf2f(unsigned short h) { return __uint_as_float(((unsigned)h) << 16); }
D float ldh(const u8* p) { return h2f(*(const unsigned short*)p); }
D float warp_sum(float v) { for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s); return v; }
D float warp_max(float v) { for (int s = 16; s > 0; s >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s)); return v; }

// Weight formats (the host's `QuantFormat` order).
#define F_F32 0
#define F_F16 1
#define F_BF16 2
#define F_Q8_0 3
#define F_Q4_0 4
#define F_Q4_1 5
#define F_Q4K 6
#define F_Q5K 7
#define F_Q6K 8
#define F_Q5_0 9
#define F_Q5_1 10
#define F_Q2K 11
#define F_Q3K 12

D void scale_min_k4(int j, const u8* q, int* sc, int* m) {
  if (j < 4) { *sc = q[j] & 63; *m = q[j + 4] & 63; }
  else { *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}

// Values i..i+7 (i a multiple of 8) of a row stored in format FMT.
template <int FMT> D void deq8(const u8* row, i64 i, float* v) {
  if (FMT == F_F32) {
    const float4* p = (const float4*)(row + i * 4);
    float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else if (FMT == F_F16 || FMT == F_BF16) {
    uint4 q = __ldg((const uint4*)(row + i * 2));
    unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (FMT == F_F16) { v[2 * j] = h2f(w[j] & 0xffff); v[2 * j + 1] = h2f(w[j] >> 16); }
      else { v[2 * j] = __uint_as_float(w[j] << 16); v[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u); }
    }
  } else if (FMT == F_Q8_0) {
    const u8* p = row + (i >> 5) * 34;
    float d = ldh(p);
    const unsigned short* q = (const unsigned short*)(p + 2 + (i & 31));
#pragma unroll
    for (int j = 0; j < 4; j++) {
      unsigned short w = q[j];
      v[2 * j] = d * (float)(signed char)(w & 0xff);
      v[2 * j + 1] = d * (float)(signed char)(w >> 8);
    }
  } else if (FMT == F_Q4_0 || FMT == F_Q4_1) {
    const int bb = FMT == F_Q4_0 ? 18 : 20;
    const u8* p = row + (i >> 5) * bb;
    float d = ldh(p), m = FMT == F_Q4_0 ? -8.0f * d : ldh(p + 2);
    int off = (int)(i & 31);
    const unsigned short* q = (const unsigned short*)(p + (FMT == F_Q4_0 ? 2 : 4) + (off & 15));
    int shift = off >= 16 ? 4 : 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
      unsigned short w = q[j];
      v[2 * j] = d * (float)(((w & 0xff) >> shift) & 0xF) + m;
      v[2 * j + 1] = d * (float)(((w >> 8) >> shift) & 0xF) + m;
    }
  } else if (FMT == F_Q4K || FMT == F_Q5K) {
    const int bb = FMT == F_Q4K ? 144 : 176;
    const u8* p = row + (i >> 8) * bb;
    float d = ldh(p), dmin = ldh(p + 2);
    int off = (int)(i & 255), j = off >> 6, l = off & 63, hi = l >= 32;
    int sc, mn;
    scale_min_k4(2 * j + hi, p + 4, &sc, &mn);
    float d1 = d * sc, m1 = dmin * mn;
    const u8* qs = p + (FMT == F_Q4K ? 16 : 48) + 32 * j + (l & 31);
#pragma unroll
    for (int t = 0; t < 8; t++) {
      int q = hi ? (qs[t] >> 4) : (qs[t] & 0xF);
      if (FMT == F_Q5K) {
        const u8* qh = p + 16 + (l & 31);
        q += (qh[t] & ((hi ? 2 : 1) << (2 * j))) ? 16 : 0;
      }
      v[t] = d1 * (float)q - m1;
    }
  } else if (FMT == F_Q5_0 || FMT == F_Q5_1) {
    const int bb = FMT == F_Q5_0 ? 22 : 24, at = FMT == F_Q5_0 ? 2 : 4;
    const u8* p = row + (i >> 5) * bb;
    float d = ldh(p), m = FMT == F_Q5_0 ? -16.0f * d : ldh(p + 2);
    unsigned qh = p[at] | (p[at + 1] << 8) | (p[at + 2] << 16) | ((unsigned)p[at + 3] << 24);
    int off = (int)(i & 31), shift = off >= 16 ? 4 : 0;
    const u8* qs = p + at + 4 + (off & 15);
#pragma unroll
    for (int t = 0; t < 8; t++) {
      int q = ((qs[t] >> shift) & 0xF) | (((qh >> (off + t)) & 1) << 4);
      v[t] = d * (float)q + m;
    }
  } else if (FMT == F_Q2K) {
    const u8* p = row + (i >> 8) * 84;
    int off = (int)(i & 255), half = off >> 7, j = (off & 127) >> 5, l = off & 31;
    int sc = p[off >> 4];
    float d = ldh(p + 80) * (float)(sc & 0xF), mn = ldh(p + 82) * (float)(sc >> 4);
    const u8* qs = p + 16 + 32 * half + l;
#pragma unroll
    for (int t = 0; t < 8; t++) v[t] = d * (float)((qs[t] >> (2 * j)) & 3) - mn;
  } else if (FMT == F_Q3K) {
    const u8* p = row + (i >> 8) * 110;
    int off = (int)(i & 255), half = off >> 7, j = (off & 127) >> 5, l = off & 31, s = off >> 4;
    const u8* sc = p + 96;
    int low = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
    int high = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
    float d = ldh(p + 108) * (float)((low | (high << 4)) - 32);
    const u8* hm = p + l;
    const u8* qs = p + 32 + 32 * half + l;
    const int bit = 1 << (off >> 5);
#pragma unroll
    for (int t = 0; t < 8; t++) v[t] = d * (float)(((qs[t] >> (2 * j)) & 3) - ((hm[t] & bit) ? 0 : 4));
  } else {  // F_Q6K
    const u8* p = row + (i >> 8) * 210;
    float d = ldh(p + 208);
    int off = (int)(i & 255), n = off >> 7, t = off & 127, quarter = t >> 5, l = t & 31;
    const u8* ql = p + 64 * n;
    const u8* qh = p + 128 + 32 * n;
    const signed char* sc = (const signed char*)(p + 192 + 8 * n);
    float s = d * (float)sc[(l >> 4) + 2 * quarter];
#pragma unroll
    for (int u = 0; u < 8; u++) {
      int ll = l + u;
      int lo = (quarter & 1) ? ql[ll + 32] : ql[ll];
      lo = (quarter >= 2) ? (lo >> 4) : (lo & 0xF);
      int h = (qh[ll] >> (2 * quarter)) & 3;
      v[u] = s * (float)((lo | (h << 4)) - 32);
    }
  }
}

// Input forms of the matrix-vector product.
#define IN_PLAIN 0
#define IN_SWIGLU 1  // x = silu(g) * u, g and u the two halves of a row of 2k values
#define IN_GEGLU 2   // x = gelu_tanh(g) * u
// Output forms.
#define OUT_STORE 0  // y = W x (+ bias)
#define OUT_ADD 1    // y += W x (the residual stream)
#define OUT_QKV 2    // q (roped) to y; k (roped) and v into the paged cache

D float silu(float g) { return g / (1.0f + __expf(-g)); }
D float gelu_tanh(float g) { return 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g))); }

D void load_x8(const float* x, int in_mode, i64 k, i64 i, float* xv) {
  if (in_mode == IN_PLAIN) {
    float4 a = *(const float4*)(x + i), b = *(const float4*)(x + i + 4);
    xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w; xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
  } else {
#pragma unroll
    for (int t = 0; t < 8; t++) {
      float g = x[i + t], u = x[k + i + t];
      xv[t] = (in_mode == IN_SWIGLU ? silu(g) : gelu_tanh(g)) * u;
    }
  }
}

// Where the KV cache row of (sequence slot, position, kv head) starts: a layer's pool is
// [blocks][2][kv_heads][BS][hd]; which = 0 for K, 1 for V.
D i64 kv_offset(const int* table, i64 max_blocks, i64 slot, i64 pos, i64 which, i64 head,
                i64 kvh, i64 bs, i64 hd) {
  i64 blk = table[slot * max_blocks + pos / bs];
  return (((blk * 2 + which) * kvh + head) * bs + pos % bs) * hd;
}

struct QkvArgs {
  const float* bias;      // [qd + 2 kvd] or null
  const float* inv_freq;  // [hd / 2] or null (no rope)
  const int* pos;         // [m]
  const int* slot;        // [m]
  const int* table;       // [slots][max_blocks]
  void* cache;            // this layer's pool
  i64 qd, kvd, hd, kvh, bs, max_blocks, kv_half;
};

D void store_kv(const QkvArgs& a, int r, i64 row, float v) {
  i64 which = row >= a.kvd ? 1 : 0;
  i64 rr = row - which * a.kvd;
  i64 off = kv_offset(a.table, a.max_blocks, a.slot[r], a.pos[r], which, rr / a.hd, a.kvh, a.bs, a.hd) + rr % a.hd;
  if (a.kv_half) ((unsigned short*)a.cache)[off] = f2h(v);
  else ((float*)a.cache)[off] = v;
}

// The epilogue of a product: output rows g and g + 1 (when `two`) of token row tr, stored,
// added to the residual stream, or (q/k/v) biased, roped in pairs and written to y or the
// paged cache.
D void emit_pair(float* y, i64 y_stride, i64 out_mode, const QkvArgs& qa, i64 tr, i64 g,
                 float v0, float v1, bool two) {
  if (out_mode == OUT_STORE) {
    if (qa.bias) { v0 += qa.bias[g]; if (two) v1 += qa.bias[g + 1]; }
    y[tr * y_stride + g] = v0;
    if (two) y[tr * y_stride + g + 1] = v1;
  } else if (out_mode == OUT_ADD) {
    y[tr * y_stride + g] += v0;
    if (two) y[tr * y_stride + g + 1] += v1;
  } else {  // OUT_QKV: rows come in (even, odd) rope pairs within a head
    if (qa.bias) { v0 += qa.bias[g]; v1 += qa.bias[g + 1]; }
    if (qa.inv_freq && g < qa.qd + qa.kvd) {
      const i64 d = (g < qa.qd ? g : g - qa.qd) % qa.hd;
      float sn, cs;
      sincosf((float)qa.pos[tr] * qa.inv_freq[d >> 1], &sn, &cs);
      float o0 = v0 * cs - v1 * sn, o1 = v0 * sn + v1 * cs;
      v0 = o0; v1 = o1;
    }
    if (g < qa.qd) {
      y[tr * y_stride + g] = v0;
      y[tr * y_stride + g + 1] = v1;
    } else {
      store_kv(qa, (int)tr, g - qa.qd, v0);
      store_kv(qa, (int)tr, g - qa.qd + 1, v1);
    }
  }
}

// One warp computes two adjacent output rows for MR token rows (grid.y walks groups of MR
// token rows), reading each weight row once per group. Rows of x are k apart (2k for the
// gated input forms); rows of y are y_stride apart.
template <int FMT, int MR>
D void gemv(const u8* __restrict__ w, i64 row_bytes, i64 n, i64 k, i64 row0,
            const float* __restrict__ x, i64 m, i64 in_mode,
            float* y, i64 y_stride, i64 out_mode, const QkvArgs& qa,
            const float* __restrict__ norm_w, float eps, const float* __restrict__ scales) {
  const int lane = threadIdx.x & 31;
  const i64 row = 2 * ((i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5));
  // The weights do not depend on the kernel before: start their first kilobyte on its way
  // to L2 before waiting for that kernel.
  if (row < n) {
    const u8* p0 = w + row * row_bytes;
    const i64 pre = min(row_bytes, (i64)1024);
    for (i64 off = lane * 128; off < pre; off += 32 * 128) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(p0 + off));
      if (row + 1 < n) asm volatile("prefetch.global.L2 [%0];" ::"l"(p0 + row_bytes + off));
    }
  }
  GRID_WAIT();
  if (row >= n) return;
  const i64 r0 = (i64)blockIdx.y * MR;
  const int rows = (int)min((i64)MR, m - r0);
  // RMSNorm of the input rows folded into the loads: x * inv[r] * norm_w, inv[r] from
  // `scales` (several rows: computed once by row_scales) or here (one row)
  float inv[MR];
#pragma unroll
  for (int r = 0; r < MR; r++) {
    inv[r] = 1.0f;
    if (norm_w && scales && r < rows) inv[r] = scales[r0 + r];
    else if (norm_w && r < rows) {
      const float* xr = x + (r0 + r) * k;
      float ss = 0.0f;
      for (i64 i = lane * 4; i < k; i += 128) {
        float4 v = *(const float4*)(xr + i);
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
      }
      inv[r] = rsqrtf(warp_sum(ss) / (float)k + eps);
    }
  }
  const bool two = row + 1 < n;
  const u8* w0 = w + row * row_bytes;
  const u8* w1 = two ? w0 + row_bytes : w0;
  const i64 xs = in_mode == IN_PLAIN ? k : 2 * k;
  float acc0[MR], acc1[MR];
#pragma unroll
  for (int r = 0; r < MR; r++) { acc0[r] = 0.0f; acc1[r] = 0.0f; }
#pragma unroll 2
  for (i64 i = lane * 8; i < k; i += 256) {
    float a[8], b[8], nw[8];
    deq8<FMT>(w0, i, a);
    deq8<FMT>(w1, i, b);
    if (norm_w) {
      float4 p = *(const float4*)(norm_w + i), q = *(const float4*)(norm_w + i + 4);
      nw[0] = p.x; nw[1] = p.y; nw[2] = p.z; nw[3] = p.w; nw[4] = q.x; nw[5] = q.y; nw[6] = q.z; nw[7] = q.w;
    }
#pragma unroll
    for (int r = 0; r < MR; r++) {
      if (r < rows) {
        float xv[8];
        load_x8(x + (r0 + r) * xs, (int)in_mode, k, i, xv);
        if (norm_w) {
#pragma unroll
          for (int t = 0; t < 8; t++) xv[t] *= inv[r] * nw[t];
        }
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int t = 0; t < 8; t++) { s0 = fmaf(a[t], xv[t], s0); s1 = fmaf(b[t], xv[t], s1); }
        acc0[r] += s0;
        acc1[r] += s1;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < MR; r++) { acc0[r] = warp_sum(acc0[r]); acc1[r] = warp_sum(acc1[r]); }
  // lane r writes token row r (MR <= 32)
#pragma unroll
  for (int r = 0; r < MR; r++) {
    if (lane != r || r >= rows) continue;
    emit_pair(y, y_stride, out_mode, qa, r0 + r, row0 + row, acc0[r], acc1[r], two);
  }
}

#define GEMV_KERNEL(NAME, FMT, MR)                                                              \
  extern "C" __global__ void __launch_bounds__(128) NAME(                                      \
      const u8* w, i64 row_bytes, i64 n, i64 k, i64 row0, const float* x, i64 m, i64 in_mode,  \
      float* y, i64 y_stride, i64 out_mode, const float* bias, const float* inv_freq,           \
      const int* pos, const int* slot, const int* table, void* cache, i64 qd, i64 kvd, i64 hd, \
      i64 kvh, i64 bs, i64 max_blocks, i64 kv_half, const float* norm_w, double eps,            \
      const float* scales) {                                                                     \
    QkvArgs qa = {bias, inv_freq, pos, slot, table, cache, qd, kvd, hd, kvh, bs, max_blocks, kv_half}; \
    gemv<FMT, MR>(w, row_bytes, n, k, row0, x, m, in_mode, y, y_stride, out_mode, qa, norm_w,    \
                  (float)eps, scales);                                                           \
  }
// One token row (decode at batch 1): a block of SPLIT_WARPS warps computes four adjacent
// output rows, its warps splitting k between them (interleaved runs of 256 values), so the
// n = hidden products still fill the GPU with loads in flight. The RMSNorm of the input is
// folded in after the sums: sum(w * x * nw) * inv, with inv from the same pass's sum of x^2.
#define SPLIT_WARPS 4
// The four weight rows a split-k block reads (the last repeated past n): started towards L2
// before waiting on the kernel before (they do not depend on it), then waited for.
D void split_rows(const u8* w, i64 row_bytes, i64 row, int nrows, const u8** wr) {
  const u8* p0 = w + row * row_bytes;
  const i64 pre = min(row_bytes * nrows, (i64)32768);
  for (i64 off = threadIdx.x * 128; off < pre; off += blockDim.x * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p0 + off));
  GRID_WAIT();
#pragma unroll
  for (int j = 0; j < 4; j++) wr[j] = w + (row + min(j, nrows - 1)) * row_bytes;
}
template <int FMT>
D void gemv_split(const u8* __restrict__ w, i64 row_bytes, i64 n, i64 k, i64 row0,
                  const float* __restrict__ x, i64 in_mode, float* y, i64 out_mode,
                  const QkvArgs& qa, const float* __restrict__ norm_w, float eps) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const i64 row = 4 * (i64)blockIdx.x;
  const int nrows = (int)min((i64)4, n - row);
  const u8* wr[4];
  split_rows(w, row_bytes, row, nrows, wr);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ss = 0.0f;
#pragma unroll 2
  for (i64 i = (i64)(wid * 32 + lane) * 8; i < k; i += SPLIT_WARPS * 256) {
    float a[4][8], xv[8];
#pragma unroll
    for (int j = 0; j < 4; j++) deq8<FMT>(wr[j], i, a[j]);
    load_x8(x, (int)in_mode, k, i, xv);
    if (norm_w) {
      float4 p = *(const float4*)(norm_w + i), q = *(const float4*)(norm_w + i + 4);
      float nw[8] = {p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w};
#pragma unroll
      for (int t = 0; t < 8; t++) { ss = fmaf(xv[t], xv[t], ss); xv[t] *= nw[t]; }
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
      float s = 0.0f;
#pragma unroll
      for (int t = 0; t < 8; t++) s = fmaf(a[j][t], xv[t], s);
      acc[j] += s;
    }
  }
  __shared__ float part[SPLIT_WARPS][5];
#pragma unroll
  for (int j = 0; j < 4; j++) acc[j] = warp_sum(acc[j]);
  ss = warp_sum(ss);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < 4; j++) part[wid][j] = acc[j];
    part[wid][4] = ss;
  }
  __syncthreads();
  if (threadIdx.x >= 2) return;
  // thread p emits the pair (row + 2p, row + 2p + 1)
  const int p = threadIdx.x;
  if (2 * p >= nrows) return;
  float v[5] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int q = 0; q < SPLIT_WARPS; q++)
#pragma unroll
    for (int j = 0; j < 5; j++) v[j] += part[q][j];
  const float inv = norm_w ? rsqrtf(v[4] / (float)k + eps) : 1.0f;
  emit_pair(y, 0, out_mode, qa, 0, row0 + row + 2 * p, v[2 * p] * inv, v[2 * p + 1] * inv,
            2 * p + 1 < nrows);
}

#define GEMV_SPLIT_KERNEL(NAME, FMT)                                                            \
  extern "C" __global__ void __launch_bounds__(32 * SPLIT_WARPS) NAME(                         \
      const u8* w, i64 row_bytes, i64 n, i64 k, i64 row0, const float* x, i64 m, i64 in_mode,  \
      float* y, i64 y_stride, i64 out_mode, const float* bias, const float* inv_freq,           \
      const int* pos, const int* slot, const int* table, void* cache, i64 qd, i64 kvd, i64 hd, \
      i64 kvh, i64 bs, i64 max_blocks, i64 kv_half, const float* norm_w, double eps,            \
      const float* scales) {                                                                     \
    QkvArgs qa = {bias, inv_freq, pos, slot, table, cache, qd, kvd, hd, kvh, bs, max_blocks, kv_half}; \
    gemv_split<FMT>(w, row_bytes, n, k, row0, x, in_mode, y, out_mode, qa, norm_w, (float)eps);  \
  }
// Single-row products against int8 activations (the lever llama.cpp pulls): `quant_x` turns
// the input row (its RMSNorm and gated form applied) into int8 values with one scale per 32
// and the exact float sums of each 16, then `gemvq_*` multiplies the weights' own integers
// with `dp4a`, four per instruction, and applies the block scales once per 16 or 32 values:
// sum(w x) = sum over halves h of a_h d sum(q_w q_x) + b_h sum(x), for w = a_h q_w + b_h.
// Launched as grid (k / 256, m): block (gx, r) quantizes the 8 groups of 32 values
// 256 gx .. 256 gx + 255 of row r, each warp one group; with an RMSNorm every block sums the
// row's squares itself (k floats from L2), so no block waits on another.
extern "C" __global__ void __launch_bounds__(256) quant_x(const float* x, i64 m, i64 k, i64 in_mode,
                                                           const float* norm_w, double eps,
                                                           signed char* xq, float4* xd) {
  GRID_WAIT();
  const i64 r = blockIdx.y;
  if (r >= m) return;
  const float* xr = x + r * (in_mode == IN_PLAIN ? k : 2 * k);
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float inv = 1.0f;
  if (norm_w) {
    __shared__ float red[32];
    float ss = 0.0f;
    for (i64 i = threadIdx.x * 4; i < k; i += blockDim.x * 4) {
      const float4 v = *(const float4*)(xr + i);
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = warp_sum(ss);
    if (lane == 0) red[wid] = ss;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < warps; w++) t += red[w];
    inv = rsqrtf(t / (float)k + (float)eps);
  }
  const i64 g = (i64)blockIdx.x * warps + wid;
  if (g >= k / 32) return;
  const i64 i = g * 32 + lane;
  float v;
  if (in_mode == IN_PLAIN) v = xr[i];
  else v = (in_mode == IN_SWIGLU ? silu(xr[i]) : gelu_tanh(xr[i])) * xr[k + i];
  if (norm_w) v *= inv * norm_w[i];
  const float d = warp_max(fabsf(v)) / 127.0f;
  xq[r * k + i] = (signed char)(d > 0.0f ? __float2int_rn(v / d) : 0);
  float s = v;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float s_hi = __shfl_sync(0xffffffffu, s, 16);
  if (lane == 0) xd[r * (k / 32) + g] = make_float4(d, s, s_hi, 0.0f);
}

D unsigned ld16x2(const u8* p) {  // 4 bytes at a 2-aligned address
  const unsigned short* h = (const unsigned short*)p;
  return (unsigned)__ldg(h) | ((unsigned)__ldg(h + 1) << 16);
}
// 32 bytes from an address aligned to 2, 4 or 16 bytes
D void ld32_a2(const u8* p, unsigned* u) {
#pragma unroll
  for (int t = 0; t < 8; t++) u[t] = ld16x2(p + 4 * t);
}
D void ld32_a4(const u8* p, unsigned* u) {
#pragma unroll
  for (int t = 0; t < 8; t++) u[t] = __ldg((const unsigned*)p + t);
}
D void ld32_a16(const u8* p, unsigned* u) {
  uint4 a = __ldg((const uint4*)p), b = __ldg((const uint4*)p + 1);
  u[0] = a.x; u[1] = a.y; u[2] = a.z; u[3] = a.w; u[4] = b.x; u[5] = b.y; u[6] = b.z; u[7] = b.w;
}
// bits 0..3 of x to bit 0 of bytes 0..3
D unsigned spread4(unsigned x) { return ((x & 0xFu) * 0x00204081u) & 0x01010101u; }
D int byte_of(unsigned w0, unsigned w1, unsigned w2, int n) {
  const unsigned w = n < 4 ? w0 : (n < 8 ? w1 : w2);
  return (int)((w >> (8 * (n & 3))) & 0xFFu);
}

// Values i..i+31 (i a multiple of 32) of a row in block format FMT as 8 words of 4 signed
// bytes q, with w = a[h] q + b[h] for the values of half h (16 each).
template <int FMT> D void q32(const u8* row, i64 i, int* q, float* a, float* b) {
  unsigned u[8];
  if (FMT == F_Q8_0) {
    const u8* p = row + (i >> 5) * 34;
    ld32_a2(p + 2, u);
    a[0] = a[1] = ldh(p); b[0] = b[1] = 0.0f;
#pragma unroll
    for (int t = 0; t < 8; t++) q[t] = (int)u[t];
  } else if (FMT == F_Q4_0 || FMT == F_Q4_1 || FMT == F_Q5_0 || FMT == F_Q5_1) {
    const int bb = FMT == F_Q4_0 ? 18 : FMT == F_Q4_1 ? 20 : FMT == F_Q5_0 ? 22 : 24;
    const int at = (FMT == F_Q4_0 || FMT == F_Q5_0) ? 2 : 4;  // after d (and m)
    const bool five = FMT == F_Q5_0 || FMT == F_Q5_1;
    const u8* p = row + (i >> 5) * bb;
    const float d = ldh(p);
    a[0] = a[1] = d;
    b[0] = b[1] = FMT == F_Q4_0 ? -8.0f * d : FMT == F_Q5_0 ? -16.0f * d : ldh(p + 2);
    unsigned qh = 0;
    if (five) qh = at == 2 ? ld16x2(p + at) : __ldg((const unsigned*)(p + at));
    const u8* qs = p + at + (five ? 4 : 0);
#pragma unroll
    for (int t = 0; t < 4; t++) u[t] = at == 2 ? ld16x2(qs + 4 * t) : __ldg((const unsigned*)qs + t);
#pragma unroll
    for (int t = 0; t < 4; t++) {
      q[t] = (int)(u[t] & 0x0F0F0F0Fu);
      q[4 + t] = (int)((u[t] >> 4) & 0x0F0F0F0Fu);
      if (five) {
        q[t] |= (int)(spread4(qh >> (4 * t)) << 4);
        q[4 + t] |= (int)(spread4(qh >> (16 + 4 * t)) << 4);
      }
    }
  } else if (FMT == F_Q4K || FMT == F_Q5K) {
    const u8* p = row + (i >> 8) * (FMT == F_Q4K ? 144 : 176);
    const int sb = (int)((i & 255) >> 5), j = sb >> 1, hi = sb & 1;
    const uint4 h = __ldg((const uint4*)p);
    int sc, mn;
    if (sb < 4) {
      sc = byte_of(h.y, h.z, h.w, sb) & 63;
      mn = byte_of(h.y, h.z, h.w, sb + 4) & 63;
    } else {
      sc = (byte_of(h.y, h.z, h.w, sb + 4) & 0xF) | ((byte_of(h.y, h.z, h.w, sb - 4) >> 6) << 4);
      mn = (byte_of(h.y, h.z, h.w, sb + 4) >> 4) | ((byte_of(h.y, h.z, h.w, sb) >> 6) << 4);
    }
    a[0] = a[1] = h2f(h.x & 0xFFFF) * (float)sc;
    b[0] = b[1] = -h2f(h.x >> 16) * (float)mn;
    ld32_a16(p + (FMT == F_Q4K ? 16 : 48) + 32 * j, u);
    unsigned qh[8];
    if (FMT == F_Q5K) ld32_a16(p + 16, qh);
#pragma unroll
    for (int t = 0; t < 8; t++) {
      q[t] = (int)((u[t] >> (4 * hi)) & 0x0F0F0F0Fu);
      if (FMT == F_Q5K) q[t] |= (int)(((qh[t] >> sb) & 0x01010101u) << 4);
    }
  } else if (FMT == F_Q6K) {
    const u8* p = row + (i >> 8) * 210;
    const int off = (int)(i & 255), n = off >> 7, quarter = (off & 127) >> 5;
    unsigned qh[8];
    ld32_a2(p + 64 * n + 32 * (quarter & 1), u);
    ld32_a2(p + 128 + 32 * n, qh);
    const float d = ldh(p + 208);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      a[h] = d * (float)(signed char)__ldg(p + 192 + 8 * n + 2 * quarter + h);
      b[h] = -32.0f * a[h];
    }
#pragma unroll
    for (int t = 0; t < 8; t++)
      q[t] = (int)(((u[t] >> (4 * (quarter >> 1))) & 0x0F0F0F0Fu) | (((qh[t] >> (2 * quarter)) & 0x03030303u) << 4));
  } else if (FMT == F_Q2K) {
    const u8* p = row + (i >> 8) * 84;
    const int off = (int)(i & 255), half = off >> 7, j = (off & 127) >> 5;
    ld32_a4(p + 16 + 32 * half, u);
    const float d = ldh(p + 80), dmin = ldh(p + 82);
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int sc = __ldg(p + (off >> 4) + h);
      a[h] = d * (float)(sc & 0xF);
      b[h] = -dmin * (float)(sc >> 4);
    }
#pragma unroll
    for (int t = 0; t < 8; t++) q[t] = (int)((u[t] >> (2 * j)) & 0x03030303u);
  } else if (FMT == F_Q3K) {
    const u8* p = row + (i >> 8) * 110;
    const int off = (int)(i & 255), half = off >> 7, j = (off & 127) >> 5;
    unsigned hm[8];
    ld32_a2(p + 32 + 32 * half, u);
    ld32_a2(p, hm);
    const float d = ldh(p + 108);
    const u8* sc = p + 96;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int s = (off >> 4) + h;
      const int low = s < 8 ? (__ldg(sc + s) & 0xF) : (__ldg(sc + s - 8) >> 4);
      const int high = (__ldg(sc + 8 + (s & 3)) >> (2 * (s >> 2))) & 3;
      a[h] = d * (float)((low | (high << 4)) - 32);
      b[h] = -4.0f * a[h];
    }
    const int bit = 4 * half + j;
#pragma unroll
    for (int t = 0; t < 8; t++)
      q[t] = (int)(((u[t] >> (2 * j)) & 0x03030303u) | (((hm[t] >> bit) & 0x01010101u) << 2));
  }
}

// The split-k single-row product over int8 activations: as `gemv_split` (four output rows a
// block, SPLIT_WARPS warps splitting k), each lane taking 32 values at a time. (A warp per
// 1,024 columns, up to 8, measured slower on an H100 at k = 4,096 and no faster at 14,336.)
template <int FMT>
D void gemvq(const u8* __restrict__ w, i64 row_bytes, i64 n, i64 k, i64 row0,
             const signed char* __restrict__ xq, const float4* __restrict__ xd, float* y,
             i64 out_mode, const QkvArgs& qa) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const i64 row = 4 * (i64)blockIdx.x;
  const int nrows = (int)min((i64)4, n - row);
  const u8* wr[4];
  split_rows(w, row_bytes, row, nrows, wr);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
  for (i64 i = (i64)(wid * 32 + lane) * 32; i < k; i += SPLIT_WARPS * 1024) {
    const int4 x0 = *(const int4*)(xq + i), x1 = *(const int4*)(xq + i + 16);
    const int xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    const float4 s = xd[i >> 5];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      int q[8];
      float a[2], b[2];
      q32<FMT>(wr[j], i, q, a, b);
      int d0 = 0, d1 = 0;
#pragma unroll
      for (int t = 0; t < 4; t++) { d0 = __dp4a(q[t], xv[t], d0); d1 = __dp4a(q[4 + t], xv[4 + t], d1); }
      acc[j] += s.x * (a[0] * (float)d0 + a[1] * (float)d1) + b[0] * s.y + b[1] * s.z;
    }
  }
  __shared__ float part[SPLIT_WARPS][4];
#pragma unroll
  for (int j = 0; j < 4; j++) acc[j] = warp_sum(acc[j]);
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < 4; j++) part[wid][j] = acc[j];
  }
  __syncthreads();
  if (threadIdx.x >= 2) return;
  const int p = threadIdx.x;
  if (2 * p >= nrows) return;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int r = 0; r < SPLIT_WARPS; r++)
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] += part[r][j];
  emit_pair(y, 0, out_mode, qa, 0, row0 + row + 2 * p, v[2 * p], v[2 * p + 1], 2 * p + 1 < nrows);
}
#define GEMVQ_KERNEL(SUFFIX, FMT)                                                                 \
  extern "C" __global__ void __launch_bounds__(32 * SPLIT_WARPS) gemvq_##SUFFIX(                 \
      const u8* w, i64 row_bytes, i64 n, i64 k, i64 row0, const signed char* xq, const float4* xd, \
      float* y, i64 out_mode, const float* bias, const float* inv_freq, const int* pos,           \
      const int* slot, const int* table, void* cache, i64 qd, i64 kvd, i64 hd, i64 kvh, i64 bs,   \
      i64 max_blocks, i64 kv_half) {                                                               \
    QkvArgs qa = {bias, inv_freq, pos, slot, table, cache, qd, kvd, hd, kvh, bs, max_blocks, kv_half}; \
    gemvq<FMT>(w, row_bytes, n, k, row0, xq, xd, y, out_mode, qa);                                 \
  }

// The weights expanded to f16 ([n][k] row-major), for products of many rows on the tensor
// cores when the stored format is a block format: each thread expands 8 values at a time and
// stores them as one 16-byte word.
template <int FMT> D void dequant_f16(const u8* w, i64 row_bytes, i64 n, i64 k, unsigned short* out) {
  GRID_WAIT();
  const i64 per_row = k / 8;
  for (i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x; c < n * per_row; c += (i64)gridDim.x * blockDim.x) {
    const i64 r = c / per_row, i = (c - r * per_row) * 8;
    float v[8];
    deq8<FMT>(w + r * row_bytes, i, v);
    uint4 o;
    o.x = (unsigned)f2h(v[0]) | ((unsigned)f2h(v[1]) << 16);
    o.y = (unsigned)f2h(v[2]) | ((unsigned)f2h(v[3]) << 16);
    o.z = (unsigned)f2h(v[4]) | ((unsigned)f2h(v[5]) << 16);
    o.w = (unsigned)f2h(v[6]) | ((unsigned)f2h(v[7]) << 16);
    *(uint4*)(out + r * k + i) = o;
  }
}
#define DEQUANT_KERNEL(NAME, FMT)                                                                     \
  extern "C" __global__ void __launch_bounds__(256) NAME(const u8* w, i64 row_bytes, i64 n, i64 k, \
                                                         unsigned short* out) {                      \
    dequant_f16<FMT>(w, row_bytes, n, k, out);                                                      \
  }
// One format's products; the host appends `GEMV_FORMAT(...)` and `EMBED_KERNEL(...)` lines for
// the formats a model stores (see `kernel_source`), so only those are compiled.
#define GEMV_FORMAT(SUFFIX, FMT) \
  GEMV_KERNEL(gemv1_##SUFFIX, FMT, 1) GEMV_KERNEL(gemv4_##SUFFIX, FMT, 4) GEMV_KERNEL(gemv8_##SUFFIX, FMT, 8) \
  GEMV_SPLIT_KERNEL(gemvs_##SUFFIX, FMT) DEQUANT_KERNEL(dequant_##SUFFIX, FMT)

// The RMSNorm factor 1 / sqrt(mean(x^2) + eps) of each of m rows of k values (one block a
// row), for the products of several rows, which then read it instead of each warp summing.
extern "C" __global__ void __launch_bounds__(128) row_scales(const float* x, i64 k, double eps, float* scales) {
  GRID_WAIT();
  __shared__ float sh[4];
  const float* xr = x + (i64)blockIdx.x * k;
  float s = 0.0f;
  for (i64 i = threadIdx.x * 4; i < k; i += blockDim.x * 4) {
    float4 v = *(const float4*)(xr + i);
    s += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x == 0) scales[blockIdx.x] = rsqrtf((sh[0] + sh[1] + sh[2] + sh[3]) / (float)k + (float)eps);
}

// The embedding rows of m tokens, dequantized from the table's format and scaled.
template <int FMT> D void embed(const u8* table, i64 row_bytes, const int* tokens, float* x, i64 k, double scale) {
  GRID_WAIT();
  const u8* row = table + (i64)tokens[blockIdx.x] * row_bytes;
  float* xr = x + (i64)blockIdx.x * k;
  for (i64 i = threadIdx.x * 8; i < k; i += blockDim.x * 8) {
    float v[8];
    deq8<FMT>(row, i, v);
#pragma unroll
    for (int t = 0; t < 8; t++) xr[i + t] = v[t] * (float)scale;
  }
}
#define EMBED_KERNEL(SUFFIX, FMT)                                                                   \
  extern "C" __global__ void embed_##SUFFIX(const u8* table, i64 row_bytes, const int* tokens, float* x, \
                                            i64 k, double scale) {                                  \
    embed<FMT>(table, row_bytes, tokens, x, k, scale);                                              \
  }

// Attention of m query rows over their sequences' cached rows 0..pos (causal), split over
// the sequence: block (split, head + heads * row) takes positions [split * 128, +128). Each
// of its four warps scores 32 positions at once (a lane per position, whole K rows read as
// 16-byte vectors), then accumulates their V rows with lanes over the head dimension. A
// sequence within one split writes its output directly; otherwise each block leaves its
// running max, sum and unnormalised output in `part` ([m][heads][splits][hd + 2]) and the
// last block of the (row, head) to finish merges them (a ticket in `tickets`, reset after).
#define ATT_WARPS 4
#define ATT_SPLIT 128
#define MAX_DL 8  // head_dim / 32 values per lane (head_dim a multiple of 32, at most 256)
// One value of an attention output row also written as `quant_x` writes its int8 form: the
// calling warp holds the 32 values of one group (`col` a multiple of 32 at lane 0), so the
// group's scale, integers and sums of each 16 come from the warp alone. Every lane calls it.
D void quant_group(float v, i64 col, signed char* xq_row, float4* xd_row) {
  const float d = warp_max(fabsf(v)) / 127.0f;
  xq_row[col] = (signed char)(d > 0.0f ? __float2int_rn(v / d) : 0);
  float s = v;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float s_hi = __shfl_sync(0xffffffffu, s, 16);
  if ((threadIdx.x & 31) == 0) xd_row[col / 32] = make_float4(d, s, s_hi, 0.0f);
}

template <bool HALF>
D void attention_split(const float* q, const void* cache, const int* table, const int* pos,
                       const int* slot, float* part, float* out, int* tickets, i64 heads, i64 kvh,
                       i64 hd, i64 bs, i64 max_blocks, float scale, signed char* xq, float4* xd) {
  __shared__ float sq[256];
  __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], so[ATT_WARPS][256];
  __shared__ int last;
  const i64 h = blockIdx.y % heads, r = blockIdx.y / heads;
  // positions, slots and block tables come from the host or an earlier step, not from the
  // kernel before: read them, and start this block's first K and V rows towards L2 (every
  // 128-byte line: the weights streamed since the last step have evicted them), before waiting
  const i64 len = (i64)pos[r] + 1;
  const i64 kh = h / (heads / kvh);
  {
    const i64 pp = (i64)blockIdx.x * ATT_SPLIT + threadIdx.x;
    if (pp < len && threadIdx.x < ATT_SPLIT) {
      const i64 off = kv_offset(table, max_blocks, slot[r], pp, 0, kh, kvh, bs, hd);
      const i64 row = hd * (HALF ? 2 : 4), v_at = kvh * bs * row;
      const u8* base = (const u8*)cache + off * (HALF ? 2 : 4);
      for (i64 o = 0; o < row; o += 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(base + o));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(base + v_at + o));
      }
    }
  }
  GRID_WAIT();
  if ((i64)blockIdx.x * ATT_SPLIT >= len) return;
  const i64 used = (len + ATT_SPLIT - 1) / ATT_SPLIT;
  // blocks with work: block b takes splits b, b + gridDim.x, ... and folds them into one
  // running (max, sum, output) before the blocks merge
  const i64 busy = min((i64)gridDim.x, used);
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  const i64 qd = heads * hd;
  for (i64 d = threadIdx.x; d < hd; d += blockDim.x) sq[d] = q[r * qd + h * hd + d] * scale;
  float* dst = out + r * qd + h * hd;
  const int dpl = (int)(hd >> 5);
  float bm = -INFINITY, bl = 0.0f, bo[2] = {0.0f, 0.0f};  // this block's running merge
  for (i64 s = blockIdx.x; s < used; s += gridDim.x) {
    __syncthreads();  // sq written; the last split's shared values read
    const i64 start = s * ATT_SPLIT, end = min(len, start + ATT_SPLIT);
    const i64 p0 = start + wid * 32;
    const i64 p = p0 + lane;
    const bool valid = p < end;
    float sc = -INFINITY;
    i64 ko = 0;
    if (valid) {
      ko = kv_offset(table, max_blocks, slot[r], p, 0, kh, kvh, bs, hd);
      float acc = 0.0f;
      // eight 16-byte loads in flight at a time (hd is a multiple of 32)
#pragma unroll 8
      for (i64 d = 0; d < hd; d += 8) {
        float kv[8];
        if (HALF) {
          uint4 u = *(const uint4*)((const unsigned short*)cache + ko + d);
          unsigned w4[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
          for (int t = 0; t < 4; t++) { kv[2 * t] = h2f(w4[t] & 0xffff); kv[2 * t + 1] = h2f(w4[t] >> 16); }
        } else {
          const float4* f = (const float4*)((const float*)cache + ko + d);
          float4 a = f[0], b = f[1];
          kv[0] = a.x; kv[1] = a.y; kv[2] = a.z; kv[3] = a.w; kv[4] = b.x; kv[5] = b.y; kv[6] = b.z; kv[7] = b.w;
        }
#pragma unroll
        for (int t = 0; t < 8; t++) acc = fmaf(sq[d + t], kv[t], acc);
      }
      sc = acc;
    }
    const float mw = warp_max(sc);
    const float e = valid ? __expf(sc - mw) : 0.0f;
    const float lw = warp_sum(e);
    const i64 vo = ko + kvh * bs * hd;  // the V half of the same block
    const int nv = (int)max((i64)0, min((i64)32, end - p0));
    float o[MAX_DL];
#pragma unroll
    for (int t = 0; t < MAX_DL; t++) o[t] = 0.0f;
#pragma unroll 8
    for (int j = 0; j < nv; j++) {
      const float pj = __shfl_sync(0xffffffffu, e, j);
      const long long vj = __shfl_sync(0xffffffffu, (long long)vo, j);
#pragma unroll
      for (int t = 0; t < MAX_DL; t++) {
        const i64 d = (i64)lane * dpl + t;
        if (t < dpl && d < hd) {
          float vv = HALF ? h2f(((const unsigned short*)cache)[vj + d]) : ((const float*)cache)[vj + d];
          o[t] = fmaf(pj, vv, o[t]);
        }
      }
    }
    if (lane == 0) { sm[wid] = mw; sl[wid] = lw; }
#pragma unroll
    for (int t = 0; t < MAX_DL; t++) {
      const i64 d = (i64)lane * dpl + t;
      if (t < dpl && d < hd) so[wid][d] = o[t];
    }
    __syncthreads();
    // this split's (max, sum) over its warps, folded into the block's running ones; thread
    // t keeps output values t and t + 128 (hd <= 256)
    float M = -INFINITY;
    for (int w2 = 0; w2 < ATT_WARPS; w2++) M = fmaxf(M, sm[w2]);
    float f[ATT_WARPS], L = 0.0f;
    for (int w2 = 0; w2 < ATT_WARPS; w2++) {
      f[w2] = sm[w2] == -INFINITY ? 0.0f : __expf(sm[w2] - M);
      L += sl[w2] * f[w2];
    }
    const float nm = fmaxf(bm, M);
    const float fb = bm == -INFINITY ? 0.0f : __expf(bm - nm), fs = __expf(M - nm);
    bl = bl * fb + L * fs;
#pragma unroll
    for (int u = 0; u < 2; u++) {
      const i64 d = threadIdx.x + u * blockDim.x;
      if (d < hd) {
        float acc = 0.0f;
        for (int w2 = 0; w2 < ATT_WARPS; w2++) acc += so[w2][d] * f[w2];
        bo[u] = bo[u] * fb + acc * fs;
      }
    }
    bm = nm;
  }
  // (xq: the o projection's int8 input row too, its `quant_x` skipped; one row, m = 1)
  if (busy == 1) {
#pragma unroll
    for (int u = 0; u < 2; u++) {
      const i64 d = threadIdx.x + u * blockDim.x;
      if (d < hd) {  // whole warps: hd is a multiple of 32
        const float v = bo[u] / bl;
        dst[d] = v;
        if (xq) quant_group(v, h * hd + d, xq + r * qd, xd + r * (qd / 32));
      }
    }
    return;
  }
  float* mine = part + ((r * heads + h) * gridDim.x + blockIdx.x) * (hd + 2);
  if (threadIdx.x == 0) { mine[0] = bm; mine[1] = bl; }
#pragma unroll
  for (int u = 0; u < 2; u++) {
    const i64 d = threadIdx.x + u * blockDim.x;
    if (d < hd) mine[2 + d] = bo[u];
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int t = atomicAdd(tickets + r * heads + h, 1);
    last = t == (int)busy - 1;
  }
  __syncthreads();
  if (!last) return;
  // the last block of (row, head) to finish merges the busy blocks' partials
  __threadfence();
  const float* all = part + (r * heads + h) * gridDim.x * (hd + 2);
  float GM = -INFINITY;
  for (i64 u = 0; u < busy; u++) GM = fmaxf(GM, __ldcg(all + u * (hd + 2)));
  float GL = 0.0f;
  for (i64 u = 0; u < busy; u++) GL += __ldcg(all + u * (hd + 2) + 1) * __expf(__ldcg(all + u * (hd + 2)) - GM);
  for (i64 d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (i64 u = 0; u < busy; u++) acc += __ldcg(all + u * (hd + 2) + 2 + d) * __expf(__ldcg(all + u * (hd + 2)) - GM);
    dst[d] = acc / GL;
    if (xq) quant_group(acc / GL, h * hd + d, xq + r * qd, xd + r * (qd / 32));
  }
  if (threadIdx.x == 0) tickets[r * heads + h] = 0;
}
#define ATT_KERNEL(NAME, HALF)                                                                     \
  extern "C" __global__ void __launch_bounds__(128) NAME(                                         \
      const float* q, const void* cache, const int* table, const int* pos, const int* slot,        \
      float* part, float* out, int* tickets, i64 heads, i64 kvh, i64 hd, i64 bs, i64 max_blocks,   \
      double scale, signed char* xq, float4* xd) {                                                 \
    attention_split<HALF>(q, cache, table, pos, slot, part, out, tickets, heads, kvh, hd, bs,     \
                          max_blocks, (float)scale, xq, xd);                                       \
  }
ATT_KERNEL(attention_f32, false)
ATT_KERNEL(attention_f16, true)

// A 64-bit mix (splitmix64's finaliser) for counter-based random numbers.
D unsigned long long mix64(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Picks the next token of each of m rows of logits: argmax at temperature 0 (lowest index on
// ties), else argmax of logits / T plus Gumbel noise (an exact sample of softmax(logits / T))
// from a counter-based generator keyed by (seed, position), so a sequence draws the same
// numbers whatever batch it runs in. Writes tokens[r]; when `advance`, moves pos[r] on by one
// (decode steps replayed from a graph).
// Block-wide arg-max of (v, i) pairs (ties: the lower index); every thread gets the result.
D void block_argmax(float* best, int* bi, float* sv, int* si) {
  for (int s = 16; s > 0; s >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, *best, s);
    int oi = __shfl_xor_sync(0xffffffffu, *bi, s);
    if (ov > *best || (ov == *best && oi < *bi)) { *best = ov; *bi = oi; }
  }
  if ((threadIdx.x & 31) == 0) { sv[threadIdx.x >> 5] = *best; si[threadIdx.x >> 5] = *bi; }
  __syncthreads();
  const int nw = blockDim.x >> 5;
  *best = (int)(threadIdx.x & 31) < nw ? sv[threadIdx.x & 31] : -INFINITY;
  *bi = (int)(threadIdx.x & 31) < nw ? si[threadIdx.x & 31] : 0x7fffffff;
  for (int s = 16; s > 0; s >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, *best, s);
    int oi = __shfl_xor_sync(0xffffffffu, *bi, s);
    if (ov > *best || (ov == *best && oi < *bi)) { *best = ov; *bi = oi; }
  }
  __syncthreads();
}

// A float's bits as an unsigned key of the same order.
D unsigned order_key(float f) {
  unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The scaled logit of token i in row r: the repetition penalty applied where the sequence
// has seen i (`seen` holds a bit per token), then divided by the temperature (when > 0).
D float sample_value(const float* lr, i64 i, const unsigned* seen, float penalty, float inv_t) {
  float v = lr[i];
  if (penalty != 1.0f && (seen[i >> 5] >> (i & 31)) & 1u) v = v > 0.0f ? v / penalty : v * penalty;
  return inv_t > 0.0f ? v * inv_t : v;
}

// Radix select from the top: the largest key k such that the weight of the values whose key
// is >= k (and >= `low`) reaches `want`; weight 1 per value (`mass` 0) or exp(v - vmax).
D unsigned select_key(const float* lr, i64 vocab, const unsigned* seen, float penalty, float inv_t,
                      float vmax, unsigned low, float want, int mass, float* hist, unsigned* picked) {
  unsigned prefix = 0, mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0.0f;
    __syncthreads();
    for (i64 i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = sample_value(lr, i, seen, penalty, inv_t);
      const unsigned k = order_key(v);
      if (k < low || (k & mask) != prefix) continue;
      atomicAdd(&hist[(k >> shift) & 255u], mass ? __expf(v - vmax) : 1.0f);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float cum = 0.0f;
      int chosen = -1, last = -1;
      for (int b = 255; b >= 0; b--) {
        if (hist[b] <= 0.0f) continue;
        last = b;
        if (cum + hist[b] >= want) { chosen = b; want -= cum; break; }
        cum += hist[b];
      }
      // rounding left the target unreached: keep every value of this prefix
      if (chosen < 0) { chosen = last < 0 ? 0 : last; want = 0.0f; }
      *picked = prefix | ((unsigned)chosen << shift);
      hist[256] = want;
    }
    __syncthreads();
    prefix = *picked;
    want = hist[256];
    mask |= 255u << shift;
    __syncthreads();
  }
  return prefix;
}

// The next token of each row (grid.x = rows): the repetition penalty (from the sequence's
// `seen` bits), then greedy arg-max at temperature 0; otherwise top-k, min-p and top-p cut the
// distribution at a threshold found by radix select, and a Gumbel-max draw (counter-based,
// from the row's seed and position) samples softmax(v / T) among the values kept. The token
// goes to tokens[r] and into the sequence's `seen` bits; positions move on when `advance`.
extern "C" __global__ void __launch_bounds__(1024) sample_rows(const float* logits, i64 vocab, int* tokens,
                                                               int* pos, const int* slots, const float* temps,
                                                               const long long* seeds, const int* top_k,
                                                               const float* top_p, const float* min_p,
                                                               const float* penalties, unsigned* seen,
                                                               i64 words, i64 advance) {
  GRID_WAIT();
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float hist[257];
  __shared__ unsigned picked;
  const i64 r = blockIdx.x;
  const float* lr = logits + r * vocab;
  unsigned* sb = seen + (i64)slots[r] * words;
  const float inv_t = temps[r] > 0.0f ? 1.0f / temps[r] : 0.0f;
  const float penalty = penalties[r];
  const int k = top_k[r];
  const float p = top_p[r], mp = min_p[r];
  const unsigned long long key = mix64((unsigned long long)seeds[r] ^ mix64((unsigned long long)pos[r] * 0x9e3779b97f4a7c15ULL));
  unsigned low = 0;
  const bool cut = inv_t > 0.0f && ((k > 0 && k < vocab) || p < 1.0f || mp > 0.0f);
  if (cut) {
    float best = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll 4
    for (i64 i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float v = sample_value(lr, i, sb, penalty, inv_t);
      if (v > best) { best = v; bi = (int)i; }
    }
    block_argmax(&best, &bi, sv, si);
    const float vmax = best;
    if (mp > 0.0f) low = order_key(vmax + __logf(mp));
    if (k > 0 && k < vocab) {
      const unsigned kk = select_key(lr, vocab, sb, penalty, inv_t, vmax, 0u, (float)k, 0, hist, &picked);
      low = max(low, kk);
    }
    if (p < 1.0f) {
      float z = 0.0f;
      for (i64 i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float v = sample_value(lr, i, sb, penalty, inv_t);
        if (order_key(v) >= low) z += __expf(v - vmax);
      }
      z = warp_sum(z);
      if ((threadIdx.x & 31) == 0) sv[threadIdx.x >> 5] = z;
      __syncthreads();
      if (threadIdx.x < 32) {
        z = (int)threadIdx.x < (int)(blockDim.x >> 5) ? sv[threadIdx.x] : 0.0f;
        z = warp_sum(z);
        if (threadIdx.x == 0) hist[256] = z;
      }
      __syncthreads();
      z = hist[256];
      __syncthreads();
      const unsigned pk = select_key(lr, vocab, sb, penalty, inv_t, vmax, low, p * z, 1, hist, &picked);
      low = max(low, pk);
    }
  }
  float best = -INFINITY;
  int bi = 0x7fffffff;
  // four logits in flight a thread (a load's latency per value otherwise: the vocabulary is
  // ~100 values a thread)
#pragma unroll 4
  for (i64 i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = sample_value(lr, i, sb, penalty, inv_t);
    const bool keep = !cut || order_key(v) >= low;
    if (keep && inv_t > 0.0f) {
      unsigned long long z = mix64(key + (unsigned long long)i);
      float u = ((float)(z >> 40) + 0.5f) * (1.0f / 16777216.0f);
      v = v - __logf(-__logf(u));
    }
    if (keep && (v > best || (v == best && (int)i < bi))) { best = v; bi = (int)i; }
  }
  block_argmax(&best, &bi, sv, si);
  if (threadIdx.x == 0) {
    tokens[r] = bi;
    atomicOr(&sb[bi >> 5], 1u << (bi & 31));
    if (advance) pos[r] += 1;
  }
}

// Products of many rows run as tensor-core GEMMs (cuBLASLt) on 16-bit and f32 weights: the
// rows go in converted to the weights' type (input form and RMSNorm applied as in the
// products above), and the result comes out through the same epilogue.
D unsigned short f2bf(float f) {
  unsigned u = __float_as_uint(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

// out[r][i] = input form of x's row r (times its RMSNorm factor and norm_w when given), for
// r < m (grid.y) and i < k; out_type 0 f32, 1 f16, 2 bf16.
extern "C" __global__ void __launch_bounds__(256) gemm_input(const float* x, i64 m, i64 k, i64 in_mode,
                                                             const float* norm_w, const float* scales,
                                                             void* out, i64 out_type) {
  GRID_WAIT();
  const i64 r = blockIdx.y;
  if (r >= m) return;
  const float* xr = x + r * (in_mode == IN_PLAIN ? k : 2 * k);
  const float inv = norm_w ? scales[r] : 1.0f;
  for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < k; i += (i64)gridDim.x * blockDim.x) {
    float v;
    if (in_mode == IN_PLAIN) v = xr[i];
    else { float g = xr[i], u = xr[k + i]; v = (in_mode == IN_SWIGLU ? silu(g) : gelu_tanh(g)) * u; }
    if (norm_w) v *= inv * norm_w[i];
    if (out_type == 1) ((unsigned short*)out)[r * k + i] = f2h(v);
    else if (out_type == 2) ((unsigned short*)out)[r * k + i] = f2bf(v);
    else ((float*)out)[r * k + i] = v;
  }
}

// The epilogue of a GEMM's result `yt` ([m][n] of yt_type) for output rows row0 + j.
extern "C" __global__ void __launch_bounds__(256) gemm_output(
    const void* yt, i64 yt_type, i64 m, i64 n, i64 row0, float* y, i64 y_stride, i64 out_mode,
    const float* bias, const float* inv_freq, const int* pos, const int* slot, const int* table,
    void* cache, i64 qd, i64 kvd, i64 hd, i64 kvh, i64 bs, i64 max_blocks, i64 kv_half) {
  GRID_WAIT();
  QkvArgs qa = {bias, inv_freq, pos, slot, table, cache, qd, kvd, hd, kvh, bs, max_blocks, kv_half};
  const i64 tr = blockIdx.y;
  if (tr >= m) return;
  for (i64 j = 2 * ((i64)blockIdx.x * blockDim.x + threadIdx.x); j < n; j += 2 * (i64)gridDim.x * blockDim.x) {
    const bool two = j + 1 < n;
    const i64 at = tr * n + j;
    float v0, v1 = 0.0f;
    if (yt_type == 1) { v0 = h2f(((const unsigned short*)yt)[at]); if (two) v1 = h2f(((const unsigned short*)yt)[at + 1]); }
    else if (yt_type == 2) { v0 = bf2f(((const unsigned short*)yt)[at]); if (two) v1 = bf2f(((const unsigned short*)yt)[at + 1]); }
    else { v0 = ((const float*)yt)[at]; if (two) v1 = ((const float*)yt)[at + 1]; }
    emit_pair(y, y_stride, out_mode, qa, tr, row0 + j, v0, v1, two);
  }
}
