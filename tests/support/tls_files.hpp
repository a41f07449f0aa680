// Throwaway TLS material for tests: a CA, a server certificate it signed (for
// 127.0.0.1 and localhost), a client certificate it signed, and an unrelated
// second CA for "wrong CA" cases. RSA 2048, valid 2 days, made with the
// openssl command in a fresh temporary directory that the destructor removes.
#pragma once

#include <memory>
#include <string>
#include <variant>

namespace fairsched::testing {

class TlsFiles {
 public:
  static constexpr const char* kOpenssl = "/usr/bin/openssl";

  // The files, or why they could not be made (openssl missing or failing).
  static std::variant<std::unique_ptr<TlsFiles>, std::string> make(std::string openssl = kOpenssl);
  ~TlsFiles();
  TlsFiles(const TlsFiles&) = delete;
  TlsFiles& operator=(const TlsFiles&) = delete;

  const std::string& dir() const { return dir_; }
  std::string caCert() const { return dir_ + "/ca.crt"; }
  std::string caKey() const { return dir_ + "/ca.key"; }
  // Usable for both ends (serverAuth and clientAuth): Redis presents it when
  // it connects out too (replication, cluster bus, sentinels).
  std::string serverCert() const { return dir_ + "/server.crt"; }
  std::string serverKey() const { return dir_ + "/server.key"; }
  std::string clientCert() const { return dir_ + "/client.crt"; }
  std::string clientKey() const { return dir_ + "/client.key"; }
  // A CA that signed none of the above.
  std::string otherCaCert() const { return dir_ + "/other_ca.crt"; }

 private:
  TlsFiles() = default;
  std::string dir_;
};

}  // namespace fairsched::testing
