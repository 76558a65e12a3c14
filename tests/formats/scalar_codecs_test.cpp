// formats/scalar_codecs.h against independent oracles: CUDA's host conversions (cuda_fp8.h,
// cuda_fp4.h, cuda_fp6.h; compiled by the host compiler, no GPU needed) and references written
// here from the format definitions in docs/numerics.md, in double arithmetic.
// The full 2^32 sweep is scalar_codecs_exhaustive_test (label "exhaustive").
#include "formats/scalar_codecs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if BLOCKSCALE_CUDA_ORACLE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>
#endif

namespace {

namespace bf = blockscale::formats;

uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float float_of(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// ---- Reference minifloat formats, built from their definitions only.
struct RefFormat {
  int exp_bits, man_bits, bias;
  bool has_sign;
  bool ieee_specials;  // all-ones exponent = Inf/NaN (E5M2)
  int nan_code;        // magnitude code written for NaN, -1: none (NaN -> +max)
  std::vector<double> mags;  // value of every finite magnitude code, index = code

  RefFormat(int e, int m, int b, bool sign, bool ieee, int nan)
      : exp_bits(e), man_bits(m), bias(b), has_sign(sign), ieee_specials(ieee), nan_code(nan) {
    for (int c = 0; c < (1 << (e + m)); ++c) {
      const int ef = c >> m, mf = c & ((1 << m) - 1);
      if ((ieee && ef == (1 << e) - 1) || c == nan) break;
      mags.push_back(ef == 0 ? std::ldexp(mf, 1 - b - m) : std::ldexp((1 << m) + mf, ef - b - m));
    }
  }
  int sign_bit() const { return has_sign ? 1 << (exp_bits + man_bits) : 0; }
  int max_code() const { return static_cast<int>(mags.size()) - 1; }
  double max() const { return mags.back(); }
};

const RefFormat kRefE4M3(4, 3, 7, true, false, 0x7F);
const RefFormat kRefE5M2(5, 2, 15, true, true, 0x7F);
const RefFormat kRefE2M1(2, 1, 1, true, false, -1);
const RefFormat kRefE2M3(2, 3, 1, true, false, -1);
const RefFormat kRefE3M2(3, 2, 3, true, false, -1);
const RefFormat kRefUE4M3(4, 3, 7, false, false, 0x7F);

// Nearest representable value by a linear scan (ties to the even code), saturating. Differences
// are exact in double wherever two candidates are close to equidistant, so ties are exact ties.
uint8_t ref_encode(const RefFormat& f, float x) {
  const bool neg = std::signbit(x);
  if (std::isnan(x)) {
    return f.nan_code < 0 ? f.max_code() : (f.nan_code | (neg ? f.sign_bit() : 0));
  }
  if (neg && !f.has_sign) return 0;
  const int sign = neg ? f.sign_bit() : 0;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= f.max()) return f.max_code() | sign;
  int best = 0;
  double best_d = a;
  for (int i = 1; i <= f.max_code(); ++i) {
    const double d = std::fabs(a - f.mags[i]);
    if (d < best_d || (d == best_d && i % 2 == 0)) { best = i; best_d = d; }
  }
  return static_cast<uint8_t>(best | sign);
}

// E8M0 from frexp: RZ = floor(log2|x|), RU = ceil(log2|x|), clamped to codes [0, 254].
uint8_t ref_e8m0(float x, bool up) {
  if (std::isnan(x)) return 0xFF;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return 0xFE;
  if (a == 0) return 0;
  int k;
  const double f = std::frexp(a, &k);  // a = f * 2^k, f in [0.5, 1)
  const int e = (f == 0.5 || !up) ? k - 1 : k;
  return static_cast<uint8_t>(std::clamp(e + 127, 0, 254));
}

double ref_decode(const RefFormat& f, uint32_t code) {  // finite, non-NaN codes only
  const int s = f.sign_bit();
  const double v = f.mags.at(code & ~static_cast<uint32_t>(s));
  return (s && (code & s)) ? -v : v;
}

// fp16 -> double from the IEEE binary16 definition.
double ref_fp16(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double v = e == 0x1F ? (m ? NAN : INFINITY)
                 : e == 0    ? std::ldexp(m, -24)
                             : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

bool is_e4m3_nan(uint8_t c) { return (c & 0x7F) == 0x7F; }
bool is_e5m2_nan(uint8_t c) { return (c & 0x7F) > 0x7C; }

#if BLOCKSCALE_CUDA_ORACLE
uint8_t cuda_e4m3(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
uint8_t cuda_e5m2(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2); }
uint8_t cuda_e2m1(float x) { return __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest); }
uint8_t cuda_e2m3(float x) { return __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest); }
uint8_t cuda_e3m2(float x) { return __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest); }
uint8_t cuda_e8m0_rz(float x) { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundZero); }
uint8_t cuda_e8m0_ru(float x) { return __nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf); }
float cuda_half_to_float(__half_raw h) { return __half2float(__half(h)); }
#else
constexpr uint8_t (*cuda_e4m3)(float) = nullptr, (*cuda_e5m2)(float) = nullptr,
    (*cuda_e2m1)(float) = nullptr, (*cuda_e2m3)(float) = nullptr, (*cuda_e3m2)(float) = nullptr,
    (*cuda_e8m0_rz)(float) = nullptr, (*cuda_e8m0_ru)(float) = nullptr;
#endif

// ---- One encoder under test with its oracles.
struct Encoder {
  const char* name;
  uint8_t (*ours)(float);
  uint8_t (*ref)(float);        // exact contract, NaN sign included
  uint8_t (*cuda)(float);       // nullptr: CUDA has no such conversion
  bool (*nan_class)(uint8_t);   // CUDA NaN compared as a class; nullptr: exact
  const RefFormat* fmt;         // for rounding boundaries; nullptr: E8M0
};

const Encoder kEncoders[] = {
    {"E4M3", bf::encode_e4m3, [](float x) { return ref_encode(kRefE4M3, x); }, cuda_e4m3, is_e4m3_nan, &kRefE4M3},
    {"E5M2", bf::encode_e5m2, [](float x) { return ref_encode(kRefE5M2, x); }, cuda_e5m2, is_e5m2_nan, &kRefE5M2},
    {"E2M1", bf::encode_e2m1, [](float x) { return ref_encode(kRefE2M1, x); }, cuda_e2m1, nullptr, &kRefE2M1},
    {"E2M3", bf::encode_e2m3, [](float x) { return ref_encode(kRefE2M3, x); }, cuda_e2m3, nullptr, &kRefE2M3},
    {"E3M2", bf::encode_e3m2, [](float x) { return ref_encode(kRefE3M2, x); }, cuda_e3m2, nullptr, &kRefE3M2},
    {"UE4M3", bf::encode_ue4m3, [](float x) { return ref_encode(kRefUE4M3, x); }, nullptr, nullptr, &kRefUE4M3},
    {"E8M0_RZ", [](float x) { return bf::encode_e8m0(x, false); }, [](float x) { return ref_e8m0(x, false); }, cuda_e8m0_rz, nullptr, nullptr},
    {"E8M0_RU", [](float x) { return bf::encode_e8m0(x, true); }, [](float x) { return ref_e8m0(x, true); }, cuda_e8m0_ru, nullptr, nullptr},
};

// Counts disagreements and keeps the first few for the failure message.
struct Mismatches {
  uint64_t count = 0, compared = 0;
  std::string first;
  void add(float x, int ours, int expected, const char* oracle) {
    if (count++ < 8) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "\n  x = %a (0x%08x): ours 0x%02x, %s 0x%02x", x, bits_of(x),
                    ours, oracle, expected);
      first += buf;
    }
  }
};

void check(const Encoder& e, const std::vector<float>& xs, Mismatches& m) {
  for (float x : xs) {
    const uint8_t ours = e.ours(x);
    const uint8_t r = e.ref(x);
    if (r != ours) m.add(x, ours, r, "reference");
    if (e.cuda) {
      const uint8_t c = e.cuda(x);
      const bool ok = (std::isnan(x) && e.nan_class) ? e.nan_class(ours) && e.nan_class(c) : c == ours;
      if (!ok) m.add(x, ours, c, "CUDA");
    }
    ++m.compared;
  }
}

// ---- Input sets.
std::vector<float> every_bf16() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000; ++h) v.push_back(float_of(h << 16));
  return v;
}

std::vector<float> every_fp16() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const double d = ref_fp16(static_cast<uint16_t>(h));
    v.push_back(std::isnan(d) ? float_of(((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13))
                              : static_cast<float>(d));
  }
  return v;
}

// Points where the result changes: midpoints of neighbouring values, max + half an ulp, half of
// the smallest subnormal (minifloats); powers of two and 1.5 * 2^k (E8M0).
std::vector<double> boundary_points(const Encoder& e) {
  std::vector<double> p;
  if (e.fmt) {
    const auto& v = e.fmt->mags;
    for (size_t i = 0; i + 1 < v.size(); ++i) p.insert(p.end(), {v[i], (v[i] + v[i + 1]) / 2});
    p.push_back(v.back());
    p.push_back(v.back() + (v.back() - v[v.size() - 2]) / 2);
    p.push_back(v[1] / 2);
  } else {
    for (int k = -149; k <= 127; ++k) p.push_back(std::ldexp(1.0, k));
    for (int k = -148; k <= 127; ++k) p.push_back(std::ldexp(1.5, k));
    p.push_back(FLT_MAX);
  }
  return p;
}

// Every fp32 pattern within +-4 ulps of each point, both signs.
std::vector<float> near_boundaries(const Encoder& e) {
  std::vector<float> v;
  for (double p : boundary_points(e)) {
    const float f = static_cast<float>(p);
    EXPECT_EQ(static_cast<double>(f), p) << "boundary not exact in fp32";
    for (int k = -4; k <= 4; ++k) {
      const int64_t b = static_cast<int64_t>(bits_of(f)) + k;
      if (b < 0 || b > 0x7F800000) continue;
      v.push_back(float_of(static_cast<uint32_t>(b)));
      v.push_back(-float_of(static_cast<uint32_t>(b)));
    }
  }
  return v;
}

// Uniform 32-bit patterns (every exponent, NaNs included) plus patterns whose exponent lies
// where the minifloats live, so rounding inside each format is exercised millions of times.
std::vector<float> random_fp32(uint64_t seed, size_t n_raw, size_t n_in_range) {
  std::mt19937_64 rng(seed);
  std::vector<float> v;
  for (size_t i = 0; i < n_raw; ++i) v.push_back(float_of(static_cast<uint32_t>(rng())));
  std::uniform_int_distribution<uint32_t> exp_field(127 - 24, 127 + 17);
  for (size_t i = 0; i < n_in_range; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    v.push_back(float_of((r & 0x807FFFFFu) | (exp_field(rng) << 23)));
  }
  return v;
}

// ---- Encoders: ours vs the reference and CUDA on each input set.
void PrintTo(const Encoder& e, std::ostream* os) { *os << e.name; }

class Encode : public ::testing::TestWithParam<Encoder> {};

TEST_P(Encode, EveryBf16Pattern) {
  Mismatches m;
  check(GetParam(), every_bf16(), m);
  EXPECT_EQ(m.count, 0u) << m.first;
}

TEST_P(Encode, EveryFp16Pattern) {
  Mismatches m;
  check(GetParam(), every_fp16(), m);
  EXPECT_EQ(m.count, 0u) << m.first;
}

TEST_P(Encode, Fp32NearRoundingBoundaries) {
  Mismatches m;
  const auto xs = near_boundaries(GetParam());
  check(GetParam(), xs, m);
  EXPECT_GE(m.compared, 250u);  // E2M1 has the fewest boundaries
  EXPECT_EQ(m.count, 0u) << m.first;
}

TEST_P(Encode, RandomFp32Patterns) {
  Mismatches m;
  check(GetParam(), random_fp32(0x5EEDC0DEC5ull, 3000000, 2000000), m);
  EXPECT_EQ(m.count, 0u) << m.first;
}

INSTANTIATE_TEST_SUITE_P(Codecs, Encode, ::testing::ValuesIn(kEncoders),
                         [](const auto& info) { return std::string(info.param.name); });

// The references themselves agree with the numbers in docs/numerics.md.
TEST(ReferenceFormats, MatchTheDocumentedRanges) {
  struct Row { const RefFormat* f; double max, min_normal, min_sub; int max_code; };
  const Row rows[] = {{&kRefE4M3, 448, 0x1p-6, 0x1p-9, 0x7E},  {&kRefE5M2, 57344, 0x1p-14, 0x1p-16, 0x7B},
                      {&kRefE2M1, 6, 1, 0.5, 0x7},             {&kRefE2M3, 7.5, 1, 0.125, 0x1F},
                      {&kRefE3M2, 28, 0.25, 0.0625, 0x1F},     {&kRefUE4M3, 448, 0x1p-6, 0x1p-9, 0x7E}};
  for (const Row& r : rows) {
    EXPECT_EQ(r.f->max(), r.max);
    EXPECT_EQ(r.f->max_code(), r.max_code);
    EXPECT_EQ(r.f->mags[1], r.min_sub);
    EXPECT_EQ(r.f->mags[size_t{1} << r.f->man_bits], r.min_normal);
  }
}

// ---- Specials, written out.
TEST(EncodeSpecials, NanCodes) {
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu}) {
    const float p = float_of(nan), n = float_of(nan | 0x80000000u);
    EXPECT_EQ(bf::encode_e4m3(p), 0x7F);
    EXPECT_EQ(bf::encode_e4m3(n), 0xFF);  // sign kept (CUDA's host path drops it)
    EXPECT_EQ(bf::encode_e5m2(p), 0x7F);
    EXPECT_EQ(bf::encode_e5m2(n), 0xFF);
    EXPECT_EQ(bf::encode_ue4m3(p), 0x7F);
    EXPECT_EQ(bf::encode_ue4m3(n), 0x7F);
    for (float x : {p, n}) {  // no NaN in these formats: +max, as cuda_fp4.h
      EXPECT_EQ(bf::encode_e2m1(x), 0x7);
      EXPECT_EQ(bf::encode_e2m3(x), 0x1F);
      EXPECT_EQ(bf::encode_e3m2(x), 0x1F);
      EXPECT_EQ(bf::encode_e8m0(x, false), 0xFF);
      EXPECT_EQ(bf::encode_e8m0(x, true), 0xFF);
    }
  }
}

TEST(EncodeSpecials, InfinitySaturatesToMax) {
  EXPECT_EQ(bf::encode_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(bf::encode_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(bf::encode_e5m2(INFINITY), 0x7B);  // not the Inf code 0x7C
  EXPECT_EQ(bf::encode_e5m2(-INFINITY), 0xFB);
  EXPECT_EQ(bf::encode_e2m1(-INFINITY), 0xF);
  EXPECT_EQ(bf::encode_e2m3(-INFINITY), 0x3F);
  EXPECT_EQ(bf::encode_e3m2(INFINITY), 0x1F);
  EXPECT_EQ(bf::encode_ue4m3(INFINITY), 0x7E);
  EXPECT_EQ(bf::encode_ue4m3(-INFINITY), 0x00);
  EXPECT_EQ(bf::encode_e8m0(INFINITY, false), 0xFE);
  EXPECT_EQ(bf::encode_e8m0(-INFINITY, true), 0xFE);
  EXPECT_EQ(bf::encode_e4m3(FLT_MAX), 0x7E);
  EXPECT_EQ(bf::encode_e5m2(-FLT_MAX), 0xFB);
}

TEST(EncodeSpecials, SignOfZeroKept) {
  EXPECT_EQ(bf::encode_e4m3(0.0f), 0x00);
  EXPECT_EQ(bf::encode_e4m3(-0.0f), 0x80);
  EXPECT_EQ(bf::encode_e5m2(-0.0f), 0x80);
  EXPECT_EQ(bf::encode_e2m1(-0.0f), 0x8);
  EXPECT_EQ(bf::encode_e2m3(-0.0f), 0x20);
  EXPECT_EQ(bf::encode_e3m2(-0.0f), 0x20);
  EXPECT_EQ(bf::encode_ue4m3(-0.0f), 0x00);  // unsigned
  EXPECT_EQ(bf::encode_ue4m3(-1.0f), 0x00);
  EXPECT_EQ(bf::encode_e4m3(-0x1p-11f), 0x80);  // underflow keeps the sign
  EXPECT_EQ(bf::encode_e2m1(-0.25f), 0x8);      // tie at half the smallest subnormal -> even (0)
  EXPECT_EQ(bf::encode_e8m0(0.0f, true), 0x00);
}

// ---- Decoders.
struct Decoder {
  const char* name;
  float (*ours)(uint32_t);
  const RefFormat* fmt;
  uint32_t n_codes;
};

const Decoder kDecoders[] = {
    {"E4M3", bf::decode_e4m3, &kRefE4M3, 256}, {"E5M2", bf::decode_e5m2, &kRefE5M2, 256},
    {"E2M1", bf::decode_e2m1, &kRefE2M1, 16},  {"E2M3", bf::decode_e2m3, &kRefE2M3, 64},
    {"E3M2", bf::decode_e3m2, &kRefE3M2, 64},  {"UE4M3", bf::decode_ue4m3, &kRefUE4M3, 128},
};

void PrintTo(const Decoder& d, std::ostream* os) { *os << d.name; }

class Decode : public ::testing::TestWithParam<Decoder> {};

TEST_P(Decode, EveryCodeMatchesTheReference) {
  const Decoder& d = GetParam();
  const RefFormat& f = *d.fmt;
  for (uint32_t c = 0; c < d.n_codes; ++c) {
    const uint32_t mag = c & ~static_cast<uint32_t>(f.sign_bit());
    const bool neg = f.has_sign && (c & f.sign_bit());
    const float got = d.ours(c);
    if (mag > static_cast<uint32_t>(f.max_code())) {  // beyond max: Inf or NaN
      const bool inf = f.ieee_specials && (mag & ((1u << f.man_bits) - 1)) == 0;
      EXPECT_TRUE(inf ? std::isinf(got) : std::isnan(got)) << d.name << " code " << c << " -> " << got;
      EXPECT_EQ(std::signbit(got), neg) << d.name << " code " << c;
    } else {
      EXPECT_EQ(bits_of(got), bits_of(static_cast<float>(ref_decode(f, c))))
          << d.name << " code 0x" << std::hex << c << " -> " << got;
    }
  }
}

TEST_P(Decode, EncodeOfDecodeIsTheCode) {
  const Decoder& d = GetParam();
  const Encoder* e = nullptr;
  for (const Encoder& x : kEncoders) if (x.fmt == d.fmt) e = &x;
  ASSERT_NE(e, nullptr);
  for (uint32_t c = 0; c < d.n_codes; ++c) {
    const float v = d.ours(c);
    if (std::isnan(v) || std::isinf(v)) continue;
    EXPECT_EQ(e->ours(v), c) << d.name << " round trip of " << v;
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, Decode, ::testing::ValuesIn(kDecoders),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DecodeTable, HandWrittenValues) {
  EXPECT_EQ(bf::decode_e4m3(0x7E), 448.0f);
  EXPECT_EQ(bf::decode_e4m3(0x08), 0x1p-6f);
  EXPECT_EQ(bf::decode_e4m3(0x01), 0x1p-9f);
  EXPECT_EQ(bf::decode_e4m3(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(bf::decode_e4m3(0x7F)));
  EXPECT_TRUE(std::isnan(bf::decode_e4m3(0xFF)));
  EXPECT_EQ(bits_of(bf::decode_e4m3(0x80)), 0x80000000u);
  EXPECT_EQ(bf::decode_e5m2(0x7B), 57344.0f);
  EXPECT_EQ(bf::decode_e5m2(0x7C), INFINITY);
  EXPECT_EQ(bf::decode_e5m2(0xFC), -INFINITY);
  EXPECT_EQ(bf::decode_e5m2(0x01), 0x1p-16f);
  EXPECT_TRUE(std::isnan(bf::decode_e5m2(0x7D)));
  EXPECT_EQ(bf::decode_e2m1(0x7), 6.0f);
  EXPECT_EQ(bf::decode_e2m1(0x1), 0.5f);
  EXPECT_EQ(bf::decode_e2m1(0xF), -6.0f);
  EXPECT_EQ(bf::decode_e2m3(0x1F), 7.5f);
  EXPECT_EQ(bf::decode_e2m3(0x01), 0.125f);
  EXPECT_EQ(bf::decode_e3m2(0x1F), 28.0f);
  EXPECT_EQ(bf::decode_e3m2(0x3F), -28.0f);
  EXPECT_EQ(bf::decode_ue4m3(0x7E), 448.0f);
  EXPECT_EQ(bf::decode_e8m0(0x00), 0x1p-127f);
  EXPECT_EQ(bf::decode_e8m0(0x7F), 1.0f);
  EXPECT_EQ(bf::decode_e8m0(0xFE), 0x1p127f);
  EXPECT_TRUE(std::isnan(bf::decode_e8m0(0xFF)));
}

TEST(DecodeE8M0, EveryCodeRoundTripsBothRoundings) {
  for (uint32_t c = 0; c < 0xFF; ++c) {
    const float v = bf::decode_e8m0(c);
    EXPECT_EQ(static_cast<double>(v), std::ldexp(1.0, static_cast<int>(c) - 127));
    EXPECT_EQ(bf::encode_e8m0(v, false), c);
    EXPECT_EQ(bf::encode_e8m0(v, true), c);
  }
}

#if BLOCKSCALE_CUDA_ORACLE
// Our decode vs CUDA's, every code (CUDA's NaN payloads differ: NaN compared as NaN + sign).
void expect_same_value(float ours, float cuda, const char* fmt, uint32_t c) {
  if (std::isnan(cuda)) {
    EXPECT_TRUE(std::isnan(ours)) << fmt << " code 0x" << std::hex << c;
  } else {
    EXPECT_EQ(bits_of(ours), bits_of(cuda)) << fmt << " code 0x" << std::hex << c;
  }
}

TEST(DecodeVsCuda, EveryCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const auto s = static_cast<__nv_fp8_storage_t>(c);
    expect_same_value(bf::decode_e4m3(c), cuda_half_to_float(__nv_cvt_fp8_to_halfraw(s, __NV_E4M3)), "E4M3", c);
    expect_same_value(bf::decode_e5m2(c), cuda_half_to_float(__nv_cvt_fp8_to_halfraw(s, __NV_E5M2)), "E5M2", c);
    expect_same_value(bf::decode_e8m0(c), float_of(uint32_t{__nv_cvt_e8m0_to_bf16raw(s).x} << 16), "E8M0", c);
    if (c < 0x80) {
      expect_same_value(bf::decode_ue4m3(c), cuda_half_to_float(__nv_cvt_fp8_to_halfraw(s, __NV_E4M3)), "UE4M3", c);
    }
    if (c < 16) {
      expect_same_value(bf::decode_e2m1(c), cuda_half_to_float(__nv_cvt_fp4_to_halfraw(s, __NV_E2M1)), "E2M1", c);
    }
    if (c < 64) {
      expect_same_value(bf::decode_e2m3(c), cuda_half_to_float(__nv_cvt_fp6_to_halfraw(s, __NV_E2M3)), "E2M3", c);
      expect_same_value(bf::decode_e3m2(c), cuda_half_to_float(__nv_cvt_fp6_to_halfraw(s, __NV_E3M2)), "E3M2", c);
    }
  }
}
#endif

// ---- bf16 / fp16 helpers.
TEST(InputFormats, EveryFp16PatternDecodesExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float got = bf::fp16_bits_to_float(static_cast<uint16_t>(h));
    const double want = ref_fp16(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
      EXPECT_EQ(bits_of(got) >> 31, h >> 15) << std::hex << h;
    } else {
      EXPECT_EQ(bits_of(got), bits_of(static_cast<float>(want))) << std::hex << h;
    }
  }
}

TEST(InputFormats, EveryBf16PatternDecodesExactly) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    EXPECT_EQ(bits_of(bf::bf16_bits_to_float(static_cast<uint16_t>(h))), h << 16) << std::hex << h;
  }
}

// fp32 -> bf16 RNE against the nearest of the two bf16 neighbours, in double.
TEST(InputFormats, FloatToBf16RoundsToNearestEven) {
  std::vector<float> xs = random_fp32(7, 1000000, 0);
  for (uint32_t hi : {0x0000u, 0x3F80u, 0x7F7Fu, 0x0080u, 0x3FFFu}) {  // ties and neighbours
    for (uint32_t lo : {0x7FFFu, 0x8000u, 0x8001u, 0x0001u, 0xFFFFu}) {
      xs.push_back(float_of((hi << 16) | lo));
      xs.push_back(-float_of((hi << 16) | lo));
    }
  }
  uint64_t bad = 0;
  for (float x : xs) {
    const uint16_t got = bf::float_to_bf16_bits_rn(x);
    if (std::isinf(x)) {
      bad += got != (bits_of(x) >> 16);
      continue;
    }
    if (std::isnan(x)) {
      bad += !(std::isnan(float_of(uint32_t{got} << 16)) && (got >> 15) == (bits_of(x) >> 31));
      continue;
    }
    const uint32_t down = bits_of(x) >> 16;  // truncation, toward zero
    const double a = float_of(down << 16), b = float_of((down + 1) << 16);  // b may be Inf
    const double dx = x, da = std::fabs(dx - a), db = std::isinf(b) ? INFINITY : std::fabs(b - dx);
    uint32_t want = (da < db || (da == db && (down & 1) == 0)) ? down : down + 1;
    // RNE overflows to Inf past FLT_MAX + half an ulp of bf16's max.
    if (std::isinf(b) && std::fabs(dx) >= std::ldexp(255.5, 120)) want = down + 1;
#if BLOCKSCALE_CUDA_ORACLE
    EXPECT_EQ(__nv_bfloat16_raw(__float2bfloat16_rn(x)).x, want) << "oracle disagrees, x = " << x;
#endif
    bad += got != want;
    if (got != want && bad < 5) ADD_FAILURE() << "x = " << std::hexfloat << x << ": " << got << " vs " << want;
  }
  EXPECT_EQ(bad, 0u);
}

// ---- MX scale exponent, against floor(log2) from frexp and the definition of ceil.
int ref_mx_exponent(float amax, float maxnorm, bool ceil_rounding) {
  if (amax == 0) return -127;
  int ea, em;
  std::frexp(static_cast<double>(amax), &ea);
  std::frexp(static_cast<double>(maxnorm), &em);
  int e = (ea - 1) - (em - 1);  // floor(log2 amax) - emax
  if (ceil_rounding) {
    e -= 1;  // amax > maxnorm * 2^e here; step up to the smallest e that fits
    while (static_cast<double>(amax) > std::ldexp(static_cast<double>(maxnorm), e)) ++e;
  }
  return std::clamp(e, -127, 127);
}

const float kMaxNorms[] = {448.0f, 57344.0f, 6.0f, 7.5f, 28.0f};

void check_mx(float amax, float maxnorm, uint64_t& bad) {
  for (bool ceil_rounding : {false, true}) {
    const int got = bf::mx_scale_exponent(amax, maxnorm, ceil_rounding);
    const int want = ref_mx_exponent(amax, maxnorm, ceil_rounding);
    if (got != want && bad++ < 5) {
      ADD_FAILURE() << "amax " << std::hexfloat << amax << " maxnorm " << maxnorm
                    << (ceil_rounding ? " ceil: " : " floor: ") << got << " vs " << want;
    }
    if (ceil_rounding && amax > 0) {  // the defining property, checked directly
      const bool fits = got == 127 || amax <= std::ldexp(double{maxnorm}, got);
      const bool smallest = got == -127 || amax > std::ldexp(double{maxnorm}, got - 1);
      if (!(fits && smallest) && bad++ < 5) {
        ADD_FAILURE() << "amax " << std::hexfloat << amax << " maxnorm " << maxnorm << ": ceil e = "
                      << got << (fits ? " is not the smallest" : " lets amax exceed maxnorm * 2^e");
      }
    }
  }
}

TEST(MxScaleExponent, GoldenE4M3) {
  EXPECT_EQ(bf::mx_scale_exponent(960.0f, 448.0f, false), 1);  // scale 2: 480 saturates to 448
  EXPECT_EQ(bf::mx_scale_exponent(960.0f, 448.0f, true), 2);   // scale 4: 240, nothing saturates
  EXPECT_EQ(bf::mx_scale_exponent(448.0f, 448.0f, true), 0);
  EXPECT_EQ(bf::mx_scale_exponent(448.0f, 448.0f, false), 0);
  EXPECT_EQ(bf::mx_scale_exponent(449.0f, 448.0f, true), 1);
  EXPECT_EQ(bf::mx_scale_exponent(0.0f, 448.0f, true), -127);
  EXPECT_EQ(bf::mx_scale_exponent(0.0f, 448.0f, false), -127);
}

TEST(MxScaleExponent, ClampsToE8M0Range) {
  EXPECT_EQ(bf::mx_scale_exponent(0x1p-149f, 448.0f, true), -127);
  EXPECT_EQ(bf::mx_scale_exponent(0x1p-149f, 448.0f, false), -127);
  EXPECT_EQ(bf::mx_scale_exponent(FLT_MAX, 6.0f, false), 125);
  EXPECT_EQ(bf::mx_scale_exponent(FLT_MAX, 6.0f, true), 126);
  EXPECT_EQ(bf::mx_scale_exponent(FLT_MAX, 0.75f, true), 127);  // 129 clamped
  EXPECT_EQ(bf::mx_scale_exponent(FLT_MAX, 0.75f, false), 127);  // 128 clamped
}

TEST(MxScaleExponent, EveryPositiveBf16Amax) {
  uint64_t bad = 0;
  for (uint32_t h = 0; h < 0x7F80; ++h) {
    for (float mn : kMaxNorms) check_mx(float_of(h << 16), mn, bad);
  }
  EXPECT_EQ(bad, 0u);
}

TEST(MxScaleExponent, RandomFp32Amax) {
  uint64_t bad = 0;
  for (float x : random_fp32(11, 1000000, 500000)) {
    if (!std::isfinite(x)) continue;
    for (float mn : kMaxNorms) check_mx(std::fabs(x), mn, bad);
  }
  EXPECT_EQ(bad, 0u);
}

// fp32 subnormal amax: with an element maxnorm the result clamps to -127, so a tiny maxnorm
// makes the subnormal path visible.
TEST(MxScaleExponent, EveryFp32SubnormalAmax) {
  uint64_t bad = 0;
  for (uint32_t u = 1; u < 0x00800000u; ++u) {
    check_mx(float_of(u), 0x1.8p-100f, bad);
    check_mx(float_of(u), 0x1.Ep-110f, bad);
  }
  check_mx(float_of(0x00800000u), 0x1.8p-100f, bad);
  EXPECT_EQ(bad, 0u);
}

}  // namespace
