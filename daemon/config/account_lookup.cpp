#include "daemon/config/account_lookup.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace fairsched::config {

namespace {

// getpwnam_r / getgrnam_r with a buffer that grows on ERANGE.
template <typename Record, typename Fn, typename IdOf>
AccountId lookupId(std::string_view name, Fn fn, IdOf idOf, int sysconfName) {
  const std::string cname(name);
  const long hint = sysconf(sysconfName);
  std::size_t size = hint > 0 ? static_cast<std::size_t>(hint) : 1024;
  for (;;) {
    std::vector<char> buf(size);
    Record rec{};
    Record* result = nullptr;
    const int rc = fn(cname.c_str(), &rec, buf.data(), buf.size(), &result);
    if (rc == ERANGE && size < (1u << 24)) {
      size *= 2;
      continue;
    }
    if (rc != 0) return AccountId::failed(rc);
    if (result == nullptr) return AccountId::notFound();
    return AccountId::found(static_cast<std::uint32_t>(idOf(rec)));
  }
}

}  // namespace

AccountId SystemAccountLookup::user(std::string_view name) const {
  return lookupId<::passwd>(
      name, getpwnam_r, [](const ::passwd& p) { return p.pw_uid; }, _SC_GETPW_R_SIZE_MAX);
}

AccountId SystemAccountLookup::group(std::string_view name) const {
  return lookupId<::group>(
      name, getgrnam_r, [](const ::group& g) { return g.gr_gid; }, _SC_GETGR_R_SIZE_MAX);
}

}  // namespace fairsched::config
