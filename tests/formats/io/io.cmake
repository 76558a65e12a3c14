# Tests of formats/io/ (.npy, .safetensors): round trips, malformed input, corpus replay,
# randomized corruption, the numpy / ml_dtypes / safetensors reference check, and (opt-in,
# clang) libFuzzer targets.
set(BLOCKSCALE_IO_TESTS ${CMAKE_CURRENT_SOURCE_DIR}/io)
blockscale_add_test(io_npy_test SOURCES ${BLOCKSCALE_IO_TESTS}/npy_test.cpp LIBS blockscale_io LABELS io)
blockscale_add_test(io_safetensors_test SOURCES ${BLOCKSCALE_IO_TESTS}/safetensors_test.cpp LIBS blockscale_io LABELS io)
# One binary of four topics (round trips, the plain-safetensors schema, add_quantized_tensor's and
# read_quantized_tensor's checks), sharing quantized_file_test_helpers.h.
blockscale_add_test(io_quantized_file_test
                    SOURCES ${BLOCKSCALE_IO_TESTS}/quantized_file_round_trip_test.cpp
                            ${BLOCKSCALE_IO_TESTS}/quantized_file_schema_test.cpp
                            ${BLOCKSCALE_IO_TESTS}/quantized_file_add_errors_test.cpp
                            ${BLOCKSCALE_IO_TESTS}/quantized_file_read_errors_test.cpp
                    LIBS blockscale_io LABELS io)
# Counts allocations through a replaced global operator new: its own binary.
blockscale_add_test(io_quantized_file_cost_test SOURCES ${BLOCKSCALE_IO_TESTS}/quantized_file_cost_test.cpp
                    LIBS blockscale_io LABELS io)
blockscale_add_test(io_corpus_test SOURCES ${BLOCKSCALE_IO_TESTS}/corpus_test.cpp LIBS blockscale_io LABELS io)
target_compile_definitions(io_corpus_test PRIVATE
  BLOCKSCALE_IO_CORPUS_DIR="${CMAKE_CURRENT_SOURCE_DIR}/io_corpus")

# Reference check: io_dump converts files numpy / ml_dtypes / safetensors wrote; the Python
# script compares bytes and values with theirs.
add_executable(io_dump ${BLOCKSCALE_IO_TESTS}/io_dump.cpp)
target_link_libraries(io_dump PRIVATE blockscale_io)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME io_reference
           COMMAND ${Python3_EXECUTABLE} ${BLOCKSCALE_IO_TESTS}/io_reference_test.py
                   --io-dump $<TARGET_FILE:io_dump>)
else()
  message(WARNING "blockscale: no Python 3 interpreter: the io_reference test will fail "
                  "(run ./tools/setup.sh)")
  add_test(NAME io_reference COMMAND ${CMAKE_COMMAND} -E false)
endif()
set_tests_properties(io_reference PROPERTIES TIMEOUT 300 LABELS io)

# libFuzzer targets (clang only): the parsers compiled with ASan + UBSan + fuzzer coverage.
#   CXX=clang++ cmake -S . -B build-fuzz -DBLOCKSCALE_FUZZ=ON && cmake --build build-fuzz --target io_fuzzers
# docs/file-io.md says how to run them; `ctest -L fuzz` replays the corpus through them.
option(BLOCKSCALE_FUZZ "Build the libFuzzer targets of the file parsers (clang only)" OFF)
if(BLOCKSCALE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "BLOCKSCALE_FUZZ=ON needs clang (libFuzzer): configure with CXX=clang++")
  endif()
  set(BLOCKSCALE_FUZZ_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g)
  add_library(blockscale_io_fuzzlib STATIC
    ${PROJECT_SOURCE_DIR}/formats/io/npy.cpp ${PROJECT_SOURCE_DIR}/formats/io/safetensors.cpp)
  target_include_directories(blockscale_io_fuzzlib PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(blockscale_io_fuzzlib PRIVATE nlohmann_json::nlohmann_json)
  target_compile_options(blockscale_io_fuzzlib PUBLIC ${BLOCKSCALE_FUZZ_FLAGS} -fsanitize=fuzzer-no-link)
  target_link_options(blockscale_io_fuzzlib PUBLIC ${BLOCKSCALE_FUZZ_FLAGS})
  add_custom_target(io_fuzzers)
  foreach(fmt npy safetensors)
    add_executable(${fmt}_fuzz ${CMAKE_CURRENT_SOURCE_DIR}/io_fuzz/${fmt}_fuzz.cpp)
    target_link_libraries(${fmt}_fuzz PRIVATE blockscale_io_fuzzlib)
    target_link_options(${fmt}_fuzz PRIVATE -fsanitize=fuzzer)
    add_dependencies(io_fuzzers ${fmt}_fuzz)
    # Replays the regression corpus (-runs=0: no new inputs) under the sanitizers.
    add_test(NAME ${fmt}_fuzz_corpus
             COMMAND ${fmt}_fuzz -runs=0 ${CMAKE_CURRENT_SOURCE_DIR}/io_corpus/${fmt})
    set_tests_properties(${fmt}_fuzz_corpus PROPERTIES LABELS "io;fuzz")
  endforeach()
endif()
