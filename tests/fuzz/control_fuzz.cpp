// libFuzzer target: the control-message decoder on arbitrary bytes, as the
// daemon receives them from an untrusted socket. Every decode must either
// fail cleanly or yield a message whose strings are NUL-terminated within
// their arrays and whose counts and commands are in range (fairschedctl's
// admin requests and replies included).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "shm/control_protocol.hpp"

namespace {

using namespace fairsched::shm;

template <class M>
void tryDecode(std::span<const std::byte> bytes) {
  M m;
  if (decode(bytes, m) != DecodeError::kNone) return;
  if (m.header.length != sizeof(M)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  MessageHeader h;
  (void)peekHeader(bytes, h);
  tryDecode<HelloMessage>(bytes);
  tryDecode<OpenTenantMessage>(bytes);
  tryDecode<OpenTenantReplyMessage>(bytes);
  tryDecode<CloseTenantReplyMessage>(bytes);
  CloseTenantMessage close;
  if (decode(bytes, close) == DecodeError::kNone && close.reserved != 0) std::abort();
  HelloMessage old_hello;  // the daemon decodes a Hello of an older version too
  if (decode(bytes, old_hello, kOldestControlVersion) == DecodeError::kNone &&
      (old_hello.header.version < kOldestControlVersion ||
       old_hello.header.version > kControlVersion)) {
    std::abort();
  }
  AdminRequestMessage admin;
  if (decode(bytes, admin) == DecodeError::kNone &&
      (admin.command < 1 || admin.command > kMaxAdminCommand)) {
    std::abort();
  }
  auto admin_reply = std::make_unique<AdminReplyMessage>();
  if (decode(bytes, *admin_reply) == DecodeError::kNone &&
      (admin_reply->bytes > kAdminPayloadBytes || admin_reply->more > 1)) {
    std::abort();
  }
  HelloReplyMessage reply;
  if (decode(bytes, reply) == DecodeError::kNone) {
    if (reply.endpoint_count > kMaxEndpointsInReply) std::abort();
    for (std::uint32_t i = 0; i < reply.endpoint_count; ++i) {
      if (!getString(reply.endpoints[i].name)) std::abort();
    }
  }
  return 0;
}
