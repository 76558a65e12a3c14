# `cmake --install <build> --prefix P`: blockscale's C++ libraries as the CMake package
# `blockscale`, so another project does
#   find_package(blockscale 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE blockscale::formats)
# Components: `dev` (headers, static libraries, the package's CMake files) and `runtime` (the
# `blockscale` CLI). The Python module is component `python` alone (pip install .), never part of
# a plain install.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BLOCKSCALE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/blockscale)

# The libraries a consumer links, as blockscale::<name>: the host emulator and its file I/O
# always, the CUDA layers where this build has them. train/ and the study are the CLI's own
# code, not a library interface, and stay out.
set(blockscale_package_libs formats io)
set(blockscale_header_dirs formats)
if(BLOCKSCALE_HAVE_CUDA)
  list(APPEND blockscale_package_libs runtime quant gemm)
  list(APPEND blockscale_header_dirs runtime quant gemm)
endif()

set(blockscale_package_targets)
foreach(name IN LISTS blockscale_package_libs)
  set_target_properties(blockscale_${name} PROPERTIES EXPORT_NAME ${name})
  # The same names for a project that adds this tree with add_subdirectory().
  add_library(blockscale::${name} ALIAS blockscale_${name})
  list(APPEND blockscale_package_targets blockscale_${name})
endforeach()

install(TARGETS ${blockscale_package_targets} EXPORT blockscaleTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT blockscaleTargets NAMESPACE blockscale:: DESTINATION ${BLOCKSCALE_INSTALL_CMAKEDIR}
        COMPONENT dev)

# Headers keep the source tree's layout, so "formats/recipe.h" names the same file in both.
foreach(dir IN LISTS blockscale_header_dirs)
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/${dir}/*.h ${PROJECT_SOURCE_DIR}/${dir}/*.cuh)
  foreach(header IN LISTS headers)
    get_filename_component(header_dir ${header} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${header_dir}
            COMPONENT dev)
  endforeach()
endforeach()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/blockscaleConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/blockscaleConfig.cmake
                              INSTALL_DESTINATION ${BLOCKSCALE_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the interface, so 0.1 accepts 0.1.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/blockscaleConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/blockscaleConfig.cmake
              ${PROJECT_BINARY_DIR}/package/blockscaleConfigVersion.cmake
        DESTINATION ${BLOCKSCALE_INSTALL_CMAKEDIR} COMPONENT dev)

# The CLI. Its CUDA libraries (cudart, NCCL) live outside the system's library path, so the
# installed binary keeps the directories it was linked against.
set_target_properties(blockscale PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS blockscale RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
