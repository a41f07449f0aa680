# `make install` / `cmake --install`: what an operator gets on a host.
#
#   PREFIX/bin                      fairschedd, fairschedctl, fairsched-bench
#   PREFIX/LIBDIR                   libfairsched.so.0 (+ .so link), libfairsched.a
#   PREFIX/LIBDIR/pkgconfig         fairsched.pc
#   PREFIX/include/fairsched        the client's public headers (self-contained)
#   PREFIX/LIBDIR/cmake/fairsched   the CMake package: find_package(fairsched)
#   PREFIX/lib/systemd/system       fairschedd.service, ExecStart pointing at PREFIX/bin
#   PREFIX/lib/sysusers.d           fairsched.conf (the fairsched user and group)
#   PREFIX/lib/tmpfiles.d           fairsched.conf (/run/fairsched)
#   FAIRSCHED_CONFIG_DIR            fairsched.toml, only when none is there yet
#   PREFIX/lib/python3.X/dist-packages/fairsched   the Python package (docs/python.md);
#                                   lib/python3/dist-packages for PREFIX=/usr (Debian's
#                                   layout), or FAIRSCHED_PYTHON_DIR
#
# Everything honours DESTDIR. The prefix is taken at install time
# (`cmake --install build --prefix P` works without reconfiguring): the unit
# and the .pc file are written by install(CODE) from the prefix in effect.
include(GNUInstallDirs)

set(FAIRSCHED_CONFIG_DIR "/etc/fairsched" CACHE PATH
    "Where the default fairsched.toml is installed (absolute; DESTDIR applies)")

set(_fairsched_programs fairschedd)
foreach(tgt fairschedctl fairsched-bench fairsched-worker fairsched-gateway)
  if(TARGET ${tgt})
    list(APPEND _fairsched_programs ${tgt})
  endif()
endforeach()
install(TARGETS ${_fairsched_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The shared library installs libfairsched.so.0.1.0, the soname link
# libfairsched.so.0 and the development link libfairsched.so. Both libraries
# are exported as a CMake package: find_package(fairsched) gives the imported
# targets fairsched::fairsched (shared) and fairsched::fairsched_static.
set_target_properties(fairsched_client PROPERTIES EXPORT_NAME fairsched)
set_target_properties(fairsched_client_static PROPERTIES EXPORT_NAME fairsched_static)
install(TARGETS fairsched_client fairsched_client_static EXPORT fairschedTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The public headers: self-contained, they need -I<prefix>/include alone.
install(DIRECTORY include/fairsched DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

include(CMakePackageConfigHelpers)
set(_fairsched_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/fairsched)
install(EXPORT fairschedTargets NAMESPACE fairsched:: DESTINATION ${_fairsched_cmakedir})
configure_package_config_file(cmake/fairschedConfig.cmake.in
  ${CMAKE_BINARY_DIR}/generated/fairschedConfig.cmake
  INSTALL_DESTINATION ${_fairsched_cmakedir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/generated/fairschedConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/generated/fairschedConfig.cmake
              ${CMAKE_BINARY_DIR}/generated/fairschedConfigVersion.cmake
        DESTINATION ${_fairsched_cmakedir})

install(FILES systemd/fairsched.sysusers.conf
        DESTINATION lib/sysusers.d RENAME fairsched.conf)
install(FILES systemd/fairsched.tmpfiles.conf
        DESTINATION lib/tmpfiles.d RENAME fairsched.conf)

# Inputs of the install-time step below. CODE runs in the install script, so
# the values are baked in here and the prefix is read there.
set(_fairsched_stage "${CMAKE_BINARY_DIR}/install-stage")
install(CODE "
  set(_src \"${CMAKE_SOURCE_DIR}\")
  set(_stage \"${_fairsched_stage}\")
  set(_bindir \"${CMAKE_INSTALL_BINDIR}\")
  set(_libdir \"${CMAKE_INSTALL_LIBDIR}\")
  set(_includedir \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(_confdir \"${FAIRSCHED_CONFIG_DIR}\")
  set(_version \"${PROJECT_VERSION}\")
  set(_python_version \"${FAIRSCHED_PYTHON_VERSION}\")
  set(_python_dir \"${FAIRSCHED_PYTHON_DIR}\")
  include(\"${CMAKE_CURRENT_LIST_DIR}/install_generated.cmake\")
")
