// The requests the client tests and the integration tests send: to an
// endpoint ("chat" unless said) for a tenant, with a prompt (which must
// outlive the request), an output budget and (C++) a tag.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "fairsched/fairsched.h"
#include "fairsched/request.hpp"

namespace fairsched::testing {

inline SubmitRequest makeRequest(Tenant tenant, std::span<const std::uint32_t> prompt,
                                 std::uint32_t max_output_tokens, std::uint64_t tag = 0,
                                 std::string_view endpoint = "chat") {
  return {.tenant = tenant,
          .endpoint = endpoint,
          .prompt = prompt,
          .max_output_tokens = max_output_tokens,
          .deadline = std::nullopt,
          .timeout = std::nullopt,
          .tag = tag,
          .params = {},
          .prompt_token_count = std::nullopt,
          .prefix = {}};
}

// The same through the C API (fairsched_submit_request_init, then these).
inline fairsched_submit_request makeCRequest(std::uint32_t tenant,
                                             std::span<const std::uint32_t> prompt,
                                             std::uint32_t max_output_tokens,
                                             const char* endpoint = "chat") {
  fairsched_submit_request r;
  fairsched_submit_request_init(&r);
  r.tenant = tenant;
  r.endpoint = endpoint;
  r.prompt = prompt.data();
  r.prompt_tokens = prompt.size();
  r.max_output_tokens = max_output_tokens;
  return r;
}

}  // namespace fairsched::testing
