// The cost of add_quantized_tensor per entry does not grow with the entries already added, so a
// file of n entries (`blockscale quantize` of a model: thousands of tensors) costs O(n), not
// O(n^2). Counted, not timed, so a busy machine cannot make it flaky: this binary replaces the
// global operator new to count allocations and allocated bytes. Copying the metadata map per
// entry multiplies the count by the entries already added; reserving the tensors' exact size per
// entry (a reallocation every time) multiplies the bytes. Its own binary because of the
// replacement.
#include "formats/io/quantized_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <vector>

namespace {

std::atomic<size_t> g_allocations{0};
std::atomic<size_t> g_bytes{0};

}  // namespace

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace blockscale::io {
namespace {

namespace f = blockscale::formats;

struct Work {
  size_t allocations = 0;
  size_t bytes = 0;
};

// Adds entries [begin, end) and returns what the adds allocated.
Work add_range(const std::vector<QuantizedTensor>& entries, size_t begin, size_t end,
               std::vector<std::pair<std::string, TensorView>>* tensors,
               std::map<std::string, std::string>* metadata) {
  const size_t a0 = g_allocations.load(), b0 = g_bytes.load();
  for (size_t i = begin; i < end; ++i) {
    const Status s = add_quantized_tensor(entries[i], tensors, metadata);
    if (!s) ADD_FAILURE() << s.message();
  }
  return Work{g_allocations.load() - a0, g_bytes.load() - b0};
}

TEST(QuantizedFileCost, AnEntryCostsTheSameInALargeFileAsInASmallOne) {
  constexpr size_t kSmall = 2'000, kLarge = 20'000, kWindow = 1'000;
  f::QuantizeOptions o;
  o.recipe = f::Format::kMxfp8E4M3;
  const std::vector<float> x = {1.5f, -2.0f, 0.25f, 3.0f};
  QuantizedTensor proto;
  proto.shape = {1, 4};
  ASSERT_TRUE(f::quantize(x.data(), 1, 4, 4, o, f::Direction::kRowwise, &proto.q));
  std::vector<QuantizedTensor> entries(kLarge, proto);
  for (size_t i = 0; i < kLarge; ++i) {  // equal lengths: every name allocates alike
    char name[48];
    std::snprintf(name, sizeof name, "model.layers.%05zu.mlp.weight", i);
    entries[i].name = name;
  }

  std::vector<std::pair<std::string, TensorView>> tensors;
  std::map<std::string, std::string> metadata;
  add_range(entries, 0, kSmall - kWindow, &tensors, &metadata);
  const Work small = add_range(entries, kSmall - kWindow, kSmall, &tensors, &metadata);
  add_range(entries, kSmall, kLarge - kWindow, &tensors, &metadata);
  const size_t capacity_before = tensors.capacity();
  const Work large = add_range(entries, kLarge - kWindow, kLarge, &tensors, &metadata);
  ASSERT_EQ(tensors.size(), 2 * kLarge);
  ASSERT_EQ(metadata.size(), 6 * kLarge);

  // The same allocations per entry at 19,000 entries as at 1,000; the tensors' geometric growth
  // adds at most a few reallocations to a window.
  EXPECT_LE(large.allocations, small.allocations + 4)
      << "adding " << kWindow << " entries to a file of " << kLarge - kWindow << " made " << large.allocations
      << " allocations, to a file of " << kSmall - kWindow << " " << small.allocations;
  // Bytes: the same, plus the growth of the tensors vector (one doubling at most in a window).
  const size_t growth = 2 * (tensors.capacity() + capacity_before) * sizeof(tensors[0]);
  EXPECT_LE(large.bytes, small.bytes + growth)
      << "adding " << kWindow << " entries to a file of " << kLarge - kWindow << " allocated " << large.bytes
      << " bytes, to a file of " << kSmall - kWindow << " " << small.bytes;
}

}  // namespace
}  // namespace blockscale::io
