// One blocking connection to one Redis server, plain or TLS, authenticated:
// the transport under RedisBackend, whatever the topology.
//
// Why our own socket and not hiredis's: Debian 12's hiredis (0.14) has no
// TLS, and Cluster and Sentinel need several connections with the same
// authentication and timeouts anyway. hiredis still does what it is good at:
// the RESP encoding of commands and the reply parser. TLS is OpenSSL, over a
// BIO that sends with MSG_NOSIGNAL so a peer that went away is an error, not a
// SIGPIPE in whatever process links this.
//
// Every call blocks for at most its timeout; all of them are made from
// FleetLimiter's one background thread (or a benchmark's driver).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/fleet/lease_backend.hpp"

struct redisReply;
struct redisReader;
struct ssl_st;
struct ssl_ctx_st;

namespace fairsched::fleet {

struct RedisReplyDeleter {
  void operator()(redisReply* r) const;
};
using RedisReply = std::unique_ptr<redisReply, RedisReplyDeleter>;

// A command: its words, the first being the command's name.
using RedisCommand = std::vector<std::string>;

// The client side of TLS, built once from [fleet]'s settings and shared by
// every connection: the trust store (a CA file or the system's), the client
// certificate for mutual TLS, and whether to verify at all.
class TlsContext {
 public:
  // The context, or why it cannot be made (a CA or key file OpenSSL cannot
  // read, a key that does not match its certificate).
  static std::variant<std::shared_ptr<TlsContext>, std::string> make(
      const config::FleetTlsConfig& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  ssl_ctx_st* get() const { return ctx_; }
  const config::FleetTlsConfig& options() const { return options_; }

 private:
  TlsContext(ssl_ctx_st* ctx, config::FleetTlsConfig options)
      : ctx_(ctx), options_(std::move(options)) {}
  ssl_ctx_st* ctx_;
  config::FleetTlsConfig options_;
};

struct ConnectOptions {
  std::chrono::milliseconds connect_timeout{100};  // TCP connect and the TLS handshake
  std::chrono::milliseconds command_timeout{50};   // each command's reply
  std::shared_ptr<TlsContext> tls;                 // null: plain
  config::RedisAuthConfig auth;                    // AUTH when a password is set
  std::uint32_t db = 0;                            // SELECT when not 0
};

class RedisConnection {
 public:
  // Connected, TLS established, AUTH and SELECT done; or why not: kConnect,
  // kTls (handshake or certificate verification), kAuth (AUTH refused).
  static std::variant<std::unique_ptr<RedisConnection>, BackendFailure> open(
      const config::RedisAddress& address, const ConnectOptions& options);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // The commands written at once and their replies read in order: one round
  // trip. Error replies are replies; a failure (kIo) means the connection is
  // no longer usable.
  std::variant<std::vector<RedisReply>, BackendFailure> pipeline(
      std::span<const RedisCommand> commands);
  std::variant<RedisReply, BackendFailure> command(const RedisCommand& command);
  // pipeline() in two halves, so one thread can have commands in flight on
  // several connections at once: send, then (after sending elsewhere)
  // receive the `count` replies.
  std::optional<BackendFailure> send(std::span<const RedisCommand> commands);
  std::variant<std::vector<RedisReply>, BackendFailure> receive(std::size_t count);

  const config::RedisAddress& address() const { return address_; }
  std::uint64_t roundTrips() const { return round_trips_; }

 private:
  RedisConnection(config::RedisAddress address, int fd, std::chrono::milliseconds timeout);
  std::optional<BackendFailure> startTls(const ConnectOptions& options);
  std::optional<BackendFailure> authenticate(const ConnectOptions& options);
  std::optional<BackendFailure> writeAll(const std::string& bytes);
  std::variant<RedisReply, BackendFailure> readReply();
  BackendFailure ioFailure(const char* what, int err) const;
  void setTimeout(std::chrono::milliseconds timeout);

  config::RedisAddress address_;
  int fd_ = -1;
  ssl_st* ssl_ = nullptr;
  redisReader* reader_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::uint64_t round_trips_ = 0;
};

// A RESP reader (hiredis's parser) that builds redisReply objects as hiredis
// does but refuses an array of more than kMaxReplyElements: hiredis 0.14
// allocates a declared array whole before its elements arrive, so one
// "*400000000" from a broken server would cost gigabytes. Free with
// redisReaderFree; replies with freeReplyObject (RedisReply).
inline constexpr int kMaxReplyElements = 1 << 20;
redisReader* newReplyReader();
// The most a reply may fill the reader's buffer with before it is complete.
inline constexpr std::size_t kMaxReplyBytes = std::size_t{64} << 20;

// The error reply's text ("" for a reply that is not an error).
std::string_view errorText(const redisReply& r);
// AUTH and ACL refusals (WRONGPASS, NOAUTH, NOPERM): a setting to fix, not an outage.
bool isAuthError(std::string_view error);

}  // namespace fairsched::fleet
