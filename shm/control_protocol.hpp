// The control protocol on the daemon's unix socket (SOCK_SEQPACKET: one
// message per datagram, reliable, in order, with a connection).
//
//   client                                  daemon
//   connect ───────────────────────────────▶ SO_PEERCRED → client rule (or refuse)
//   Hello{layout version, name} ───────────▶
//          ◀─── HelloReply{status, geometry, endpoints} + SCM_RIGHTS[segment memfd,
//                                            daemon doorbell eventfd, completion eventfd]
//   OpenTenant{tenant, tier hint, handle} ─▶ authorise, acquire the tenant under
//          ◀─── OpenTenantReply{status, handle}   the handle the client chose
//   ... submissions (each naming a handle) through the lanes, completions
//       through the completion ring ...
//   CloseTenant{handle} ───────────────────▶ its queued requests end CANCELLED
//          ◀─── CloseTenantReply{status, cancelled}
//   close (or die) ────────────────────────▶ queued requests cancelled, segment released
//
// A client may send several OpenTenant/CloseTenant messages before reading
// their replies (they come in order, each echoing its seq); the library
// keeps a bounded window of them in flight.
//
// An engine attaches the same way with Hello{role = worker, endpoint}; its
// segment carries an event ring and an assignment ring instead
// (shm/worker_protocol.hpp), and it opens no tenants.
//
// An operator's tool (fairschedctl) uses the same socket without a Hello:
//   AdminRequest{command} ─────────────────▶ SO_PEERCRED → a rule with admin = true
//          ◀─── AdminReply{status, more, JSON text} × n   (the text split over
//               as many replies as it needs; the last has more = 0)
//
// Every message is a fixed-size record that starts with a MessageHeader.
// Strings are fixed arrays, NUL-padded; a string that fills its array without
// a NUL is rejected. decode() checks everything — magic, version, type,
// length, strings — before the daemon looks at a field: the socket is as
// untrusted as shared memory. Plain functions, no I/O: the daemon and the
// client library do the sending.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace fairsched::shm {

inline constexpr std::uint32_t kControlMagic = 0x46534350;  // "FSCP"
// Version 3 goes with shared-memory layout 3 (tenant handles in the cells,
// CloseTenant). The daemon still decodes a version-2 Hello (the record did
// not change) to refuse it with VERSION_MISMATCH naming both versions.
inline constexpr std::uint16_t kControlVersion = 3;
inline constexpr std::uint16_t kOldestControlVersion = 2;
inline constexpr std::size_t kNameBytes = 64;  // tenant, client and tier names
inline constexpr std::size_t kEndpointNameBytes = 32;
inline constexpr std::size_t kMessageTextBytes = 192;  // human-readable reasons
inline constexpr std::size_t kMaxEndpointsInReply = 16;
// A successful HelloReply carries three descriptors, in this order.
inline constexpr int kHelloReplyFds = 3;
inline constexpr int kFdSegment = 0;         // the sealed memfd (shm::Segment::attach)
inline constexpr int kFdDaemonDoorbell = 1;  // eventfd the client writes to wake a sleeping daemon
inline constexpr int kFdCompletionBell = 2;  // eventfd the daemon writes to wake a sleeping client

enum class MessageType : std::uint16_t {
  kHello = 1,
  kHelloReply = 2,
  kOpenTenant = 3,
  kOpenTenantReply = 4,
  kAdminRequest = 5,
  kAdminReply = 6,
  kCloseTenant = 7,
  kCloseTenantReply = 8,
};

// What fairschedctl asks for. Every reply is JSON (docs/operations.md shows
// each shape); a refusal or failure carries {"error": "..."}.
enum class AdminCommand : std::uint32_t {
  kStatus = 1,   // daemon-wide counters, clients, queues, the config in use
  kTenants = 2,  // per tenant and endpoint: policy, queue, share, counters, limit usage
  kReload = 3,   // re-read the config file and apply it (as SIGHUP does)
  kDrain = 4,    // stop admitting; finish what is queued and running; keep serving admin
  kResume = 5,   // undo a drain
};
inline constexpr std::uint32_t kMaxAdminCommand = 5;
inline constexpr std::size_t kAdminPayloadBytes = 16384;

// Outcome of a control request; the per-request statuses of submissions are
// separate (fairsched::Status).
enum class ControlStatus : std::uint32_t {
  kOk = 0,
  kUnauthorized = 1,     // no client rule admits this peer, tenant, endpoint or tier
  kBadRequest = 2,       // malformed or out-of-order message
  kVersionMismatch = 3,  // protocol or shared-memory layout version differs
  kNoCapacity = 4,       // the handle is beyond the connection's max_tenants_per_connection
  kShuttingDown = 5,
  kInternal = 6,  // the daemon could not create the segment or eventfds
  kFailed = 7,    // an admin command failed; the reply's text says why
};

constexpr std::string_view toString(ControlStatus s) {
  switch (s) {
    case ControlStatus::kOk:
      return "OK";
    case ControlStatus::kUnauthorized:
      return "UNAUTHORIZED";
    case ControlStatus::kBadRequest:
      return "BAD_REQUEST";
    case ControlStatus::kVersionMismatch:
      return "VERSION_MISMATCH";
    case ControlStatus::kNoCapacity:
      return "NO_CAPACITY";
    case ControlStatus::kShuttingDown:
      return "SHUTTING_DOWN";
    case ControlStatus::kInternal:
      return "INTERNAL";
    case ControlStatus::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

struct MessageHeader {
  std::uint32_t magic = kControlMagic;
  std::uint16_t version = kControlVersion;
  std::uint16_t type = 0;    // a MessageType
  std::uint32_t length = 0;  // bytes of the whole message
  std::uint32_t seq = 0;     // chosen by the client, echoed in the reply
};

struct HelloMessage {
  MessageHeader header;
  std::uint32_t layout_version = 0;  // shm::kLayoutVersion of the client's build
  std::uint32_t pid = 0;             // informational; the daemon trusts SO_PEERCRED
  char client_name[kNameBytes] = {};
  // 0: a client (submits requests); 1: a worker of `endpoint` (runs them,
  // shm/worker_protocol.hpp). The reply's segment is laid out for the role.
  std::uint32_t role = 0;
  std::uint32_t reserved = 0;
  char endpoint[kEndpointNameBytes] = {};  // role 1: the endpoint it serves
};

struct EndpointInfo {
  char name[kEndpointNameBytes] = {};
  std::uint16_t id = 0;
  std::uint16_t reserved = 0;
  std::uint32_t max_output_tokens = 0;
  std::uint32_t max_batch_tokens = 0;  // input + max output of one request may not exceed it
  std::uint32_t reserved2 = 0;
};

struct HelloReplyMessage {
  MessageHeader header;
  std::uint32_t status = 0;  // a ControlStatus
  std::uint32_t endpoint_count = 0;
  std::uint64_t client_id = 0;
  std::uint32_t ring_count = 0;   // submission rings (lanes) in the segment
  std::uint32_t max_tenants = 0;  // tenants this connection may hold open (handle slots)
  char message[kMessageTextBytes] = {};
  EndpointInfo endpoints[kMaxEndpointsInReply] = {};
};

struct OpenTenantMessage {
  MessageHeader header;
  char tenant[kNameBytes] = {};
  char tier[kNameBytes] = {};  // empty: no hint
  std::uint32_t handle = 0;    // chosen by the client (shm/tenant_handle.hpp)
  std::uint32_t reserved = 0;
};

struct OpenTenantReplyMessage {
  MessageHeader header;
  std::uint32_t status = 0;  // a ControlStatus
  std::uint32_t handle = 0;  // the request's handle, echoed
  char message[kMessageTextBytes] = {};
};

struct CloseTenantMessage {
  MessageHeader header;
  std::uint32_t handle = 0;  // an open handle of this connection
  std::uint32_t reserved = 0;
};

struct CloseTenantReplyMessage {
  MessageHeader header;
  std::uint32_t status = 0;     // a ControlStatus
  std::uint32_t cancelled = 0;  // queued requests that ended CANCELLED
  char message[kMessageTextBytes] = {};
};

struct AdminRequestMessage {
  MessageHeader header;
  std::uint32_t command = 0;     // an AdminCommand
  std::uint32_t limit = 0;       // kTenants: at most this many rows, busiest first; 0 = all
  char tenant[kNameBytes] = {};  // kTenants: only this tenant's rows; empty = every tenant
};

struct AdminReplyMessage {
  MessageHeader header;
  std::uint32_t status = 0;  // a ControlStatus
  std::uint32_t more = 0;    // 1: the text continues in the next reply
  std::uint32_t bytes = 0;   // of `text` used (no NUL)
  std::uint32_t reserved = 0;
  char text[kAdminPayloadBytes] = {};
};

template <class M>
constexpr MessageType typeOf();
template <>
constexpr MessageType typeOf<HelloMessage>() {
  return MessageType::kHello;
}
template <>
constexpr MessageType typeOf<HelloReplyMessage>() {
  return MessageType::kHelloReply;
}
template <>
constexpr MessageType typeOf<OpenTenantMessage>() {
  return MessageType::kOpenTenant;
}
template <>
constexpr MessageType typeOf<OpenTenantReplyMessage>() {
  return MessageType::kOpenTenantReply;
}

template <>
constexpr MessageType typeOf<CloseTenantMessage>() {
  return MessageType::kCloseTenant;
}
template <>
constexpr MessageType typeOf<CloseTenantReplyMessage>() {
  return MessageType::kCloseTenantReply;
}
template <>
constexpr MessageType typeOf<AdminRequestMessage>() {
  return MessageType::kAdminRequest;
}
template <>
constexpr MessageType typeOf<AdminReplyMessage>() {
  return MessageType::kAdminReply;
}

// A message of type M, header filled in.
template <class M>
M makeMessage(std::uint32_t seq) {
  static_assert(std::is_trivially_copyable_v<M>);
  M m{};
  m.header.type = static_cast<std::uint16_t>(typeOf<M>());
  m.header.length = sizeof(M);
  m.header.seq = seq;
  return m;
}

// Copies `s` into a fixed array, truncated to leave room for the NUL.
template <std::size_t N>
void setString(char (&dst)[N], std::string_view s) {
  const std::size_t n = std::min(s.size(), N - 1);
  if (n > 0) std::memcpy(dst, s.data(), n);  // an empty view's data() may be null
  std::memset(dst + n, 0, N - n);
}

// The string in a fixed array; nullopt when it has no NUL (malformed).
template <std::size_t N>
std::optional<std::string_view> getString(const char (&src)[N]) {
  const void* nul = std::memchr(src, 0, N);
  if (!nul) return std::nullopt;
  return std::string_view(src, static_cast<std::size_t>(static_cast<const char*>(nul) - src));
}

enum class DecodeError : std::uint8_t {
  kNone,
  kTooShort,  // fewer bytes than a header
  kBadMagic,
  kBadVersion,
  kWrongType,  // a valid message, but not the one expected here
  kBadLength,  // header.length differs from the bytes received or the type's size
  kBadString,  // a string field without its NUL, or a count/enum field out of range
};

constexpr std::string_view toString(DecodeError e) {
  switch (e) {
    case DecodeError::kNone:
      return "ok";
    case DecodeError::kTooShort:
      return "message shorter than its header";
    case DecodeError::kBadMagic:
      return "bad magic";
    case DecodeError::kBadVersion:
      return "unsupported protocol version";
    case DecodeError::kWrongType:
      return "unexpected message type";
    case DecodeError::kBadLength:
      return "message length does not match its type";
    case DecodeError::kBadString:
      return "a string field without its NUL, or a field out of range";
  }
  return "?";
}

// The header of a received message, checked for magic and version (between
// `oldest` and kControlVersion); the length is checked against `bytes.size()`.
inline DecodeError peekHeader(std::span<const std::byte> bytes, MessageHeader& out,
                              std::uint16_t oldest = kControlVersion) {
  if (bytes.size() < sizeof(MessageHeader)) return DecodeError::kTooShort;
  std::memcpy(&out, bytes.data(), sizeof out);
  if (out.magic != kControlMagic) return DecodeError::kBadMagic;
  if (out.version < oldest || out.version > kControlVersion) return DecodeError::kBadVersion;
  if (out.length != bytes.size()) return DecodeError::kBadLength;
  return DecodeError::kNone;
}

namespace detail {
inline bool stringsOk(const HelloMessage& m) {
  return getString(m.client_name).has_value() && getString(m.endpoint).has_value() && m.role <= 1 &&
         m.reserved == 0;
}
inline bool stringsOk(const HelloReplyMessage& m) {
  if (!getString(m.message)) return false;
  if (m.endpoint_count > kMaxEndpointsInReply) return false;
  for (std::uint32_t i = 0; i < m.endpoint_count; ++i) {
    if (!getString(m.endpoints[i].name)) return false;
  }
  return true;
}
inline bool stringsOk(const OpenTenantMessage& m) {
  return getString(m.tenant).has_value() && getString(m.tier).has_value() && m.reserved == 0;
}
inline bool stringsOk(const OpenTenantReplyMessage& m) {
  return getString(m.message).has_value();
}
inline bool stringsOk(const CloseTenantMessage& m) {
  return m.reserved == 0;
}
inline bool stringsOk(const CloseTenantReplyMessage& m) {
  return getString(m.message).has_value();
}
inline bool stringsOk(const AdminRequestMessage& m) {
  return m.command >= 1 && m.command <= kMaxAdminCommand && getString(m.tenant).has_value();
}
inline bool stringsOk(const AdminReplyMessage& m) {
  return m.bytes <= kAdminPayloadBytes && m.more <= 1;
}
}  // namespace detail

// Decodes `bytes` as a message of type M: header, type, exact length and every
// string (and count) checked. Safe on arbitrary bytes. `oldest`: the oldest
// protocol version accepted (only a Hello is decoded from an older peer).
template <class M>
DecodeError decode(std::span<const std::byte> bytes, M& out,
                   std::uint16_t oldest = kControlVersion) {
  MessageHeader h;
  if (const DecodeError e = peekHeader(bytes, h, oldest); e != DecodeError::kNone) return e;
  if (h.type != static_cast<std::uint16_t>(typeOf<M>())) return DecodeError::kWrongType;
  if (h.length != sizeof(M)) return DecodeError::kBadLength;
  std::memcpy(&out, bytes.data(), sizeof(M));
  return detail::stringsOk(out) ? DecodeError::kNone : DecodeError::kBadString;
}

template <class M>
std::span<const std::byte> bytesOf(const M& m) {
  return {reinterpret_cast<const std::byte*>(&m), sizeof(M)};
}

}  // namespace fairsched::shm
