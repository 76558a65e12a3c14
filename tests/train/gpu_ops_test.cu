// Tests of train/gpu_ops.h against train/cpu_ops.h (being written).
#include <gtest/gtest.h>

#include "train/gpu_ops.h"

TEST(GpuOps, Placeholder) {}
