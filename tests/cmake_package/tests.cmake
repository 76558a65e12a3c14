# cmake_package_consumer: `cmake --install` of this build, then a separate project that does
# find_package(blockscale) and links the installed libraries (run_consumer.cmake).
set(consumer_args -DBUILD_DIR=${PROJECT_BINARY_DIR} -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/cmake_package
    -DCONFIG=$<CONFIG> -DGENERATOR=${CMAKE_GENERATOR} -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
    -DVERSION=${PROJECT_VERSION})
if(BLOCKSCALE_HAVE_CUDA)
  get_filename_component(cuda_root ${CUDAToolkit_BIN_DIR} DIRECTORY)
  list(APPEND consumer_args -DCUDA_ROOT=${cuda_root})
endif()
add_test(NAME cmake_package_consumer
         COMMAND ${CMAKE_COMMAND} ${consumer_args} -P ${CMAKE_CURRENT_LIST_DIR}/run_consumer.cmake)
set_tests_properties(cmake_package_consumer PROPERTIES LABELS package TIMEOUT 300)
