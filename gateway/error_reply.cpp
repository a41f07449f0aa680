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

// A 503 worth retrying in a second.
ErrorReply retryLater(std::string code, std::string message) {
  ErrorReply r = reply(503, "server_error", std::move(code), std::move(message));
  r.headers.push_back({"retry-after", "1"});
  r.headers.push_back({"retry-after-ms", "1000"});
  return r;
}

// How an OpenAI client hears a final status that is not OK: the error's
// type, code and message.
struct Words {
  const char* type;
  const char* code;
  const char* message;
};

Words wordsFor(Status s) {
  switch (s) {
    case Status::kRateLimited:
      return {"rate_limit_error", "rate_limit_exceeded",
              "rate limit reached for this tenant; retry after "};
    case Status::kOverloaded:
      return {"server_error", "overloaded",
              "the scheduler's backlog cannot meet this endpoint's latency target"};
    case Status::kQueueFull:
      return {"server_error", "queue_full", "this tenant's queue is full"};
    case Status::kDeadlineExceeded:
      return {"server_error", "deadline_exceeded",
              "the request's deadline passed before it could run"};
    case Status::kInvalid:
      return {"invalid_request_error", "invalid_request",
              "the scheduler refused the request (prompt + max_tokens too large?)"};
    case Status::kUnauthorized:
      return {"permission_error", "tenant_not_allowed",
              "the gateway may not submit for this tenant or endpoint"};
    case Status::kCancelled:
    case Status::kSlowConsumer:
      return {"server_error", "cancelled", "the request was cancelled"};
    case Status::kShuttingDown:
      return {"server_error", "shutting_down", "the scheduler is shutting down or draining"};
    case Status::kExecutorFailed:
      return {"server_error", "upstream_failed", "the upstream failed the request"};
    case Status::kOk:
      break;
  }
  return {"server_error", "internal_error", "the request ended without a response"};
}

// Every 503 says when to try again: the daemon's figure, else a second.
void addRetryLater(ErrorReply& r) {
  if (r.status != 503) return;
  const auto has = [&r](std::string_view name) {
    for (const HttpHeader& h : r.headers) {
      if (h.name == name) return true;
    }
    return false;
  };
  if (!has("retry-after")) r.headers.push_back({"retry-after", "1"});
  if (!has("retry-after-ms")) r.headers.push_back({"retry-after-ms", "1000"});
}

}  // namespace

ErrorReply errorForCompletion(const Completion& c, bool ran) {
  const HttpAnswer a = toHttpStatus(c);
  const Words w = wordsFor(c.status);
  ErrorReply r = reply(c.status == Status::kOk ? 500 : a.status, w.type, w.code, w.message);
  if (c.status == Status::kRateLimited) r.message += retryAfterMs(c.retry_after) + " ms";
  if (ran && c.status == Status::kDeadlineExceeded) {
    r.message = "the request's deadline passed while it was running";
  }
  if (ran && (c.status == Status::kCancelled || c.status == Status::kSlowConsumer)) {
    r.message = "the request was cancelled while it was running";
  }
  r.headers = a.headers;
  addRetryLater(r);
  return r;
}

ErrorReply errorForSubmit(const Error& e) {
  // A code of the documented table (docs/gateway.md), never the library's
  // own words: what the caller can do about it decides the code.
  ErrorReply r;
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kPromptTooLarge:
      r = reply(400, "invalid_request_error", "invalid_request", e.toString());
      break;
    case ErrorCode::kUnauthorized:
      r = reply(403, "permission_error", "tenant_not_allowed",
                "the scheduler refuses this tenant or endpoint to the gateway: " + e.toString());
      break;
    case ErrorCode::kRingFull:
      r = reply(503, "server_error", "queue_full",
                "this tenant's submissions are arriving faster than the scheduler takes them");
      break;
    case ErrorCode::kShuttingDown:
      r = reply(503, "server_error", "shutting_down", "the scheduler is shutting down or draining");
      break;
    default:  // not connected, lost, timed out, refused, no capacity, ...
      r = reply(503, "server_error", "scheduler_unavailable",
                "the scheduler is unavailable: " + e.toString());
      break;
  }
  addRetryLater(r);
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
  return retryLater("draining", "the gateway is draining");
}

ErrorReply tooManyConnections() {
  return retryLater("too_many_connections", "the gateway has too many connections");
}

ErrorReply schedulerUnavailable(std::string_view why) {
  return retryLater("scheduler_unavailable", "the scheduler is unavailable: " + std::string(why));
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
