#include "daemon/fleet/redis_connection.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fairsched::fleet {
namespace {

std::string sslErrors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

// A BIO over our socket that never raises SIGPIPE (send with MSG_NOSIGNAL).
int bioWrite(BIO* b, const char* data, int len) {
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b)));
  const ssize_t n = ::send(fd, data, static_cast<std::size_t>(len), MSG_NOSIGNAL);
  return n < 0 ? -1 : static_cast<int>(n);
}

int bioRead(BIO* b, char* data, int len) {
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(BIO_get_data(b)));
  ssize_t n;
  do {
    n = ::recv(fd, data, static_cast<std::size_t>(len), 0);
  } while (n < 0 && errno == EINTR);
  return n < 0 ? -1 : static_cast<int>(n);
}

long bioCtrl(BIO*, int cmd, long, void*) {
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

BIO_METHOD* socketMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "fairsched-socket");
    BIO_meth_set_write(m, bioWrite);
    BIO_meth_set_read(m, bioRead);
    BIO_meth_set_ctrl(m, bioCtrl);
    return m;
  }();
  return method;
}

bool isIpLiteral(const std::string& host) {
  in6_addr a6{};
  in_addr a4{};
  return inet_pton(AF_INET, host.c_str(), &a4) == 1 || inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

// A connected socket (blocking again), or why not.
std::variant<int, std::string> connectSocket(const config::RedisAddress& a,
                                             std::chrono::milliseconds timeout) {
  auto tryOne = [&](const sockaddr* sa, socklen_t len,
                    int family) -> std::variant<int, std::string> {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return std::string("socket: ") + std::strerror(errno);
    int rc = ::connect(fd, sa, len);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
      if (rc == 0) {
        ::close(fd);
        return "no connection within " + std::to_string(timeout.count()) + " ms";
      }
      int err = 0;
      socklen_t errLen = sizeof err;
      if (rc > 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &errLen);
      if (rc < 0) err = errno;
      if (err != 0) {
        ::close(fd);
        return std::string(std::strerror(err));
      }
      rc = 0;
    }
    if (rc < 0) {
      const int err = errno;
      ::close(fd);
      return std::string(std::strerror(err));
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    if (family != AF_UNIX) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
  };

  if (!a.unix_path.empty()) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, a.unix_path.c_str(), sizeof sa.sun_path - 1);
    return tryOne(reinterpret_cast<const sockaddr*>(&sa), sizeof sa, AF_UNIX);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(a.port);
  if (const int rc = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return std::string("cannot resolve: ") + gai_strerror(rc);
  }
  std::variant<int, std::string> result = std::string("no address");
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    result = tryOne(ai->ai_addr, ai->ai_addrlen, ai->ai_family);
    if (std::holds_alternative<int>(result)) break;
  }
  ::freeaddrinfo(found);
  return result;
}

// The reply object functions of newReplyReader(): hiredis's own, but for
// the bound on arrays. The objects are hiredis's (calloc/malloc), so
// freeReplyObject frees them.
redisReply* newReply(const redisReadTask* task, int type) {
  auto* r = static_cast<redisReply*>(std::calloc(1, sizeof(redisReply)));
  if (r == nullptr) return nullptr;
  r->type = type;
  if (task->parent != nullptr) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    parent->element[task->idx] = r;
  }
  return r;
}

void* createString(const redisReadTask* task, char* str, std::size_t len) {
  char* copy = static_cast<char*>(std::malloc(len + 1));
  if (copy == nullptr) return nullptr;
  std::memcpy(copy, str, len);
  copy[len] = '\0';
  redisReply* r = newReply(task, task->type);
  if (r == nullptr) {
    std::free(copy);
    return nullptr;
  }
  r->str = copy;
  r->len = len;
  return r;
}

void* createArray(const redisReadTask* task, int elements) {
  if (elements < 0 || elements > kMaxReplyElements) return nullptr;  // the reader reports it
  redisReply** slots = nullptr;
  if (elements > 0) {
    slots = static_cast<redisReply**>(
        std::calloc(static_cast<std::size_t>(elements), sizeof(redisReply*)));
    if (slots == nullptr) return nullptr;
  }
  redisReply* r = newReply(task, REDIS_REPLY_ARRAY);
  if (r == nullptr) {
    std::free(slots);
    return nullptr;
  }
  r->element = slots;
  r->elements = static_cast<std::size_t>(elements);
  return r;
}

void* createInteger(const redisReadTask* task, long long value) {
  redisReply* r = newReply(task, REDIS_REPLY_INTEGER);
  if (r != nullptr) r->integer = value;
  return r;
}

void* createNil(const redisReadTask* task) {
  return newReply(task, REDIS_REPLY_NIL);
}

void freeObject(void* reply) {
  freeReplyObject(reply);
}

redisReplyObjectFunctions kBoundedReplies = {createString, createArray, createInteger, createNil,
                                             freeObject};

}  // namespace

redisReader* newReplyReader() {
  return redisReaderCreateWithFunctions(&kBoundedReplies);
}

void RedisReplyDeleter::operator()(redisReply* r) const {
  if (r != nullptr) freeReplyObject(r);
}

std::string_view errorText(const redisReply& r) {
  return r.type == REDIS_REPLY_ERROR ? std::string_view(r.str, r.len) : std::string_view();
}

bool isAuthError(std::string_view error) {
  return error.starts_with("WRONGPASS") || error.starts_with("NOAUTH") ||
         error.starts_with("NOPERM") || error.starts_with("ERR invalid password") ||
         error.starts_with("ERR AUTH");
}

// --- TlsContext ---------------------------------------------------------------

std::variant<std::shared_ptr<TlsContext>, std::string> TlsContext::make(
    const config::FleetTlsConfig& options) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return "cannot make a TLS context: " + sslErrors();
  std::shared_ptr<TlsContext> out(new TlsContext(ctx, options));
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  const bool trusted = options.ca_file.empty() ? SSL_CTX_set_default_verify_paths(ctx) == 1
                                               : SSL_CTX_load_verify_locations(
                                                     ctx, options.ca_file.c_str(), nullptr) == 1;
  if (!trusted) {
    return "cannot load the trusted CAs" +
           (options.ca_file.empty() ? std::string(" (system store)")
                                    : " from \"" + options.ca_file + "\"") +
           ": " + sslErrors();
  }
  if (!options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, options.cert_file.c_str()) != 1) {
      return "cannot load the client certificate \"" + options.cert_file + "\": " + sslErrors();
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return "cannot load the client key \"" + options.key_file + "\": " + sslErrors();
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      return "the client key does not match its certificate: " + sslErrors();
    }
  }
  SSL_CTX_set_verify(ctx, options.insecure_skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                     nullptr);
  return out;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(ctx_);
}

// --- RedisConnection ----------------------------------------------------------

RedisConnection::RedisConnection(config::RedisAddress address, int fd,
                                 std::chrono::milliseconds timeout)
    : address_(std::move(address)), fd_(fd), reader_(newReplyReader()), timeout_(timeout) {
  setTimeout(timeout);
}

RedisConnection::~RedisConnection() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // no close_notify: the socket may be dead
  if (reader_ != nullptr) redisReaderFree(reader_);
  if (fd_ >= 0) ::close(fd_);
}

void RedisConnection::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

std::variant<std::unique_ptr<RedisConnection>, BackendFailure> RedisConnection::open(
    const config::RedisAddress& address, const ConnectOptions& options) {
  auto fd = connectSocket(address, options.connect_timeout);
  if (auto* error = std::get_if<std::string>(&fd)) {
    return BackendFailure{BackendError::kConnect, address.str() + ": " + *error};
  }
  std::unique_ptr<RedisConnection> c(
      new RedisConnection(address, std::get<int>(fd), options.connect_timeout));
  if (c->reader_ == nullptr) return BackendFailure{BackendError::kConnect, "out of memory"};
  if (options.tls) {
    if (auto failed = c->startTls(options)) return *failed;
  }
  c->setTimeout(options.command_timeout);
  if (auto failed = c->authenticate(options)) return *failed;
  return c;
}

std::optional<BackendFailure> RedisConnection::startTls(const ConnectOptions& options) {
  const config::FleetTlsConfig& o = options.tls->options();
  ERR_clear_error();
  ssl_ = SSL_new(options.tls->get());
  BIO* bio = ssl_ != nullptr ? BIO_new(socketMethod()) : nullptr;
  if (bio == nullptr) return BackendFailure{BackendError::kTls, "cannot start TLS: " + sslErrors()};
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd_)));
  BIO_set_init(bio, 1);
  SSL_set_bio(ssl_, bio, bio);
  const std::string& name = o.server_name.empty() ? address_.host : o.server_name;
  if (!name.empty() && !isIpLiteral(name)) SSL_set_tlsext_host_name(ssl_, name.c_str());
  if (!o.insecure_skip_verify && !name.empty()) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_);
    const int ok = isIpLiteral(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                                     : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    if (ok != 1) return BackendFailure{BackendError::kTls, "cannot verify the name " + name};
  }
  if (SSL_connect(ssl_) != 1) {
    const long verify = SSL_get_verify_result(ssl_);
    std::string why = verify != X509_V_OK ? std::string("certificate verify failed: ") +
                                                X509_verify_cert_error_string(verify)
                                          : sslErrors();
    if (why.empty()) why = errno != 0 ? std::strerror(errno) : "the server closed the connection";
    return BackendFailure{BackendError::kTls, "TLS with " + address_.str() + ": " + why};
  }
  return std::nullopt;
}

std::optional<BackendFailure> RedisConnection::authenticate(const ConnectOptions& options) {
  std::vector<RedisCommand> hello;
  std::string password = options.auth.password;
  if (password.empty() && !options.auth.password_file.empty()) {
    password = config::readSecretFile(options.auth.password_file);
    if (password.empty()) {
      return BackendFailure{BackendError::kAuth,
                            "cannot read the password file \"" + options.auth.password_file + "\""};
    }
  }
  if (!password.empty()) {
    if (options.auth.user.empty()) {
      hello.push_back({"AUTH", std::move(password)});
    } else {
      hello.push_back({"AUTH", options.auth.user, std::move(password)});
    }
  }
  if (options.db != 0) hello.push_back({"SELECT", std::to_string(options.db)});
  if (hello.empty()) return std::nullopt;
  auto replies = pipeline(hello);
  if (auto* failed = std::get_if<BackendFailure>(&replies)) return *failed;
  for (std::size_t i = 0; i < hello.size(); ++i) {
    const redisReply& r = *std::get<std::vector<RedisReply>>(replies)[i];
    if (r.type != REDIS_REPLY_ERROR) continue;
    const bool auth = hello[i][0] == "AUTH";
    return BackendFailure{auth ? BackendError::kAuth : BackendError::kReply,
                          address_.str() + (auth ? " refused AUTH" : " refused SELECT") +
                              (options.auth.user.empty() ? "" : " as user " + options.auth.user) +
                              ": " + std::string(errorText(r))};
  }
  return std::nullopt;
}

BackendFailure RedisConnection::ioFailure(const char* what, int err) const {
  if (err == EAGAIN || err == EWOULDBLOCK) {
    return {BackendError::kIo,
            address_.str() + ": no reply within " + std::to_string(timeout_.count()) + " ms"};
  }
  return {BackendError::kIo, address_.str() + ": " + what + ": " +
                                 (err != 0 ? std::strerror(err) : "connection closed")};
}

std::optional<BackendFailure> RedisConnection::writeAll(const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    errno = 0;
    ssize_t n;
    if (ssl_ != nullptr) {
      n = SSL_write(ssl_, bytes.data() + done, static_cast<int>(bytes.size() - done));
      if (n <= 0) return ioFailure("write", errno);
    } else {
      n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ioFailure("write", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  return std::nullopt;
}

std::variant<RedisReply, BackendFailure> RedisConnection::readReply() {
  char buf[16 * 1024];
  for (;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
      return BackendFailure{BackendError::kIo,
                            address_.str() + ": protocol error: " + std::string(reader_->errstr)};
    }
    if (reply != nullptr) return RedisReply(static_cast<redisReply*>(reply));
    if (reader_->len - reader_->pos > kMaxReplyBytes) {
      return BackendFailure{BackendError::kIo, address_.str() + ": a reply over " +
                                                   std::to_string(kMaxReplyBytes >> 20) + " MiB"};
    }
    errno = 0;
    ssize_t n;
    if (ssl_ != nullptr) {
      n = SSL_read(ssl_, buf, sizeof buf);
      if (n <= 0) return ioFailure("read", errno);
    } else {
      n = ::recv(fd_, buf, sizeof buf, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ioFailure("read", n == 0 ? 0 : errno);
    }
    redisReaderFeed(reader_, buf, static_cast<std::size_t>(n));
  }
}

std::optional<BackendFailure> RedisConnection::send(std::span<const RedisCommand> commands) {
  std::string out;
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const RedisCommand& c : commands) {
    argv.clear();
    lens.clear();
    for (const std::string& word : c) {
      argv.push_back(word.data());
      lens.push_back(word.size());
    }
    char* formatted = nullptr;
    const int len =
        redisFormatCommandArgv(&formatted, static_cast<int>(argv.size()), argv.data(), lens.data());
    if (len < 0) return BackendFailure{BackendError::kIo, "cannot encode a command"};
    out.append(formatted, static_cast<std::size_t>(len));
    redisFreeCommand(formatted);
  }
  round_trips_++;
  return writeAll(out);
}

std::variant<std::vector<RedisReply>, BackendFailure> RedisConnection::receive(std::size_t count) {
  std::vector<RedisReply> replies;
  replies.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    auto r = readReply();
    if (auto* failed = std::get_if<BackendFailure>(&r)) return *failed;
    replies.push_back(std::get<RedisReply>(std::move(r)));
  }
  return replies;
}

std::variant<std::vector<RedisReply>, BackendFailure> RedisConnection::pipeline(
    std::span<const RedisCommand> commands) {
  if (auto failed = send(commands)) return *failed;
  return receive(commands.size());
}

std::variant<RedisReply, BackendFailure> RedisConnection::command(const RedisCommand& c) {
  auto r = pipeline(std::span<const RedisCommand>(&c, 1));
  if (auto* failed = std::get_if<BackendFailure>(&r)) return *failed;
  return std::move(std::get<std::vector<RedisReply>>(r).front());
}

}  // namespace fairsched::fleet
