// A private temporary directory for one test or benchmark run, removed with
// everything in it when the object goes. Other uids may enter it (0755), so
// a socket's own mode decides who may connect. path() is "" when it could not
// be made.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace fairsched::testing {

class TempDir {
 public:
  explicit TempDir(const char* prefix = "fairsched-test") {
    std::string tmpl = std::string("/tmp/") + prefix + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return;
    chmod(tmpl.c_str(), 0755);
    path_ = tmpl;
  }
  ~TempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace fairsched::testing
