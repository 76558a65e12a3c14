// Every one of the 2^32 fp32 patterns through every encoder of formats/scalar_codecs.h.
// Opt-in (CTest label "exhaustive"): ctest -L exhaustive. About 3 minutes on 2 cores.
//   vs CUDA's host conversions: E4M3, E5M2, E2M1, E2M3, E3M2 (cuda_fp6.h), E8M0 RZ and RU
//   vs references written here: every format (minifloats: nearest of a value table by
//   bisection; E8M0: frexp). UE4M3 has no CUDA conversion: the reference alone.
// NaN inputs: CUDA's E4M3/E5M2 NaN code differs from ours (its host path drops the sign), so
// there both must be NaN codes; the reference holds ours to exactly 0x7F | sign.
#include "formats/scalar_codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#if BLOCKSCALE_CUDA_ORACLE
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#endif

namespace {

namespace bf = blockscale::formats;

constexpr int kThreads = 2;  // the test machines have 2 cores

float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- Reference: the format's values in double, nearest by bisection, ties to the even code.
struct RefTable {
  std::vector<double> mags;  // every finite magnitude, index = magnitude code
  int sign_bit;              // 0: unsigned
  int nan_code;              // -1: no NaN, NaN -> +max

  // ieee: the all-ones exponent holds Inf/NaN (E5M2); nan: NaN's magnitude code, or -1.
  RefTable(int exp_bits, int man_bits, int bias, bool has_sign, bool ieee, int nan)
      : sign_bit(has_sign ? 1 << (exp_bits + man_bits) : 0), nan_code(nan) {
    for (int c = 0; c < (1 << (exp_bits + man_bits)) && c != nan; ++c) {
      const int e = c >> man_bits, m = c & ((1 << man_bits) - 1);
      if (ieee && e == (1 << exp_bits) - 1) break;
      mags.push_back(e == 0 ? std::ldexp(m, 1 - bias - man_bits)
                            : std::ldexp((1 << man_bits) + m, e - bias - man_bits));
    }
  }

  uint8_t encode(float x) const {
    const bool neg = std::signbit(x);
    const int max_code = static_cast<int>(mags.size()) - 1;
    if (std::isnan(x)) return nan_code < 0 ? max_code : nan_code | (neg ? sign_bit : 0);
    if (neg && sign_bit == 0) return 0;
    const int sign = neg ? sign_bit : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= mags.back()) return static_cast<uint8_t>(max_code | sign);
    // Largest lo with mags[lo] <= a; a < mags[hi] with hi = lo + 1.
    int lo = 0, hi = max_code;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (mags[mid] <= a ? lo : hi) = mid;
    }
    const double midpoint = (mags[lo] + mags[hi]) / 2;  // exact: few significant bits
    const int code = a < midpoint ? lo : a > midpoint ? hi : (lo % 2 == 0 ? lo : hi);
    return static_cast<uint8_t>(code | sign);
  }
};

const RefTable kRefE4M3(4, 3, 7, true, false, 0x7F);
const RefTable kRefE5M2(5, 2, 15, true, true, 0x7F);
const RefTable kRefE2M1(2, 1, 1, true, false, -1);
const RefTable kRefE2M3(2, 3, 1, true, false, -1);
const RefTable kRefE3M2(3, 2, 3, true, false, -1);
const RefTable kRefUE4M3(4, 3, 7, false, false, 0x7F);

// E8M0: floor(log2|x|) or ceil(log2|x|) from frexp, clamped to codes [0, 254].
uint8_t ref_e8m0(float x, bool up) {
  if (std::isnan(x)) return 0xFF;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return 0xFE;
  if (a == 0) return 0;
  int k;
  const double f = std::frexp(a, &k);  // a = f * 2^k, f in [0.5, 1)
  return static_cast<uint8_t>(std::clamp((f == 0.5 || !up ? k - 1 : k) + 127, 0, 254));
}

#if BLOCKSCALE_CUDA_ORACLE
uint8_t cuda_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
uint8_t cuda_e5m2(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); }
uint8_t cuda_e2m1(float x) { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest); }
uint8_t cuda_e2m3(float x) { return __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest); }
uint8_t cuda_e3m2(float x) { return __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest); }
uint8_t cuda_e8m0_rz(float x) { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero); }
uint8_t cuda_e8m0_ru(float x) { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf); }
#else
constexpr uint8_t (*cuda_e4m3)(float) = nullptr, (*cuda_e5m2)(float) = nullptr,
    (*cuda_e2m1)(float) = nullptr, (*cuda_e2m3)(float) = nullptr, (*cuda_e3m2)(float) = nullptr,
    (*cuda_e8m0_rz)(float) = nullptr, (*cuda_e8m0_ru)(float) = nullptr;
#endif

bool is_e4m3_nan(uint8_t c) { return (c & 0x7F) == 0x7F; }
bool is_e5m2_nan(uint8_t c) { return (c & 0x7F) > 0x7C; }

struct Sweep {
  const char* name;
  uint8_t (*ours)(float);
  uint8_t (*cuda)(float);         // nullptr: no CUDA conversion (or no toolkit)
  bool (*nan_class)(uint8_t);     // non-null: CUDA's NaN compared as a class
  uint8_t (*ref)(float);          // exact contract, NaN sign included
};

const Sweep kSweeps[] = {
    {"E4M3", bf::encode_e4m3, cuda_e4m3, is_e4m3_nan, [](float x) { return kRefE4M3.encode(x); }},
    {"E5M2", bf::encode_e5m2, cuda_e5m2, is_e5m2_nan, [](float x) { return kRefE5M2.encode(x); }},
    {"E2M1", bf::encode_e2m1, cuda_e2m1, nullptr, [](float x) { return kRefE2M1.encode(x); }},
    {"E2M3", bf::encode_e2m3, cuda_e2m3, nullptr, [](float x) { return kRefE2M3.encode(x); }},
    {"E3M2", bf::encode_e3m2, cuda_e3m2, nullptr, [](float x) { return kRefE3M2.encode(x); }},
    {"UE4M3", bf::encode_ue4m3, nullptr, nullptr, [](float x) { return kRefUE4M3.encode(x); }},
    {"E8M0_RZ", [](float x) { return bf::encode_e8m0(x, false); }, cuda_e8m0_rz, nullptr,
     [](float x) { return ref_e8m0(x, false); }},
    {"E8M0_RU", [](float x) { return bf::encode_e8m0(x, true); }, cuda_e8m0_ru, nullptr,
     [](float x) { return ref_e8m0(x, true); }},
};

struct Tally {
  uint64_t compared = 0, mismatches = 0;
  std::string first;  // the first few, for the failure message
  void add(uint32_t u, int ours, int expected, const char* oracle) {
    if (mismatches++ < 4) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "\n  0x%08x: ours 0x%02x, %s 0x%02x", u, ours, oracle, expected);
      first += buf;
    }
  }
};

void sweep_range(const Sweep& s, uint64_t begin, uint64_t end, Tally& t) {
  for (uint64_t i = begin; i < end; ++i) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float x = float_of(u);
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    const uint8_t ours = s.ours(x);
    if (s.cuda) {
      const uint8_t c = s.cuda(x);
      if (nan && s.nan_class ? !(s.nan_class(ours) && s.nan_class(c)) : c != ours) t.add(u, ours, c, "CUDA");
    }
    const uint8_t r = s.ref(x);
    if (r != ours) t.add(u, ours, r, "reference");
  }
  t.compared += end - begin;
}

void PrintTo(const Sweep& s, std::ostream* os) { *os << s.name; }

class Exhaustive : public ::testing::TestWithParam<Sweep> {};

TEST_P(Exhaustive, EveryFp32Pattern) {
  const Sweep& s = GetParam();
  const auto t0 = std::chrono::steady_clock::now();
  constexpr uint64_t kAll = uint64_t{1} << 32, kChunk = kAll / kThreads;
  std::vector<Tally> tallies(kThreads);
  std::vector<std::thread> threads;
  for (int k = 0; k < kThreads; ++k) {
    threads.emplace_back(sweep_range, std::cref(s), k * kChunk, (k + 1) * kChunk, std::ref(tallies[k]));
  }
  for (auto& th : threads) th.join();
  Tally all;
  for (const Tally& t : tallies) {
    all.compared += t.compared;
    all.mismatches += t.mismatches;
    all.first += t.first;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[  sweep   ] %s: %llu patterns vs %sreference, %llu mismatches, %.1f s\n", s.name,
              static_cast<unsigned long long>(all.compared), s.cuda ? "CUDA and " : "",
              static_cast<unsigned long long>(all.mismatches), secs);
  EXPECT_EQ(all.compared, kAll);
  EXPECT_EQ(all.mismatches, 0u) << all.first;
}

INSTANTIATE_TEST_SUITE_P(Codecs, Exhaustive, ::testing::ValuesIn(kSweeps),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
