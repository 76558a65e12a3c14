// Inputs and expert splits shared by the grouped (MoE) quantize tests (tests/quant/*_grouped_*).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/quant/gpu_test_util.h"

namespace blockscale_test {

using blockscale::formats::DType;

// ---- Inputs ----------------------------------------------------------------------------------

// Per 16x32 region one kind of data: normal values at a random magnitude, heavy tails, all zero
// (both signs), sprinkled NaN / Inf / -0 / subnormal / largest finite, ties of E2M1 and FP8.
// With `finite`, nothing non-finite.
inline HostInput make_input(int64_t rows, int64_t cols, int64_t ld, DType t, bool finite, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  const bool f16 = t == DType::kF16;
  const blockscale_test::DTypeBits tb = blockscale_test::type_bits(t);
  const uint32_t sign = tb.sign, inf = tb.inf, smax = tb.max_finite;
  const double ties[] = {5.0, 2.5, 3.5, 0.75, 1.25, 1.75, 0.25, 6.0, 7.0, 448.0, 1.0625, 57344.0};
  const int64_t esize = static_cast<int64_t>(blockscale::formats::dtype_size(t));
  HostInput in;
  in.bytes.assign(static_cast<size_t>(rows * ld * esize), 0);
  in.values.assign(static_cast<size_t>(rows * ld), std::nanf(""));
  for (int64_t rr = 0; rr < rows; rr += 16) {
    for (int64_t rc = 0; rc < cols; rc += 32) {
      const int kind = static_cast<int>(uni(rng) * 100);
      const double mag = std::pow(10.0, f16 ? -4.0 + 7.0 * uni(rng) : -25.0 + 50.0 * uni(rng));
      const int k0 = f16 ? static_cast<int>(uni(rng) * 20) - 12 : static_cast<int>(uni(rng) * 160) - 80;
      for (int64_t r = rr; r < std::min(rows, rr + 16); ++r) {
        for (int64_t c = rc; c < std::min(cols, rc + 32); ++c) {
          uint32_t bits;
          if (kind < 45) {
            bits = to_bits(static_cast<float>(normal(rng) * mag), t);
          } else if (kind < 55) {
            const double u = std::max(uni(rng), 1e-3);
            bits = to_bits(static_cast<float>(normal(rng) / (u * u) * mag * 1e-2), t);
          } else if (kind < 63) {
            bits = (rng() & 1) ? sign : 0u;
          } else if (kind < 78) {
            bits = to_bits(static_cast<float>(normal(rng) * mag), t);
            const uint64_t z = rng() % 48;
            if (z == 0) bits = inf | 1u;
            if (z == 1) bits = inf;
            if (z == 2) bits = inf | sign;
            if (z == 3) bits = sign;
            if (z == 4) bits = 1u | ((rng() & 1) ? sign : 0u);
            if (z == 5) bits = smax;
          } else {
            const double base = ties[rng() % (sizeof(ties) / sizeof(ties[0]))];
            bits = to_bits(static_cast<float>(std::ldexp(base, k0 + static_cast<int>(rng() % 4))), t);
            if (rng() & 1) bits ^= sign;
          }
          if (finite && !std::isfinite(from_bits(bits, t))) bits = smax | (bits & sign);
          const size_t i = static_cast<size_t>(r * ld + c);
          std::memcpy(&in.bytes[i * esize], &bits, static_cast<size_t>(esize));
          in.values[i] = from_bits(bits, t);
        }
      }
    }
  }
  return in;
}

// Token counts of `g` experts summing to `rows`.
enum class Split {
  kUneven,      // random counts, some empty, some of 1 token
  kOneExpert,   // every token in one expert (the middle one); the others empty
  kEmptyEdges,  // the first and last two experts empty, runs of empty ones inside
  kOnes,        // as many experts of one token as fit, the rest in the last
  kAligned,     // counts that are multiples of the block where possible (no padding)
};
inline const char* name(Split s) {
  switch (s) {
    case Split::kUneven: return "uneven";
    case Split::kOneExpert: return "oneexpert";
    case Split::kEmptyEdges: return "emptyedges";
    case Split::kOnes: return "ones";
    case Split::kAligned: return "aligned";
  }
  return "?";
}

// kAligned draws multiples of `block` up to 128.
inline std::vector<int64_t> make_counts(int64_t rows, int g, Split split, uint64_t seed, int64_t block = 32) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> n(static_cast<size_t>(g), 0);
  auto spread = [&](const std::vector<int>& who) {  // random split of rows over `who`
    std::vector<double> w;
    for (size_t i = 0; i < who.size(); ++i) {
      const uint64_t z = rng() % 8;
      w.push_back(z == 0 ? 0.0 : z == 1 ? 0.02 : std::uniform_real_distribution<double>(0.1, 3.0)(rng));
    }
    double total = 0;
    for (double v : w) total += v;
    int64_t left = rows;
    for (size_t i = 0; i + 1 < who.size(); ++i) {
      const int64_t c = total > 0 ? std::min(left, static_cast<int64_t>(rows * w[i] / total)) : 0;
      n[static_cast<size_t>(who[i])] = c;
      left -= c;
    }
    n[static_cast<size_t>(who.back())] += left;
  };
  std::vector<int> all;
  for (int i = 0; i < g; ++i) all.push_back(i);
  switch (split) {
    case Split::kUneven: spread(all); break;
    case Split::kOneExpert: n[static_cast<size_t>(g / 2)] = rows; break;
    case Split::kEmptyEdges: {
      std::vector<int> who;
      for (int i = 2; i < g - 2; ++i)
        if (i % 3 != 0) who.push_back(i);
      if (who.empty()) who.push_back(g / 2);
      spread(who);
      break;
    }
    case Split::kOnes: {
      int64_t left = rows;
      for (int i = 0; i + 1 < g && left > 0; ++i) n[static_cast<size_t>(i)] = 1, --left;
      n.back() += left;
      break;
    }
    case Split::kAligned: {
      int64_t left = rows;
      for (int i = 0; i + 1 < g; ++i) {
        const int64_t c = std::min(left, block * static_cast<int64_t>(rng() % static_cast<uint64_t>(128 / block + 1)));
        n[static_cast<size_t>(i)] = c;
        left -= c;
      }
      n.back() += left;
      break;
    }
  }
  return n;
}

// ---- The MX and FP8 blockwise grouped tests' cases -------------------------------------------

struct GroupedCase {
  int64_t rows, cols, ld;
  int groups;
  Split split;
  DType type;
  bool finite;
  bool misaligned;  // input off 16-byte alignment by one element, code outputs by one byte
};

inline std::string describe(const GroupedCase& c) {
  char s[200];
  std::snprintf(s, sizeof s, "%lldx%lld ld=%lld %d experts %s %s%s%s", static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), static_cast<long long>(c.ld), c.groups, name(c.split),
                blockscale::formats::dtype_name(c.type), c.finite ? " finite" : "", c.misaligned ? " misaligned" : "");
  return s;
}
inline void PrintTo(const GroupedCase& c, std::ostream* os) { *os << describe(c); }

inline std::string case_name(const ::testing::TestParamInfo<GroupedCase>& info) {
  const GroupedCase& c = info.param;
  return std::to_string(info.index) + "_" + std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_ld" +
         std::to_string(c.ld) + "_g" + std::to_string(c.groups) + "_" + name(c.split) + "_" +
         blockscale::formats::dtype_name(c.type) + (c.finite ? "_finite" : "") + (c.misaligned ? "_misaligned" : "");
}

// Small shapes under every split with a few expert counts (the third shape has `third_rows` rows),
// then 64 experts, a row stride above the columns (breaks vector loads), misaligned pointers and
// whole tiles in every input type, the most experts, and large shapes.
inline std::vector<GroupedCase> grouped_cases(int64_t third_rows) {
  std::vector<GroupedCase> v;
  const DType types[] = {DType::kBf16, DType::kF16, DType::kF32};
  const int64_t shapes[][2] = {{1, 1}, {5, 33}, {third_rows, 64}, {129, 127}, {300, 256}, {700, 300}};
  const Split splits[] = {Split::kUneven, Split::kOneExpert, Split::kEmptyEdges, Split::kOnes, Split::kAligned};
  int k = 0;
  for (const auto& s : shapes) {
    for (Split sp : splits) {
      const int g = (s[0] < 4 && sp != Split::kOneExpert) ? 1 : (k % 4 == 0 ? 1 : k % 4 == 1 ? 3 : k % 4 == 2 ? 8 : 17);
      v.push_back({s[0], s[1], s[1], sp == Split::kOnes ? std::max(g, 5) : g, sp, types[k % 3], false, false});
      ++k;
    }
  }
  for (DType t : types) {
    v.push_back({1000, 512, 512, 64, Split::kUneven, t, false, false});
    v.push_back({1000, 512, 512, 64, Split::kEmptyEdges, t, true, false});
    v.push_back({777, 300, 310, 7, Split::kUneven, t, false, false});
    v.push_back({513, 260, 264, 5, Split::kOnes, t, false, true});
    v.push_back({2048, 1024, 1024, 8, Split::kAligned, t, false, false});
  }
  v.push_back({2048, 64, 64, 4096, Split::kUneven, DType::kBf16, false, false});
  // More experts than scan threads (two per thread, the last threads none), and 64 experts over
  // more tiles than two rounds of resident CTAs on an H100 / H200 (one CTA per tile).
  v.push_back({700, 300, 300, 300, Split::kUneven, DType::kBf16, false, false});
  v.push_back({3300, 4096, 4096, 64, Split::kEmptyEdges, DType::kBf16, false, false});
  return v;
}

}  // namespace blockscale_test
