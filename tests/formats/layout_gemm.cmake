# Scale layouts (swizzled 128x4, cuBLASLt VEC128_32F / BLK128x128_32F) and the fp64 reference GEMMs.
blockscale_add_test(formats_scale_layout_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/scale_layout_test.cpp)
blockscale_add_test(formats_reference_gemm_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/reference_gemm_test.cpp)
# MoE routing, gather and un-permute + combine (formats/moe.h).
blockscale_add_test(formats_moe_test
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/moe_test.cpp)
