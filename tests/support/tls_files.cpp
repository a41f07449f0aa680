#include "tests/support/tls_files.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/support/run_program.hpp"

namespace fairsched::testing {
namespace {

// Our own minimal configs, so the system's openssl.cnf cannot change what is
// made.
constexpr const char* kCaConfig = R"([req]
distinguished_name = dn
x509_extensions = v3_ca
prompt = no
[dn]
CN = %CN%
[v3_ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
)";

constexpr const char* kRequestConfig = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = %CN%
)";

constexpr const char* kServerExtensions = R"(basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
)";

constexpr const char* kClientExtensions = R"(basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
)";

bool writeFile(const std::string& path, std::string text, const std::string& cn = {}) {
  if (const auto at = text.find("%CN%"); at != std::string::npos) text.replace(at, 4, cn);
  std::ofstream f(path, std::ios::trunc);
  f << text;
  return static_cast<bool>(f);
}

}  // namespace

std::variant<std::unique_ptr<TlsFiles>, std::string> TlsFiles::make(std::string openssl) {
  if (::access(openssl.c_str(), X_OK) != 0) return openssl + " is not installed";
  std::unique_ptr<TlsFiles> files(new TlsFiles());
  std::string tmpl = (std::filesystem::temp_directory_path() / "fairsched-tls-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
  files->dir_ = tmpl;
  const std::string d = files->dir_ + "/";
  if (!writeFile(d + "ca.cnf", kCaConfig, "fairsched test CA") ||
      !writeFile(d + "other_ca.cnf", kCaConfig, "fairsched unrelated test CA") ||
      !writeFile(d + "server.cnf", kRequestConfig, "localhost") ||
      !writeFile(d + "client.cnf", kRequestConfig, "fairsched test client") ||
      !writeFile(d + "server.ext", kServerExtensions) ||
      !writeFile(d + "client.ext", kClientExtensions)) {
    return "cannot write into " + files->dir_;
  }
  const std::vector<std::vector<std::string>> steps = {
      {openssl, "req", "-x509", "-new", "-config", d + "ca.cnf", "-newkey", "rsa:2048", "-nodes",
       "-keyout", d + "ca.key", "-out", d + "ca.crt", "-days", "2"},
      {openssl, "req", "-x509", "-new", "-config", d + "other_ca.cnf", "-newkey", "rsa:2048",
       "-nodes", "-keyout", d + "other_ca.key", "-out", d + "other_ca.crt", "-days", "2"},
      {openssl, "req", "-new", "-config", d + "server.cnf", "-newkey", "rsa:2048", "-nodes",
       "-keyout", d + "server.key", "-out", d + "server.csr"},
      {openssl, "x509", "-req", "-in", d + "server.csr", "-CA", d + "ca.crt", "-CAkey",
       d + "ca.key", "-set_serial", "2", "-days", "2", "-extfile", d + "server.ext", "-out",
       d + "server.crt"},
      {openssl, "req", "-new", "-config", d + "client.cnf", "-newkey", "rsa:2048", "-nodes",
       "-keyout", d + "client.key", "-out", d + "client.csr"},
      {openssl, "x509", "-req", "-in", d + "client.csr", "-CA", d + "ca.crt", "-CAkey",
       d + "ca.key", "-set_serial", "3", "-days", "2", "-extfile", d + "client.ext", "-out",
       d + "client.crt"},
  };
  for (const auto& step : steps) {
    const auto r = runProgram(step, std::chrono::seconds(60));
    if (!r.ok()) return "openssl " + step[1] + " failed: " + r.describe();
  }
  return files;
}

TlsFiles::~TlsFiles() {
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

}  // namespace fairsched::testing
