// Runs a shell command, collecting what it prints (stdout and stderr
// together): the exit status, or -1 when it did not exit normally.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fairsched::testing {

inline int runCommand(const std::string& cmd, std::string* out = nullptr) {
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return -1;
  std::string text;
  char buf[4096];
  while (const std::size_t n = fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  const int st = pclose(f);
  if (out) *out = text;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// Where the tests find fairschedd, fairsched-worker and fairschedctl:
// $FAIRSCHED_TEST_BIN_DIR where set (the GPU kit runs its test binaries away
// from their build tree), else this build tree's bin/.
inline std::string binDir() {
  const char* env = std::getenv("FAIRSCHED_TEST_BIN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env)
                                        : std::string(FAIRSCHED_BINARY_DIR) + "/bin";
}

// fairschedctl from binDir() with `args`.
inline int runFairschedctl(const std::string& args, std::string* out = nullptr) {
  return runCommand(binDir() + "/fairschedctl " + args, out);
}

}  // namespace fairsched::testing
