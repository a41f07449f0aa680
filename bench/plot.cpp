// plotWithPython: the one place fairsched-bench reaches python3/matplotlib.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench/scenario.hpp"

extern char** environ;

namespace fairsched::bench {
namespace {

// The python that has matplotlib: $FAIRSCHED_PYTHON, else the system one
// (python3-matplotlib installs there), else whatever python3 PATH finds.
std::string pythonPath() {
  if (const char* p = std::getenv("FAIRSCHED_PYTHON"); p && *p) return p;
  if (access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

// What every plot script begins with: matplotlib without a display, and
// `report`, the data.
constexpr std::string_view kPreamble = R"PY(import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

report = json.load(open(sys.argv[1]))
)PY";

}  // namespace

std::optional<std::string> plotWithPython(std::string_view script, const nlohmann::json& data,
                                          const std::string& png_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec) / ("fairsched-plot-" + std::to_string(getpid()));
  fs::create_directories(dir, ec);
  if (ec) return "cannot create " + dir.string() + ": " + ec.message();
  const fs::path script_path = dir / "plot.py";
  const fs::path data_path = dir / "data.json";
  {
    std::ofstream s(script_path);
    s << kPreamble << script;
    std::ofstream d(data_path);
    d << data.dump();
    if (!s || !d) {
      fs::remove_all(dir, ec);
      return "cannot write " + dir.string();
    }
  }

  const std::string python = pythonPath();
  std::vector<std::string> args{python, script_path.string(), data_path.string(), png_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawn_err = posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ);
  std::optional<std::string> error;
  if (spawn_err != 0) {
    error = "cannot run " + python + " (install python3-matplotlib or set FAIRSCHED_PYTHON)";
  } else {
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      error = python + " failed drawing " + png_path + " (is python3-matplotlib installed?)";
    }
  }
  fs::remove_all(dir, ec);
  return error;
}

}  // namespace fairsched::bench
