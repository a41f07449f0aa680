// Runs a program (no shell: each argument goes through as it is) with stdin
// from /dev/null, collecting stdout and stderr apart, killed with SIGKILL when
// it runs past `limit` so a hung peer cannot hang a test.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace fairsched::testing {

struct ProgramResult {
  int exit_code = -1;  // -1: could not start, killed or died of a signal
  bool timed_out = false;
  std::string out;
  std::string err;

  bool ok() const { return exit_code == 0; }
  // "exit N: <stderr>" or why it did not exit, for failure messages.
  std::string describe() const;
};

ProgramResult runProgram(const std::vector<std::string>& argv, std::chrono::milliseconds limit);

}  // namespace fairsched::testing
