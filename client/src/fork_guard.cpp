#include "fork_guard.hpp"

#include <pthread.h>
#include <unistd.h>

#include <mutex>
#include <string>

namespace fairsched::client_detail {

std::atomic<std::uint64_t> g_fork_count{0};

namespace {

void afterForkInChild() {
  g_fork_count.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

Birth Birth::now() {
  static std::once_flag registered;
  std::call_once(registered, [] { ::pthread_atfork(nullptr, nullptr, afterForkInChild); });
  return Birth{g_fork_count.load(std::memory_order_relaxed), ::getpid()};
}

Error Birth::inheritedError(const char* what) const {
  return Error{ErrorCode::kNotConnected, 0,
               std::string("this ") + what + " was connected by process " + std::to_string(pid) +
                   "; a child of fork() must connect its own"};
}

}  // namespace fairsched::client_detail
