# Runs inside `cmake --install` (see install.cmake): writes the files that
# depend on the install prefix, and the default config unless one exists.
# REQUIRES: _src _stage _bindir _libdir _includedir _confdir _version
# _python_version _python_dir set by the caller; CMAKE_INSTALL_PREFIX is the
# prefix of this install.
file(MAKE_DIRECTORY "${_stage}")

# The unit as shipped names /usr/bin/fairschedd and /etc/fairsched; point it
# at this prefix and config directory.
file(READ "${_src}/systemd/fairschedd.service" _unit)
string(REPLACE "/usr/bin/fairschedd" "${CMAKE_INSTALL_PREFIX}/${_bindir}/fairschedd" _unit "${_unit}")
string(REPLACE "/etc/fairsched/fairsched.toml" "${_confdir}/fairsched.toml" _unit "${_unit}")
file(WRITE "${_stage}/fairschedd.service" "${_unit}")
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" TYPE FILE
     FILES "${_stage}/fairschedd.service")

# pkg-config. Shared linking needs only -lfairsched; a static link
# (`pkg-config --static`) also needs the C++ runtime the library is written in.
file(WRITE "${_stage}/fairsched.pc" "prefix=${CMAKE_INSTALL_PREFIX}
libdir=\${prefix}/${_libdir}
includedir=\${prefix}/${_includedir}

Name: fairsched
Description: Client library of fairschedd, the fair LLM request scheduler
Version: ${_version}
Cflags: -I\${includedir}
Libs: -L\${libdir} -lfairsched
Libs.private: -lstdc++ -lm -pthread
")
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${_libdir}/pkgconfig" TYPE FILE
     FILES "${_stage}/fairsched.pc")

# The config is the operator's once installed: never replace it.
if(EXISTS "$ENV{DESTDIR}${_confdir}/fairsched.toml")
  message(STATUS "Keeping existing $ENV{DESTDIR}${_confdir}/fairsched.toml (not overwritten; "
                 "the shipped default is ${_src}/config/fairsched.toml)")
else()
  file(INSTALL DESTINATION "${_confdir}" TYPE FILE
       PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
       FILES "${_src}/config/fairsched.toml")
endif()

# The Python package, where Debian's python3 looks for this prefix, with the
# path of the library it drives recorded next to it (fairsched/_install.py):
# the package then loads the library installed with it, whatever ld.so's
# search path holds.
if(_python_dir)
  set(_pydir "${_python_dir}")
elseif(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(_pydir "lib/python3/dist-packages")
elseif(_python_version)
  set(_pydir "lib/python${_python_version}/dist-packages")
else()
  set(_pydir "lib/python3/dist-packages")
endif()
if(NOT IS_ABSOLUTE "${_pydir}")
  set(_pydir "${CMAKE_INSTALL_PREFIX}/${_pydir}")
endif()
file(INSTALL DESTINATION "${_pydir}" TYPE DIRECTORY FILES "${_src}/python/fairsched"
     PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE PATTERN "_install.py" EXCLUDE)
file(WRITE "${_stage}/_install.py"
     "# Written by `make install`: the library this package was installed with.\n"
     "LIBRARY = \"${CMAKE_INSTALL_PREFIX}/${_libdir}/libfairsched.so.0\"\n")
file(INSTALL DESTINATION "${_pydir}/fairsched" TYPE FILE FILES "${_stage}/_install.py")
