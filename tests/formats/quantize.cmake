# Block quantize / dequantize of every recipe (formats/quantize.h), written from docs/numerics.md.
# All carry the label "quantize": ctest -L quantize.
foreach(t quantize_test mx_quantize_test nvfp4_quantize_test fp8_block_quantize_test
          grouped_quantize_test)
  blockscale_add_test(${t} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/${t}.cpp LABELS quantize)
endforeach()
