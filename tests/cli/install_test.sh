#!/usr/bin/env bash
# `cmake --install` (what `make install` runs) into a DESTDIR, then build
# clients against the installed tree through pkg-config:
#   - the files are where docs/operations.md says, the .so has its soname
#     and links, the unit's ExecStart names the prefix's fairschedd;
#   - a second install keeps an edited /etc/fairsched/fairsched.toml;
#   - every installed header compiles on its own with -I<prefix>/include alone;
#   - examples/c_client.c against the shared library, and against the static
#     one, and a C++ client against fairsched/client.hpp, link, load and
#     report the missing socket with exit 1 (the documented connect failure):
#     through pkg-config, with -I<prefix>/include alone, and through a CMake
#     project outside the source tree that calls find_package(fairsched);
#   - with PYTHON: the Python package is where that python3 looks for the
#     prefix (Debian's dist-packages, checked for /usr/local and /usr too),
#     records the installed library, and imports and reports the missing
#     socket as ConnectFailed from the installed tree.
# Exit 77 (skipped) where pkg-config is not installed.
#   install_test.sh BUILD_DIR SOURCE_DIR CC CXX "SANITIZER_FLAGS" [PYTHON]
set -u
build=${1:?usage: $0 BUILD_DIR SOURCE_DIR CC CXX SANITIZER_FLAGS [PYTHON]}
src=${2:?}
cc=${3:?}
cxx=${4:?}
read -r -a sanflags <<<"${5:-}"
python=${6:-}

if ! command -v pkg-config >/dev/null; then
  echo "install_test: skipped: pkg-config not installed"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
prefix=/opt/fairsched
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

install_once() {
  DESTDIR=$root cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || {
    cat "$work/install.log" >&2
    echo "FAIL: cmake --install failed" >&2
    exit 1
  }
}

install_once
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$root$prefix"/lib*/pkgconfig/fairsched.pc 2>/dev/null | head -n1)
[[ -n "$libdir" ]] || { echo "FAIL: no fairsched.pc under $root$prefix" >&2; exit 1; }
L=$root$prefix/$libdir

for f in bin/fairschedd include/fairsched/fairsched.h include/fairsched/client.hpp \
         include/fairsched/status.hpp include/fairsched/name.hpp "$libdir/libfairsched.a" \
         "$libdir/cmake/fairsched/fairschedConfig.cmake" \
         lib/systemd/system/fairschedd.service lib/sysusers.d/fairsched.conf \
         lib/tmpfiles.d/fairsched.conf; do
  [[ -f "$root$prefix/$f" ]] || fail "missing $prefix/$f"
done
[[ -x "$root$prefix/bin/fairschedd" ]] || fail "fairschedd is not executable"
[[ -d "$root$prefix/include/fairsched/detail" || -d "$root$prefix/include/daemon" ]] &&
  fail "internal headers installed under $prefix/include"
if [[ -f "$build/bin/fairschedctl" ]]; then
  [[ -x "$root$prefix/bin/fairschedctl" ]] || fail "fairschedctl was built but not installed"
fi
[[ -L "$L/libfairsched.so.0" ]] || fail "libfairsched.so.0 is not a symlink"
[[ -L "$L/libfairsched.so" ]] || fail "libfairsched.so is not a symlink"
[[ -f "$L/libfairsched.so.0" ]] || fail "libfairsched.so.0 points nowhere"
soname=$(objdump -p "$L/libfairsched.so" 2>/dev/null | awk '/SONAME/ {print $2}')
[[ "$soname" == "libfairsched.so.0" ]] || fail "soname '$soname', want libfairsched.so.0"
grep -qx "ExecStart=$prefix/bin/fairschedd --config /etc/fairsched/fairsched.toml" \
  "$root$prefix/lib/systemd/system/fairschedd.service" || fail "unit ExecStart does not name $prefix/bin"
grep -q "/usr/bin/fairschedd" "$root$prefix/lib/systemd/system/fairschedd.service" &&
  fail "unit still names /usr/bin/fairschedd"
cmp -s "$root/etc/fairsched/fairsched.toml" "$src/config/fairsched.toml" ||
  fail "/etc/fairsched/fairsched.toml is not the shipped default"

# A second install over an edited config keeps the edit.
echo "# edited by the operator" >>"$root/etc/fairsched/fairsched.toml"
cp "$root/etc/fairsched/fairsched.toml" "$work/edited.toml"
install_once
cmp -s "$root/etc/fairsched/fairsched.toml" "$work/edited.toml" ||
  fail "the second install overwrote an existing config"
grep -q "Keeping existing $root/etc/fairsched/fairsched.toml" "$work/install.log" ||
  fail "the second install did not say it kept the config: $(cat "$work/install.log")"

export PKG_CONFIG_PATH=$L/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
read -r -a cflags <<<"$(pkg-config --cflags fairsched)" || fail "pkg-config --cflags"
read -r -a libs <<<"$(pkg-config --libs fairsched)" || fail "pkg-config --libs"
read -r -a static_libs <<<"$(pkg-config --static --libs-only-other --libs-only-l fairsched | sed 's/-lfairsched//')"
[[ " ${cflags[*]} " == *" -I$root$prefix/include "* ]] || fail "cflags '${cflags[*]}' miss the DESTDIR include dir"

# Runs a client against a socket that does not exist: it must load, fail to
# connect and exit 1 with "connect" in its message.
expect_connect_failure() {
  local what=$1; shift
  LD_LIBRARY_PATH=$L "$@" >"$work/run.out" 2>&1
  local rc=$?
  [[ $rc -eq 1 ]] || fail "$what: exit $rc, want 1: $(cat "$work/run.out")"
  grep -q "connect" "$work/run.out" || fail "$what: no connect error: $(cat "$work/run.out")"
}

if "$cc" -std=c11 "${sanflags[@]}" "${cflags[@]}" -o "$work/c_client" "$src/examples/c_client.c" \
    "${libs[@]}" 2>"$work/cc.err"; then
  LD_LIBRARY_PATH=$L ldd "$work/c_client" | grep -q "$L/libfairsched.so.0" ||
    fail "c_client does not load the installed libfairsched.so.0"
  expect_connect_failure "c_client (shared)" "$work/c_client" --socket "$work/missing.sock"
else
  fail "c_client (shared) does not build: $(cat "$work/cc.err")"
fi

if "$cc" -std=c11 "${sanflags[@]}" "${cflags[@]}" -o "$work/c_client_static" \
    "$src/examples/c_client.c" "$L/libfairsched.a" "${static_libs[@]}" 2>"$work/cc.err"; then
  ldd "$work/c_client_static" | grep -q libfairsched && fail "static c_client loads libfairsched.so"
  expect_connect_failure "c_client (static)" "$work/c_client_static" --socket "$work/missing.sock"
else
  fail "c_client (static) does not build: $(cat "$work/cc.err")"
fi

cat >"$work/cpp_client.cpp" <<'CPP'
#include <fairsched/client.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  fairsched::ClientOptions o;
  o.socket_path = argc > 1 ? argv[1] : "/nonexistent";
  auto client = fairsched::Client::connect(o);
  if (!client) {
    std::fprintf(stderr, "connect: %s\n", client.error().toString().c_str());
    return 1;
  }
  return 0;
}
CPP
if "$cxx" -std=c++20 "${sanflags[@]}" "${cflags[@]}" -o "$work/cpp_client" "$work/cpp_client.cpp" \
    "${libs[@]}" 2>"$work/cxx.err"; then
  expect_connect_failure "cpp_client" "$work/cpp_client" "$work/missing.sock"
else
  fail "cpp_client does not build: $(cat "$work/cxx.err")"
fi

# Each public header on its own, with nothing but the installed include dir.
inc=$root$prefix/include
for h in "$inc"/fairsched/*.h "$inc"/fairsched/*.hpp; do
  name=fairsched/$(basename "$h")
  if [[ "$h" == *.h ]]; then
    printf '#include <%s>\nint main(void) { return 0; }\n' "$name" >"$work/one.c"
    "$cc" -std=c11 -Wall -Wextra -Werror -I"$inc" -c "$work/one.c" -o "$work/one.o" 2>"$work/h.err" ||
      fail "$name does not compile on its own as C: $(cat "$work/h.err")"
  fi
  printf '#include <%s>\nint main() { return 0; }\n' "$name" >"$work/one.cpp"
  "$cxx" -std=c++20 -Wall -Wextra -Werror -I"$inc" -c "$work/one.cpp" -o "$work/one.o" 2>"$work/h.err" ||
    fail "$name does not compile on its own as C++: $(cat "$work/h.err")"
done

# The C++ client with -I<prefix>/include alone (no pkg-config).
if "$cxx" -std=c++20 "${sanflags[@]}" -I"$inc" -o "$work/cpp_client_plain" "$work/cpp_client.cpp" \
    -L"$L" -lfairsched 2>"$work/cxx.err"; then
  expect_connect_failure "cpp_client (-I only)" "$work/cpp_client_plain" "$work/missing.sock"
else
  fail "cpp_client does not build with -I$prefix/include alone: $(cat "$work/cxx.err")"
fi

# A CMake project outside the source tree: find_package(fairsched), a C and a
# C++ program against the shared library and the C one against the static one.
proj=$work/cmake_project
mkdir -p "$proj"
cp "$src/examples/c_client.c" "$work/cpp_client.cpp" "$proj/"
cat >"$proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(uses_fairsched C CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(fairsched 0.1 REQUIRED)
add_executable(c_client c_client.c)
target_link_libraries(c_client PRIVATE fairsched::fairsched)
add_executable(c_client_static c_client.c)
target_link_libraries(c_client_static PRIVATE fairsched::fairsched_static)
set_target_properties(c_client_static PROPERTIES LINKER_LANGUAGE CXX)
add_executable(cpp_client cpp_client.cpp)
target_link_libraries(cpp_client PRIVATE fairsched::fairsched)
CMAKE
if cmake -S "$proj" -B "$proj/build" -DCMAKE_PREFIX_PATH="$root$prefix" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_C_FLAGS="${sanflags[*]}" -DCMAKE_CXX_FLAGS="${sanflags[*]}" \
      -DCMAKE_EXE_LINKER_FLAGS="${sanflags[*]}" >"$work/cmake.log" 2>&1 &&
    cmake --build "$proj/build" >>"$work/cmake.log" 2>&1; then
  expect_connect_failure "c_client (find_package)" "$proj/build/c_client" --socket "$work/missing.sock"
  ldd "$proj/build/c_client_static" | grep -q libfairsched &&
    fail "c_client_static (find_package) loads libfairsched.so"
  expect_connect_failure "c_client_static (find_package)" "$proj/build/c_client_static" \
    --socket "$work/missing.sock"
  expect_connect_failure "cpp_client (find_package)" "$proj/build/cpp_client" "$work/missing.sock"
else
  fail "the find_package(fairsched) project does not build: $(tail -n 30 "$work/cmake.log")"
fi

# The Python package. Sanitized builds skip the import: the interpreter does
# not load the sanitizer runtimes a sanitized libfairsched needs.
if [[ -n "$python" && -x "$python" ]]; then
  pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  site=$prefix/lib/python$pyver/dist-packages
  pkg=$root$site/fairsched
  for f in __init__.py aio.py client.py worker.py py.typed _install.py; do
    [[ -f "$pkg/$f" ]] || fail "missing $site/fairsched/$f"
  done
  grep -qx "LIBRARY = \"$prefix/$libdir/libfairsched.so.0\"" "$pkg/_install.py" 2>/dev/null ||
    fail "$site/fairsched/_install.py does not name $prefix/$libdir/libfairsched.so.0"
  [[ -e "$pkg/__pycache__" ]] && fail "__pycache__ installed under $site/fairsched"
  if [[ ${#sanflags[@]} -eq 0 ]]; then
    (cd "$work" && env PYTHONPATH="$root$site" FAIRSCHED_LIBRARY="$L/libfairsched.so.0" \
        PYTHONDONTWRITEBYTECODE=1 "$python" - "$root$site" "$prefix/$libdir" "$work/missing.sock" \
        >"$work/py.out" 2>&1 <<'PY'
import sys
import fairsched
from fairsched import _ffi
site, libdir, sock = sys.argv[1:]
assert fairsched.__file__.startswith(site + "/"), fairsched.__file__
assert _ffi._candidates()[0] == ("the installed library", libdir + "/libfairsched.so.0"), _ffi._candidates()
try:
    fairsched.Client.connect(sock)
except fairsched.ConnectFailed as e:
    print(e)
    sys.exit(1)
PY
    )
    rc=$?
    [[ $rc -eq 1 ]] && grep -q "^CONNECT_FAILED: .*missing.sock" "$work/py.out" ||
      fail "the installed Python package: exit $rc, want 1 with CONNECT_FAILED: $(cat "$work/py.out")"
  fi
  # Where Debian's python3 looks: /usr/local/lib/python3.X/dist-packages for
  # /usr/local, /usr/lib/python3/dist-packages for /usr.
  if "$python" -c 'import sys; sys.exit(0 if any(p.endswith("dist-packages") for p in sys.path) else 1)'; then
    for p in /usr/local /usr; do
      proot=$work/pyroot
      rm -rf "$proot"
      DESTDIR=$proot cmake --install "$build" --prefix "$p" >"$work/pyinstall.log" 2>&1 ||
        fail "cmake --install --prefix $p failed: $(cat "$work/pyinstall.log")"
      init=$(cd "$proot" && find .$p/lib -path '*dist-packages/fairsched/__init__.py' | head -n1)
      dir=${init#.}
      dir=${dir%/fairsched/__init__.py}
      "$python" -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "$dir" ||
        fail "prefix $p: the package went to '$dir', which $python does not search"
    done
  fi
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "install_test: all checks passed"
