// The C ABI over fairsched::Client: options, connect, tenants, submit,
// poll, cancel, wait, submit-and-wait and submit-with-retry. Nothing here
// throws: allocation failure aside (which terminates, as everywhere in the
// library), every path returns a fairsched_error. The worker side is in
// fairsched_c_worker.cpp, the errors and names in fairsched_c_errors.cpp.
#include "fairsched/fairsched.h"

#include <chrono>
#include <cstddef>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fairsched/client.hpp"
#include "fairsched_c_errors.hpp"

struct fairsched_client {
  explicit fairsched_client(fairsched::Client c) : client(std::move(c)) {}
  fairsched::Client client;
};

namespace {

using std::chrono::nanoseconds;

using fairsched::c_abi::fail;
using fairsched::c_abi::invalid;

static_assert(FAIRSCHED_MAX_PARAMS_BYTES == fairsched::kMaxParamsBytes);

// fairsched_submit_request as it was before the worker fields: a caller
// built then passes this struct_size and gets their defaults.
constexpr std::size_t kSubmitRequestV1Size = offsetof(fairsched_submit_request, stream);
// Up to reserved2: streaming, counts-only and parameters.
constexpr std::size_t kSubmitRequestV2Size = offsetof(fairsched_submit_request, prefix);
static_assert(kSubmitRequestV1Size == offsetof(fairsched_submit_request, tag) + sizeof(uint64_t),
              "the worker fields start right after tag");

fairsched::SubmitRequest toRequest(const fairsched_submit_request& r) {
  fairsched::SubmitRequest req;
  req.tenant = fairsched::Tenant{r.tenant};
  req.endpoint = r.endpoint != nullptr ? std::string_view(r.endpoint) : std::string_view();
  if (r.prompt != nullptr) req.prompt = std::span<const std::uint32_t>(r.prompt, r.prompt_tokens);
  req.max_output_tokens = r.max_output_tokens;
  req.priority = r.priority;
  if (r.deadline_ns != 0) {
    req.deadline = std::chrono::steady_clock::time_point(nanoseconds(r.deadline_ns));
  }
  if (r.timeout_ns != 0) req.timeout = nanoseconds(r.timeout_ns);
  req.tag = r.tag;
  if (r.struct_size >= kSubmitRequestV2Size) {
    req.stream = r.stream != 0;
    if (r.params != nullptr) {
      req.params =
          std::span<const std::byte>(static_cast<const std::byte*>(r.params), r.params_bytes);
    }
    if (r.counts_only != 0) req.prompt_token_count = r.prompt_token_count;
  }
  if (r.struct_size >= sizeof(fairsched_submit_request) && r.prefix != nullptr) {
    req.prefix = std::span<const std::uint64_t>(r.prefix, r.prefix_blocks);
  }
  return req;
}

fairsched_completion toC(const fairsched::Completion& c) {
  fairsched_completion out{};
  out.request_id = c.request_id;
  out.tag = c.tag;
  out.status = static_cast<int32_t>(c.status);
  out.output_tokens = c.output_tokens;
  out.retry_after_ns = c.retry_after.count();
  out.queue_wait_ns = c.queue_wait.count();
  out.service_ns = c.service.count();
  out.checksum = c.checksum;
  out.local = c.local ? 1 : 0;
  out.partial = c.partial ? 1 : 0;
  out.first_token = c.first_token;
  if (!c.tokens.empty()) {
    out.tokens = c.tokens.data();
    out.token_count = static_cast<uint32_t>(c.tokens.size());
  }
  out.input_tokens = c.input_tokens;
  if (c.partial) {
    out.emitted_ns = std::chrono::duration_cast<nanoseconds>(c.emitted.time_since_epoch()).count();
  }
  out.time_to_first_token_ns =
      std::chrono::duration_cast<nanoseconds>(c.time_to_first_token).count();
  return out;
}

// A request from fairsched_submit_request_init (of this or an older header)
// whose pointers are set where their counts are not 0.
bool validRequest(const fairsched_submit_request* request) {
  if (request == nullptr || request->struct_size < kSubmitRequestV1Size) return false;
  if (request->prompt == nullptr && request->prompt_tokens != 0) return false;
  if (request->struct_size >= kSubmitRequestV2Size && request->params == nullptr &&
      request->params_bytes != 0) {
    return false;
  }
  return request->struct_size < sizeof(fairsched_submit_request) || request->prefix != nullptr ||
         request->prefix_blocks == 0;
}

}  // namespace

extern "C" {

void fairsched_options_init(fairsched_options* options) {
  if (options == nullptr) return;
  const fairsched::ClientOptions d;
  *options = fairsched_options{};
  options->struct_size = sizeof(fairsched_options);
  options->socket_path = nullptr;
  options->client_name = nullptr;
  options->connect_timeout_ns = d.connect_timeout.count();
  options->control_timeout_ns = d.control_timeout.count();
  options->spin_ns = d.spin.count();
  options->reconnect = d.reconnect.enabled ? 1 : 0;
  options->reconnect_initial_delay_ns = d.reconnect.initial_delay.count();
  options->reconnect_max_delay_ns = d.reconnect.max_delay.count();
}

void fairsched_submit_request_init(fairsched_submit_request* request) {
  if (request == nullptr) return;
  *request = fairsched_submit_request{};
  request->struct_size = sizeof(fairsched_submit_request);
}

void fairsched_retry_policy_init(fairsched_retry_policy* policy) {
  if (policy == nullptr) return;
  const fairsched::RetryPolicy d;
  *policy = fairsched_retry_policy{};
  policy->max_attempts = d.max_attempts;
  policy->base_backoff_ns = d.base_backoff.count();
  policy->max_backoff_ns = d.max_backoff.count();
  policy->max_retry_after_ns = d.max_retry_after.count();
  policy->attempt_timeout_ns = d.attempt_timeout.count();
}

fairsched_error fairsched_connect(const fairsched_options* options, fairsched_client** out) {
  if (out == nullptr) return invalid("out is NULL");
  *out = nullptr;
  fairsched::ClientOptions o;
  if (options != nullptr) {
    if (options->struct_size < sizeof(fairsched_options)) {
      return invalid("options not initialised with fairsched_options_init");
    }
    if (options->socket_path != nullptr) o.socket_path = options->socket_path;
    if (options->client_name != nullptr) o.client_name = options->client_name;
    o.connect_timeout = nanoseconds(options->connect_timeout_ns);
    o.control_timeout = nanoseconds(options->control_timeout_ns);
    o.spin = nanoseconds(options->spin_ns);
    o.reconnect.enabled = options->reconnect != 0;
    o.reconnect.initial_delay = nanoseconds(options->reconnect_initial_delay_ns);
    o.reconnect.max_delay = nanoseconds(options->reconnect_max_delay_ns);
  }
  fairsched::Result<fairsched::Client> c = fairsched::Client::connect(std::move(o));
  if (!c) return fail(c.error());
  *out = new fairsched_client(std::move(c).value());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_open_tenant(fairsched_client* client, const char* tenant,
                                      const char* tier, uint32_t* out_tenant) {
  if (client == nullptr || tenant == nullptr || out_tenant == nullptr) {
    return invalid("client, tenant and out_tenant must not be NULL");
  }
  std::optional<std::string_view> t;
  if (tier != nullptr) t = std::string_view(tier);
  fairsched::Result<fairsched::Tenant> r = client->client.openTenant(tenant, t);
  if (!r) return fail(r.error());
  *out_tenant = r->index;
  return FAIRSCHED_OK;
}

fairsched_error fairsched_open_tenants(fairsched_client* client, const char* const* tenants,
                                       size_t count, const char* tier, uint32_t* out_tenants) {
  if (client == nullptr || (count > 0 && (tenants == nullptr || out_tenants == nullptr))) {
    return invalid("client, tenants and out_tenants must not be NULL");
  }
  std::vector<std::string_view> names(count);
  for (size_t i = 0; i < count; ++i) {
    if (tenants[i] == nullptr) return invalid("an element of tenants is NULL");
    names[i] = tenants[i];
  }
  std::optional<std::string_view> t;
  if (tier != nullptr) t = std::string_view(tier);
  std::vector<fairsched::Result<fairsched::Tenant>> r = client->client.openTenants(names, t);
  std::optional<fairsched_error> first;
  for (size_t i = 0; i < count; ++i) {
    if (r[i]) {
      out_tenants[i] = r[i]->index;
    } else {
      out_tenants[i] = FAIRSCHED_NO_TENANT;
      if (!first) first = fail(r[i].error());
    }
  }
  return first.value_or(FAIRSCHED_OK);
}

fairsched_error fairsched_close_tenant(fairsched_client* client, uint32_t tenant) {
  if (client == nullptr) return invalid("client must not be NULL");
  fairsched::Result<void> r = client->client.closeTenant(fairsched::Tenant{tenant});
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_close_tenants(fairsched_client* client, const uint32_t* tenants,
                                        size_t count) {
  if (client == nullptr || (count > 0 && tenants == nullptr)) {
    return invalid("client and tenants must not be NULL");
  }
  std::vector<fairsched::Tenant> handles(count);
  for (size_t i = 0; i < count; ++i) handles[i].index = tenants[i];
  std::vector<fairsched::Result<void>> r = client->client.closeTenants(handles);
  for (const fairsched::Result<void>& one : r) {
    if (!one) return fail(one.error());
  }
  return FAIRSCHED_OK;
}

fairsched_error fairsched_submit(fairsched_client* client, const fairsched_submit_request* request,
                                 uint64_t* out_request_id) {
  if (client == nullptr || !validRequest(request)) {
    return invalid(
        "client or request (use fairsched_submit_request_init; prompt and params may be NULL "
        "only with a count of 0)");
  }
  fairsched::Result<fairsched::RequestId> r = client->client.submit(toRequest(*request));
  if (!r) return fail(r.error());
  if (out_request_id != nullptr) *out_request_id = *r;
  return FAIRSCHED_OK;
}

size_t fairsched_poll(fairsched_client* client, fairsched_completion* out, size_t max) {
  if (client == nullptr || out == nullptr || max == 0) return 0;
  thread_local std::vector<fairsched::Completion> buffer;
  buffer.clear();
  const std::size_t n = client->client.poll(buffer, max);
  // Kept until this thread's next call: partial completions point into it.
  for (std::size_t i = 0; i < n; ++i) out[i] = toC(buffer[i]);
  return n;
}

fairsched_error fairsched_cancel(fairsched_client* client, uint64_t request_id) {
  if (client == nullptr) return invalid("client is NULL");
  fairsched::Result<void> r = client->client.cancel(request_id);
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

fairsched_error fairsched_wait(fairsched_client* client, int64_t timeout_ns) {
  if (client == nullptr) return invalid("client is NULL");
  fairsched::Result<void> r = client->client.wait(nanoseconds(timeout_ns));
  if (!r) return fail(r.error());
  return FAIRSCHED_OK;
}

int fairsched_completion_fd(const fairsched_client* client) {
  return client != nullptr ? client->client.completionFd() : -1;
}

fairsched_error fairsched_prepare_to_block(fairsched_client* client, int* block) {
  if (client == nullptr || block == nullptr) return invalid("client and block must not be NULL");
  fairsched::Result<bool> r = client->client.prepareToBlock();
  if (!r) return fail(r.error());
  *block = *r ? 1 : 0;
  return FAIRSCHED_OK;
}

fairsched_error fairsched_submit_and_wait(fairsched_client* client,
                                          const fairsched_submit_request* request,
                                          int64_t timeout_ns, fairsched_completion* out) {
  if (client == nullptr || !validRequest(request) || out == nullptr) {
    return invalid(
        "client, request or out (use fairsched_submit_request_init; prompt and params may be "
        "NULL only with a count of 0)");
  }
  fairsched::Result<fairsched::Completion> r =
      client->client.submitAndWait(toRequest(*request), nanoseconds(timeout_ns));
  if (!r) return fail(r.error());
  *out = toC(*r);
  return FAIRSCHED_OK;
}

fairsched_error fairsched_submit_with_retry(fairsched_client* client,
                                            const fairsched_submit_request* request,
                                            const fairsched_retry_policy* policy,
                                            fairsched_completion* out, int32_t* attempts) {
  if (client == nullptr || !validRequest(request) || out == nullptr) {
    return invalid(
        "client, request or out (use fairsched_submit_request_init; prompt and params may be "
        "NULL only with a count of 0)");
  }
  fairsched::RetryPolicy p;
  if (policy != nullptr) {
    p.max_attempts = policy->max_attempts;
    p.base_backoff = nanoseconds(policy->base_backoff_ns);
    p.max_backoff = nanoseconds(policy->max_backoff_ns);
    p.max_retry_after = nanoseconds(policy->max_retry_after_ns);
    p.attempt_timeout = nanoseconds(policy->attempt_timeout_ns);
  }
  fairsched::RetryOutcome r = fairsched::submitWithRetry(client->client, toRequest(*request), p);
  if (attempts != nullptr) *attempts = r.attempts;
  if (!r.last) return fail(r.last.error());
  *out = toC(*r.last);
  return FAIRSCHED_OK;
}

int fairsched_connected(const fairsched_client* client) {
  return client != nullptr && client->client.connected() ? 1 : 0;
}

void fairsched_shutdown(fairsched_client* client) {
  if (client != nullptr) client->client.shutdown();
}

void fairsched_close(fairsched_client* client) {
  delete client;
}

}  // extern "C"
