#include "gateway/error_reply.hpp"

namespace fairsched::gateway {

namespace {

ErrorReply reply(int status, std::string type, std::string code, std::string message) {
  ErrorReply r;
  r.status = status;
  r.type = std::move(type);
  r.code = std::move(code);
  r.message = std::move(message);
  return r;
}

}  // namespace

ErrorReply errorForCompletion(const Completion& c) {
  const HttpAnswer a = toHttpStatus(c);
  ErrorReply r;
  r.status = a.status;
  r.headers = a.headers;
  switch (c.status) {
    case Status::kRateLimited:
      r.type = "rate_limit_error";
      r.code = "rate_limit_exceeded";
      r.message =
          "rate limit reached for this tenant; retry after " + retryAfterMs(c.retry_after) + " ms";
      break;
    case Status::kOverloaded:
      r.type = "server_error";
      r.code = "overloaded";
      r.message = "the scheduler's backlog cannot meet this endpoint's latency target";
      break;
    case Status::kQueueFull:
      r.type = "server_error";
      r.code = "queue_full";
      r.message = "this tenant's queue is full";
      break;
    case Status::kDeadlineExceeded:
      r.type = "server_error";
      r.code = "deadline_exceeded";
      r.message = "the request's deadline passed before it could run";
      break;
    case Status::kInvalid:
      r.type = "invalid_request_error";
      r.code = "invalid_request";
      r.message = "the scheduler refused the request (prompt + max_tokens too large?)";
      break;
    case Status::kUnauthorized:
      r.type = "permission_error";
      r.code = "tenant_not_allowed";
      r.message = "the gateway may not submit for this tenant or endpoint";
      break;
    case Status::kCancelled:
    case Status::kSlowConsumer:
      r.type = "server_error";
      r.code = "cancelled";
      r.message = "the request was cancelled";
      break;
    case Status::kShuttingDown:
      r.type = "server_error";
      r.code = "shutting_down";
      r.message = "the scheduler is shutting down or draining";
      break;
    case Status::kExecutorFailed:
      r.type = "server_error";
      r.code = "upstream_failed";
      r.message = "the upstream failed the request";
      break;
    case Status::kOk:
      r.type = "server_error";
      r.code = "internal_error";
      r.message = "the request ended without a response";
      r.status = 500;
      break;
  }
  return r;
}

ErrorReply errorForSubmit(const Error& e) {
  const HttpAnswer a = toHttpStatus(e);
  ErrorReply r = reply(a.status,
                       a.status == 403   ? "permission_error"
                       : a.status == 400 ? "invalid_request_error"
                                         : "server_error",
                       "scheduler_" + std::string(toString(e.code)), e.toString());
  if (a.status == 503) r.headers.push_back({"retry-after", "1"});
  return r;
}

ErrorReply missingKey() {
  return reply(401, "authentication_error", "missing_api_key",
               "no API key: send 'Authorization: Bearer KEY'");
}

ErrorReply unknownKey() {
  return reply(401, "authentication_error", "invalid_api_key", "incorrect API key provided");
}

ErrorReply routeNotAllowed(std::string_view route) {
  return reply(403, "permission_error", "route_not_allowed",
               "this API key may not use " + std::string(route));
}

ErrorReply badRequest(std::string message, std::string param) {
  ErrorReply r = reply(400, "invalid_request_error", "invalid_request", std::move(message));
  r.param = std::move(param);
  return r;
}

ErrorReply bodyTooLarge(std::uint64_t limit) {
  return reply(413, "invalid_request_error", "body_too_large",
               "the request body is larger than " + std::to_string(limit) + " bytes");
}

ErrorReply headersTooLarge() {
  return reply(431, "invalid_request_error", "headers_too_large",
               "the request headers are too large");
}

ErrorReply notFound(std::string_view target) {
  std::string t(target.substr(0, 200));
  for (char& c : t) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return reply(404, "invalid_request_error", "unknown_url", "unknown URL " + t);
}

ErrorReply methodNotAllowed(std::string_view method, std::string_view target) {
  ErrorReply r = notFound(target);
  r.status = 405;
  r.code = "method_not_allowed";
  r.message = std::string(method.substr(0, 20)) + " is not allowed here";
  return r;
}

ErrorReply draining() {
  ErrorReply r = reply(503, "server_error", "draining", "the gateway is draining");
  r.headers.push_back({"retry-after", "1"});
  return r;
}

ErrorReply tooManyConnections() {
  ErrorReply r =
      reply(503, "server_error", "too_many_connections", "the gateway has too many connections");
  r.headers.push_back({"retry-after", "1"});
  return r;
}

ErrorReply schedulerUnavailable(std::string_view why) {
  ErrorReply r = reply(503, "server_error", "scheduler_unavailable",
                       "the scheduler is unavailable: " + std::string(why));
  r.headers.push_back({"retry-after", "1"});
  return r;
}

ErrorReply upstreamUnavailable(std::string_view why) {
  return reply(502, "server_error", "upstream_unavailable",
               "the upstream server is unavailable: " + std::string(why));
}

ErrorReply upstreamTimeout(std::string_view why) {
  return reply(504, "server_error", "upstream_timeout",
               "the upstream server did not answer in time: " + std::string(why));
}

ErrorReply upstreamBroken(std::string_view why) {
  return reply(502, "server_error", "upstream_bad_response",
               "the upstream server's response was unreadable: " + std::string(why));
}

}  // namespace fairsched::gateway
