# What `cmake --install` puts under the prefix: liblilims.a, the public header
# with a Clang module map (Swift, Objective-C modules), a CMake package
# (find_package(lilims CONFIG) -> lilims::lilims) and a pkg-config file.
# A consumer that links with a C linker needs the C++ runtime and libm beside
# the archive; both the package and lilims.pc carry them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The C++ runtime the archive was compiled against (libc++ on Apple and in
# the Android NDK, libstdc++ elsewhere).
if(APPLE OR ANDROID)
  set(lilims_default_cxx_runtime c++)
else()
  set(lilims_default_cxx_runtime stdc++)
endif()
set(LILIMS_CXX_RUNTIME_LIB ${lilims_default_cxx_runtime} CACHE STRING
    "The C++ runtime library a C consumer links beside liblilims.a")
set(lilims_libm "")
if(NOT APPLE)
  set(lilims_libm m)
endif()

# A C++ link already pulls the C++ runtime in; a C link does not.
target_link_libraries(lilims INTERFACE
  $<$<NOT:$<LINK_LANGUAGE:CXX>>:${LILIMS_CXX_RUNTIME_LIB}> ${lilims_libm})
target_include_directories(lilims INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

install(TARGETS lilims EXPORT lilimsTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# A module map's `link` lines apply whatever its `requires` say, so the C++
# runtime's name is written in for this platform.
set(lilims_modulemap_links "  link \"lilims\"\n  link \"${LILIMS_CXX_RUNTIME_LIB}\"")
if(lilims_libm)
  string(APPEND lilims_modulemap_links "\n  link \"${lilims_libm}\"")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/module.modulemap.in
               ${PROJECT_BINARY_DIR}/module.modulemap @ONLY)
install(FILES ${PROJECT_SOURCE_DIR}/include/lilims/lilims.h ${PROJECT_BINARY_DIR}/module.modulemap
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lilims)

set(lilims_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/lilims)
install(EXPORT lilimsTargets NAMESPACE lilims:: DESTINATION ${lilims_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lilimsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lilimsConfig.cmake INSTALL_DESTINATION ${lilims_cmake_dir})
# Until 1.0 a minor version may break the API: same minor only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lilimsConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lilimsConfig.cmake
              ${PROJECT_BINARY_DIR}/lilimsConfigVersion.cmake
        DESTINATION ${lilims_cmake_dir})

set(lilims_pc_libs_private "-l${LILIMS_CXX_RUNTIME_LIB}")
if(lilims_libm)
  string(APPEND lilims_pc_libs_private " -l${lilims_libm}")
endif()
string(APPEND lilims_pc_libs_private " -pthread")
# Relocatable: the prefix is found from the .pc file's own place, so
# `cmake --install build --prefix DIR` gives a working file for any DIR.
file(RELATIVE_PATH lilims_pc_to_prefix /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" lilims_pc_to_prefix "${lilims_pc_to_prefix}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/lilims.pc.in ${PROJECT_BINARY_DIR}/lilims.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/lilims.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
