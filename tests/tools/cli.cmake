# The `blockscale` CLI through its binary: round trips against the in-memory emulator, and every
# error path (message, exit code, no file left behind).
blockscale_add_test(cli_roundtrip_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/cli_roundtrip_test.cpp
                    LIBS blockscale_io LABELS tools)
target_compile_definitions(cli_roundtrip_test PRIVATE BLOCKSCALE_CLI="$<TARGET_FILE:blockscale>")
add_dependencies(cli_roundtrip_test blockscale)

find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_errors COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/cli_errors_test.py
                                   --cli $<TARGET_FILE:blockscale> --doc ${PROJECT_SOURCE_DIR}/docs/cli.md)
else()
  add_test(NAME cli_errors COMMAND ${CMAKE_COMMAND} -E false)
endif()
set_tests_properties(cli_errors PROPERTIES TIMEOUT 300 LABELS tools)

# ---- fuzz_readers_*: mutated inputs for every file reader --------------------------------------
# Mutated .npy / .safetensors files (fuzz_readers_plain: quantize, study), quantized files
# (fuzz_readers_quantized: dequantize) and training checkpoints (fuzz_readers_checkpoint:
# train --resume): every run ends in exit 0 or one clean error line, never a signal, a hang or a
# file left behind. 300 inputs per reader here; tests/tools/fuzz_readers_<family>_test.py
# --count 10000 for a longer search. Each takes 3-8 s on 2 cores; the timeouts (600 s in all,
# shared by the work each does) leave room for a machine busy with other tests.
foreach(family plain quantized checkpoint)
  if(Python3_Interpreter_FOUND)
    add_test(NAME fuzz_readers_${family}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_readers_${family}_test.py
                     --cli $<TARGET_FILE:blockscale> --count 300 --jobs 2 --report)
  else()
    add_test(NAME fuzz_readers_${family} COMMAND ${CMAKE_COMMAND} -E false)
  endif()
endforeach()
set_tests_properties(fuzz_readers_plain PROPERTIES TIMEOUT 200 LABELS tools)
set_tests_properties(fuzz_readers_quantized PROPERTIES TIMEOUT 100 LABELS tools)
set_tests_properties(fuzz_readers_checkpoint PROPERTIES TIMEOUT 300 LABELS tools)

# ---- train_resume_kill: stop + resume and kill -9 at random moments + resume, on the CPU ----------
# tools/train_resume_check.sh against an uninterrupted run: the same losses, gradient norms and
# eval losses bit for bit (60 steps of a tiny bf16 model, checkpoints every 5; about a minute).
add_test(NAME train_resume_kill COMMAND ${CMAKE_COMMAND} -E env BLOCKSCALE=$<TARGET_FILE:blockscale> STEPS=60
                                        bash ${PROJECT_SOURCE_DIR}/tools/train_resume_check.sh --device cpu bf16)
set_tests_properties(train_resume_kill PROPERTIES TIMEOUT 600 LABELS tools)
