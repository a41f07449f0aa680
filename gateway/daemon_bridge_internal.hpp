// What the daemon_bridge*.cpp files share, and nothing else includes.
#pragma once

#include <memory>
#include <utility>

#include "gateway/coro.hpp"
#include "gateway/exchange.hpp"

namespace fairsched::gateway {

// Runs `fn(ex)` on the exchange's home thread (a post: never inline, so
// never under the bridge's lock).
template <typename F>
void atHome(const std::shared_ptr<Exchange>& ex, F fn) {
  asio::post(ex->home(), [ex, fn = std::move(fn)]() mutable { fn(*ex); });
}

}  // namespace fairsched::gateway
