// Helpers shared by the client library's tests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "fairsched/client.hpp"
#include "fake_daemon.hpp"
#include "tests/support/seeded_rng.hpp"

namespace fairsched::testing {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

inline ClientOptions optionsFor(const FakeDaemon& fake) {
  ClientOptions o;
  o.socket_path = fake.socketPath();
  o.client_name = "client-test";
  o.connect_timeout = 5s;
  o.control_timeout = 5s;
  return o;
}

inline Client mustConnect(const ClientOptions& options) {
  Result<Client> c = Client::connect(options);
  if (!c) {
    ADD_FAILURE() << "connect: " << c.error().toString();
    std::abort();
  }
  return std::move(c).value();
}

// Starts `fake`, answering with `responder` when one is given, and connects
// a client with optionsFor(fake) as `tweak` (when given) changes them.
inline Client startAndConnect(FakeDaemon& fake, Responder responder = {},
                              const std::function<void(ClientOptions&)>& tweak = {}) {
  if (responder) fake.setResponder(std::move(responder));
  fake.start();
  ClientOptions o = optionsFor(fake);
  if (tweak) tweak(o);
  return mustConnect(o);
}

inline Tenant mustOpen(Client& client, std::string_view name) {
  Result<Tenant> t = client.openTenant(name);
  if (!t) {
    ADD_FAILURE() << "openTenant: " << t.error().toString();
    std::abort();
  }
  return *t;
}

// Polls (with wait()) until `n` completions arrived or `timeout` passed.
inline std::vector<Completion> collect(Client& client, std::size_t n,
                                       std::chrono::milliseconds timeout = 5000ms) {
  std::vector<Completion> out;
  const auto deadline = Clock::now() + timeout;
  while (out.size() < n && Clock::now() < deadline) {
    client.poll(out);
    if (out.size() >= n) break;
    const Result<void> w = client.wait(10ms);
    if (!w && w.code() != ErrorCode::kTimedOut) {
      client.poll(out);
      if (w.code() == ErrorCode::kNotConnected) break;
    }
  }
  return out;
}

}  // namespace fairsched::testing
