// libFuzzer target: the control-message decoder on arbitrary bytes, as the
// daemon receives them from an untrusted socket. Every decode must either
// fail cleanly or yield a message whose strings are NUL-terminated within
// their arrays and whose counts are in range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
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
  HelloReplyMessage reply;
  if (decode(bytes, reply) == DecodeError::kNone) {
    if (reply.endpoint_count > kMaxEndpointsInReply) std::abort();
    for (std::uint32_t i = 0; i < reply.endpoint_count; ++i) {
      if (!getString(reply.endpoints[i].name)) std::abort();
    }
  }
  return 0;
}
