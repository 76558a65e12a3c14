# Tests of formats/scalar_codecs.h against independent oracles:
#   CUDA's host conversions (cuda_fp8.h, cuda_fp4.h, cuda_fp6.h; plain C++, no GPU needed),
#   ml_dtypes (Python), and references written in the tests from the format definitions.

# The CUDA headers are oracles even when the CUDA parts are OFF: g++ compiles their host paths.
if(CUDAToolkit_FOUND)
  set(BLOCKSCALE_CUDA_ORACLE 1)
else()
  set(BLOCKSCALE_CUDA_ORACLE 0)
  message(STATUS "blockscale: CUDA toolkit not found: scalar codec tests build without the "
                 "cuda_fp8.h/cuda_fp4.h/cuda_fp6.h oracle cases (independent references only)")
endif()

function(blockscale_codec_oracle target)
  target_compile_definitions(${target} PRIVATE BLOCKSCALE_CUDA_ORACLE=${BLOCKSCALE_CUDA_ORACLE})
  if(BLOCKSCALE_CUDA_ORACLE)
    target_include_directories(${target} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
endfunction()

# Default suite (fast): bf16/fp16 patterns, rounding boundaries, random fp32, decode tables.
blockscale_add_test(scalar_codecs_test SOURCES scalar_codecs_test.cpp)
blockscale_codec_oracle(scalar_codecs_test)

# Opt-in: every fp32 pattern through every encoder (ctest -L exhaustive; a few minutes on 2 cores).
find_package(Threads REQUIRED)
blockscale_add_test(scalar_codecs_exhaustive_test SOURCES scalar_codecs_exhaustive_test.cpp
                    LIBS Threads::Threads LABELS exhaustive)
blockscale_codec_oracle(scalar_codecs_exhaustive_test)

# Device vs host, byte for byte, on every bf16/fp16 pattern and every code. Skips without a GPU.
if(BLOCKSCALE_HAVE_CUDA)
  blockscale_add_test(scalar_codecs_device_test SOURCES scalar_codecs_device_test.cu
                      LIBS blockscale_runtime)
  blockscale_cuda_archs(scalar_codecs_device_test)
endif()

# ml_dtypes oracle: codec_dump writes our codes, the Python script compares them with ml_dtypes.
add_executable(codec_dump codec_dump.cpp)
target_include_directories(codec_dump PRIVATE ${PROJECT_SOURCE_DIR})  # header-only codecs
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME ml_dtypes_oracle
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/ml_dtypes_oracle_test.py
                   --codec-dump $<TARGET_FILE:codec_dump>)
else()
  # Fail rather than vanish: a missing oracle must be visible in the test report.
  message(WARNING "blockscale: no Python 3 interpreter: the ml_dtypes_oracle test will fail "
                  "(run ./tools/setup.sh)")
  add_test(NAME ml_dtypes_oracle COMMAND ${CMAKE_COMMAND} -E false)
endif()
set_tests_properties(ml_dtypes_oracle PROPERTIES TIMEOUT 300)
