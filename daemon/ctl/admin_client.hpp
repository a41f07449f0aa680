// The operator's side of the control socket: one admin command, its JSON
// reply (reassembled from as many AdminReply records as it took). Used by
// fairschedctl and by the tests. Blocking, with a timeout.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "daemon/error.hpp"
#include "shm/control_protocol.hpp"

namespace fairsched::daemon {

struct AdminResponse {
  shm::ControlStatus status = shm::ControlStatus::kInternal;
  std::string json;  // {"error": ...} when status is not OK
};

// Connects to `socket_path`, sends `command` and waits up to `timeout` for
// the whole reply. The error is why there is no reply: kInvalidArgument (path
// or tenant name too long), kSystem (cannot connect, send or receive),
// kTimedOut, kProtocol (malformed reply, or the daemon hung up first).
Result<AdminResponse> adminCommand(const std::string& socket_path, shm::AdminCommand command,
                                   std::uint32_t limit = 0,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(10),
                                   std::string_view tenant = {});

}  // namespace fairsched::daemon
