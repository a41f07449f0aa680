// How the gateway says no: each outcome becomes an HTTP status, an
// OpenAI-style error (type, code, message, param) and its headers.
// The status codes follow fairsched/http.hpp (docs/gateway.md has the table).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fairsched/error.hpp"
#include "fairsched/http.hpp"
#include "fairsched/request.hpp"

namespace fairsched::gateway {

struct ErrorReply {
  int status = 500;
  std::string type;     // invalid_request_error, authentication_error, permission_error,
                        // rate_limit_error, server_error
  std::string code;     // machine-readable: "rate_limit_exceeded", "invalid_api_key", ...
  std::string message;  // for people
  std::string param;    // the offending field, or ""
  std::vector<HttpHeader> headers;  // retry-after and friends
};

// A final completion that is not OK (RATE_LIMITED → 429 with retry-after, ...).
// `ran`: the request had started (its stream was under way). Every 503
// carries retry-after and retry-after-ms.
ErrorReply errorForCompletion(const Completion& c, bool ran = false);
// A submit() or openTenant() error (no completion exists), as one of the
// documented codes (docs/gateway.md): 400, 403, or 503 with retry-after.
ErrorReply errorForSubmit(const Error& e);

ErrorReply missingKey();
ErrorReply unknownKey();
ErrorReply routeNotAllowed(std::string_view route);
ErrorReply badRequest(std::string message, std::string param = {});
ErrorReply bodyTooLarge(std::uint64_t limit);
ErrorReply headersTooLarge();
ErrorReply notFound(std::string_view target);
ErrorReply methodNotAllowed(std::string_view method, std::string_view target);
ErrorReply draining();
ErrorReply tooManyConnections();
ErrorReply schedulerUnavailable(std::string_view why);
ErrorReply upstreamUnavailable(std::string_view why);  // 502
ErrorReply upstreamTimeout(std::string_view why);      // 504
ErrorReply upstreamBroken(std::string_view why);       // 502: an unreadable response

}  // namespace fairsched::gateway
