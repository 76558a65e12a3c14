// The persistent tile order shared by every GEMM kernel: CTAs walk output tiles in a grid-stride
// loop (tile = blockIdx.x, += gridDim.x), and tile indices map to (tile_m, tile_n) in groups of
// `group_m` tile rows, column by column inside a group. The CTAs resident at one time then cover a
// few tile rows x many tile columns (a band of A and B both re-read from L2) instead of one full
// row of tiles (all of B streamed per row of A). Host and device code use the same function, so
// tests can check the mapping is a permutation on the CPU.
#pragma once

#include <cstdint>

#include "formats/host_device.h"

namespace blockscale::gemm {

struct TileOrder {
  int32_t tiles_m = 0;
  int32_t tiles_n = 0;
  int32_t group_m = 8;  // tile rows per group (the last group may hold fewer)

  BS_HOST_DEVICE int32_t num_tiles() const { return tiles_m * tiles_n; }

  // tile in [0, num_tiles()) -> its tile row and column.
  BS_HOST_DEVICE void coords(int32_t tile, int32_t* tile_m, int32_t* tile_n) const {
    const int32_t per_group = group_m * tiles_n;
    const int32_t group = tile / per_group;
    const int32_t first_m = group * group_m;
    const int32_t rows_here = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
    const int32_t local = tile - group * per_group;
    *tile_m = first_m + local % rows_here;
    *tile_n = local / rows_here;
  }
};

}  // namespace blockscale::gemm
