# The Python package (python/fairsched, docs/python.md): the interpreter its
# tests run with and whose search path `make install` installs it into.
# Debian's /usr/bin/python3 is preferred over another python3 earlier in
# PATH (pyenv, a virtualenv): it is the one that has python3-pytest and
# whose dist-packages the install targets.
find_program(FAIRSCHED_PYTHON3 NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH
             DOC "python3 of the Python package's tests and install directory")
if(NOT FAIRSCHED_PYTHON3)
  find_program(FAIRSCHED_PYTHON3 NAMES python3)
endif()
set(FAIRSCHED_PYTHON_VERSION "")
if(FAIRSCHED_PYTHON3)
  execute_process(
    COMMAND ${FAIRSCHED_PYTHON3} -c "import sys; print('%d.%d' % sys.version_info[:2])"
    OUTPUT_VARIABLE FAIRSCHED_PYTHON_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _fairsched_py_rc)
  if(NOT _fairsched_py_rc EQUAL 0)
    set(FAIRSCHED_PYTHON_VERSION "")
  endif()
  message(STATUS "fairsched: Python package tests and install for ${FAIRSCHED_PYTHON3} "
                 "(${FAIRSCHED_PYTHON_VERSION})")
else()
  message(STATUS "fairsched: python3 not found; the Python package's tests will be skipped")
endif()

# Where `make install` puts python/fairsched: relative to the install prefix,
# or absolute. Empty: where Debian's python3 looks for that prefix —
# lib/python3/dist-packages for /usr, lib/python3.X/dist-packages for any
# other prefix (/usr/local/lib/python3.11/dist-packages on Debian 12).
set(FAIRSCHED_PYTHON_DIR "" CACHE STRING
    "Install directory of the Python package (relative to the prefix, or absolute); empty: Debian's")
