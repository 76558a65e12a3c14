// Which 128x128 B-scale block each column of an output tile reads, for tiles wider than a block.
// A tile of kTileN columns starts at n0 = tile_n * kTileN; its column groups of 8 (the wgmma
// accumulator fragment's unit: columns 8j .. 8j + 7) each fall in one 128-column block, n0 / 128
// or the next one. Host and device share the rule so the CPU test can check it against the
// plain (n0 + column) / 128.
#pragma once

#include <cstdint>

#include "formats/host_device.h"

namespace blockscale::gemm {

// 0 when group j of the tile at n0 reads block n0 / 128, 1 when it reads the next block.
// With j known at compile time this folds to a constant, or to one per-tile flag (n0 % 128 != 0)
// for the groups of columns 64..127, the only ones whose block depends on where the tile starts.
template <int kTileN>
BS_HOST_DEVICE constexpr int32_t b_scale_block_offset(int32_t n0, int j) {
  static_assert(kTileN % 64 == 0 && kTileN <= 192, "tile starts are multiples of 64 and span <= 2 blocks");
  // n0 % 128 is 0 or 64, so columns [0, 64) are always in the first block, [128, 192) in the second.
  return 8 * j < 64 ? 0 : 8 * j >= 128 ? 1 : (n0 % 128 == 0 ? 0 : 1);
}

}  // namespace blockscale::gemm
