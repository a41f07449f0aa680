// User and group names to ids, for the `users` and `groups` of [[clients]]
// rules. The parser asks through this interface, so a test can answer without
// the machine's user database; SystemAccountLookup is the real one.
#pragma once

#include <cstdint>
#include <string_view>

namespace fairsched::config {

// The answer to one lookup.
struct AccountId {
  enum class Status : std::uint8_t { kFound, kNotFound, kFailed };

  Status status = Status::kNotFound;
  std::uint32_t id = 0;  // the uid or gid, when kFound
  int error = 0;         // an errno value, when kFailed (the parser prints strerror of it)

  static AccountId found(std::uint32_t value) { return {Status::kFound, value, 0}; }
  static AccountId notFound() { return {Status::kNotFound, 0, 0}; }
  static AccountId failed(int errno_value) { return {Status::kFailed, 0, errno_value}; }
};

class AccountLookup {
 public:
  virtual ~AccountLookup() = default;
  // REQUIRES: `name` is not empty and holds no NUL byte (the parser reports
  // such names as unknown without asking).
  virtual AccountId user(std::string_view name) const = 0;
  virtual AccountId group(std::string_view name) const = 0;
};

// getpwnam_r / getgrnam_r: whatever nsswitch.conf points at (files, LDAP...),
// so a lookup may block on the network. Stateless; any thread may call it.
class SystemAccountLookup final : public AccountLookup {
 public:
  AccountId user(std::string_view name) const override;
  AccountId group(std::string_view name) const override;
};

}  // namespace fairsched::config
