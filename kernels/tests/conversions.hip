// Host-side check of the __host__ __device__ conversion code in our cuda_fp8.h, cuda_bf16.h
// and cuda_fp16.h against brute-force references: every e4m3 decode, 2M e4m3 encodes (each
// code's neighbours, every rounding tie, random values) and 2M f32 -> bf16 roundings.
// Built with clang (HIP host pass) and run by kernels/tests/header_conversions.rs. Prints
// bad=<mismatches> and exits non-zero on any mismatch.
#include "cuda_fp8.h"
#include <cstdio>
#include <cmath>
#include <cstring>
#include <random>
static float dec_ref(int v) { // reference e4m3 decode
  int s = v >> 7, e = (v >> 3) & 15, m = v & 7;
  if (e == 15 && m == 7) return NAN;
  float r = e == 0 ? std::ldexp((float)m, -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -r : r;
}
static int enc_ref(float f) { // brute force nearest, ties to even mantissa, satfinite
  if (std::isnan(f)) return std::signbit(f) ? 0xff : 0x7f;
  int best = -1; double bd = 1e30;
  for (int v = 0; v < 256; ++v) { float d = dec_ref(v); if (std::isnan(d)) continue;
    if (std::signbit(d) != std::signbit(f) && d != 0) continue;
    if ((v & 0x80) != (std::signbit(f) ? 0x80 : 0)) continue;
    double dist = std::fabs((double)d - (double)f);
    if (dist < bd || (dist == bd && (v & 1) == 0)) { bd = dist; best = v; } }
  return best;
}
int main() {
  int bad = 0;
  for (int v = 0; v < 256; ++v) {
    float a = candle_hip::e4m3_to_f32(v), b = dec_ref(v);
    float c = __half2float(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3));
    if (!((std::isnan(a) && std::isnan(b) && std::isnan(c)) || (a == b && c == b && std::signbit(a)==std::signbit(b)))) { printf("decode %d: %g %g %g\n", v, a, b, c); bad++; }
  }
  std::mt19937 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    float f;
    if (i < 100000) { f = dec_ref(i % 256) ; if (std::isnan(f)) continue; f = std::nextafter(f, (i/256)%2 ? INFINITY : -INFINITY); }
    else if (i < 200000) { int v = i % 256, w = (v+1)%256; f = (dec_ref(v)+dec_ref(w))/2; if (std::isnan(f)) continue; }
    else { unsigned u = rng(); memcpy(&f, &u, 4); if (std::fabs(f) > 1000 || std::fabs(f) < 1e-4) f = std::ldexp((float)(int)(rng()%20001-10000)/1000.0f, (int)(rng()%24)-16); }
    int got = __nv_fp8_e4m3(f).__x, want = enc_ref(f);
    if (got != want) { if (bad < 20) printf("encode %.9g: got %02x want %02x\n", f, got, want); bad++; }
  }
  // bf16 RNE vs double-precision reference
  for (int i = 0; i < 2000000; ++i) {
    unsigned u = rng(); float f; memcpy(&f, &u, 4);
    if (std::isnan(f)) { if (!__hisnan(__float2bfloat16(f))) bad++; continue; }
    unsigned short b = __bfloat16_as_ushort(__float2bfloat16(f));
    float lo; unsigned lu = u & 0xffff0000u; memcpy(&lo, &lu, 4);
    unsigned hu = lu + 0x10000u; float hi; memcpy(&hi, &hu, 4);
    double hv = std::isinf(hi) ? std::copysign(std::ldexp(1.0, 128), (double)hi) : (double)hi; double dl = std::fabs((double)f - lo), dh = std::fabs(hv - f);
    unsigned want = (dl < dh || (dl == dh && ((lu >> 16) & 1) == 0)) ? (lu >> 16) : (hu >> 16);
    if (b != (unsigned short)want) { if (bad < 40) printf("bf16 %08x got %04x want %04x\n", u, b, want); bad++; }
  }
  // half basics
  __half h = 1.5f; __half h2 = h * h + __half(0.25f);
  if (__half2float(h2) != 2.5f) { printf("half arith\n"); bad++; }
  if (!__hisnan(__hmax_nan(__float2half(1.0f), __float2half(NAN)))) { printf("hmax_nan\n"); bad++; }
  if (__half2float(__hmax(__float2half(1.0f), __float2half(NAN))) != 1.0f) { printf("hmax\n"); bad++; }
  printf("bad=%d\n", bad);
  return bad != 0;
}
