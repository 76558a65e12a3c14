# The cmake_package_consumer test (cmake -P): installs the build tree BUILD_DIR to WORK_DIR/prefix,
# configures and builds the consumer project (this folder) against that install, and runs it.
# Everything it writes stays in WORK_DIR, inside the build tree.
#   -D BUILD_DIR=... -D WORK_DIR=... -D CONFIG=... -D GENERATOR=... -D CXX_COMPILER=...
#   [-D CUDA_ROOT=...]  the toolkit the build used, for the package's find_dependency(CUDAToolkit)
#   [-D VERSION=...]    what the installed CLI's --version must print
foreach(var BUILD_DIR WORK_DIR CONFIG GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D ${var}=... is required")
  endif()
endforeach()

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/consumer)
file(REMOVE_RECURSE ${WORK_DIR})

# Runs a command; any failure ends the test with the step's name and output.
function(step name)
  message(STATUS "cmake_package: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake_package: ${name} failed (${rc}):\n${out}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step("install ${BUILD_DIR} to ${prefix}"
     ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix} --config ${CONFIG})
if(EXISTS ${prefix}/blockscale)
  message(FATAL_ERROR "cmake_package: a plain install wrote the Python package (${prefix}/blockscale); "
                      "it belongs to component python only")
endif()

set(configure_args -S ${CMAKE_CURRENT_LIST_DIR} -B ${consumer_build} -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=${CONFIG} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix})
if(CUDA_ROOT)
  list(APPEND configure_args -DCUDAToolkit_ROOT=${CUDA_ROOT})
endif()
step("configure the consumer" ${CMAKE_COMMAND} ${configure_args})
step("build the consumer" ${CMAKE_COMMAND} --build ${consumer_build} --config ${CONFIG})
step("run the consumer" ${consumer_build}/consumer)
message(STATUS "${step_output}")

if(VERSION)
  step("run the installed CLI" ${prefix}/bin/blockscale --version)
  string(FIND "${step_output}" "blockscale ${VERSION}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "cmake_package: blockscale --version printed '${step_output}', not ${VERSION}")
  endif()
endif()
message(STATUS "cmake_package: ok")
