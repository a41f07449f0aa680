// Runs a shell command, collecting what it prints (stdout and stderr
// together): the exit status, or -1 when it did not exit normally.
#pragma once

#include <sys/wait.h>

#include <cstdio>
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

// fairschedctl from this build tree with `args`.
inline int runFairschedctl(const std::string& args, std::string* out = nullptr) {
  return runCommand(std::string(FAIRSCHED_BINARY_DIR) + "/bin/fairschedctl " + args, out);
}

}  // namespace fairsched::testing
