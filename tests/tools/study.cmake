# The accuracy study (tools/study.h, tools/study_report.h): metrics on hand-checkable tensors,
# chunked == whole-tensor quantization, the reports, and the CLI's bounded memory on a large file.
set(BLOCKSCALE_STUDY_TESTS ${CMAKE_CURRENT_SOURCE_DIR})
blockscale_add_test(study_test SOURCES ${BLOCKSCALE_STUDY_TESTS}/study_test.cpp
                    LIBS blockscale_study blockscale_io LABELS tools)
blockscale_add_test(study_report_test SOURCES ${BLOCKSCALE_STUDY_TESTS}/study_report_test.cpp
                    LIBS blockscale_study nlohmann_json::nlohmann_json LABELS tools)

# Writes a 256+ MiB safetensors file and runs build/blockscale study on it (about 10 s on 2 cores).
blockscale_add_test(study_memory_test SOURCES ${BLOCKSCALE_STUDY_TESTS}/study_memory_test.cpp
                    LIBS blockscale_io nlohmann_json::nlohmann_json LABELS tools)
target_compile_definitions(study_memory_test PRIVATE BLOCKSCALE_CLI="$<TARGET_FILE:blockscale>")
add_dependencies(study_memory_test blockscale)
