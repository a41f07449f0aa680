// The C ABI against the fake daemon: defaults, a round trip, errors with
// their thread-local messages, names, and the HTTP helpers. Streaming,
// cancel and the worker role against a real daemon: tests/integration/c_api_test.cpp.
#include "fairsched/fairsched.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "client_test_util.hpp"
#include "tests/support/requests.hpp"

namespace fairsched::testing {
namespace {

TEST(CApi, OptionsInitFillsTheDefaults) {
  fairsched_options o;
  std::memset(&o, 0xff, sizeof(o));
  fairsched_options_init(&o);
  EXPECT_EQ(o.struct_size, sizeof(fairsched_options));
  EXPECT_EQ(o.socket_path, nullptr);
  EXPECT_EQ(o.connect_timeout_ns, 5'000'000'000);
  EXPECT_EQ(o.spin_ns, 20'000);
  EXPECT_EQ(o.reconnect, 0);
  fairsched_submit_request r;
  fairsched_submit_request_init(&r);
  EXPECT_EQ(r.struct_size, sizeof(fairsched_submit_request));
  EXPECT_EQ(r.prompt, nullptr);
  EXPECT_EQ(r.stream, 0);
  EXPECT_EQ(r.counts_only, 0);
  EXPECT_EQ(r.params, nullptr);
  EXPECT_EQ(r.params_bytes, 0u);
  fairsched_retry_policy p;
  fairsched_retry_policy_init(&p);
  EXPECT_EQ(p.max_attempts, 3);
  fairsched_worker_options w;
  std::memset(&w, 0xff, sizeof(w));
  fairsched_worker_options_init(&w);
  EXPECT_EQ(w.struct_size, sizeof(fairsched_worker_options));
  EXPECT_EQ(w.socket_path, nullptr);
  EXPECT_EQ(w.endpoint, nullptr);
  EXPECT_EQ(w.worker_name, nullptr);
  EXPECT_EQ(w.connect_timeout_ns, 5'000'000'000);
  EXPECT_EQ(w.event_timeout_ns, 1'000'000'000);
}

TEST(CApi, RoundTripThroughTheCAbi) {
  FakeDaemon fake;
  fake.start();
  fairsched_options o;
  fairsched_options_init(&o);
  o.socket_path = fake.socketPath().c_str();
  o.client_name = "c-test";
  fairsched_client* c = nullptr;
  ASSERT_EQ(fairsched_connect(&o, &c), FAIRSCHED_OK) << fairsched_last_error_message();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(fairsched_connected(c), 1);
  EXPECT_GE(fairsched_completion_fd(c), 0);
  uint32_t tenant = 99;
  ASSERT_EQ(fairsched_open_tenant(c, "acme", nullptr, &tenant), FAIRSCHED_OK);
  EXPECT_NE(tenant, 99u);
  EXPECT_NE(tenant, FAIRSCHED_NO_TENANT);

  const uint32_t prompt[3] = {5, 6, 7};
  fairsched_submit_request r = makeCRequest(tenant, prompt, 8);
  r.tag = 4242;
  uint64_t id = 0;
  ASSERT_EQ(fairsched_submit(c, &r, &id), FAIRSCHED_OK) << fairsched_last_error_message();
  EXPECT_NE(id, 0u);
  ASSERT_EQ(fairsched_wait(c, 5'000'000'000), FAIRSCHED_OK);
  fairsched_completion done[4];
  ASSERT_EQ(fairsched_poll(c, done, 4), 1u);
  EXPECT_EQ(done[0].request_id, id);
  EXPECT_EQ(done[0].tag, 4242u);
  EXPECT_EQ(done[0].status, FAIRSCHED_STATUS_OK);
  EXPECT_EQ(done[0].output_tokens, 8u);
  EXPECT_EQ(done[0].checksum, promptChecksum(prompt));
  EXPECT_EQ(done[0].local, 0);
  EXPECT_EQ(fairsched_http_status(&done[0]), 200);
  EXPECT_EQ(fairsched_retry_after_ms(&done[0]), -1);

  fairsched_completion sync;
  r.tag = 4343;
  ASSERT_EQ(fairsched_submit_and_wait(c, &r, 5'000'000'000, &sync), FAIRSCHED_OK);
  EXPECT_EQ(sync.tag, 4343u);
  int32_t attempts = 0;
  ASSERT_EQ(fairsched_submit_with_retry(c, &r, nullptr, &sync, &attempts), FAIRSCHED_OK);
  EXPECT_EQ(attempts, 1);
  EXPECT_EQ(fairsched_wait(c, 1'000'000), FAIRSCHED_ERR_TIMED_OUT);

  r.endpoint = "nope";
  EXPECT_EQ(fairsched_submit(c, &r, nullptr), FAIRSCHED_ERR_UNKNOWN_ENDPOINT);
  EXPECT_NE(std::string(fairsched_last_error_message()).find("nope"), std::string::npos);
  fairsched_close(c);
}

TEST(CApi, OpenTenantsOpensABatchAndCloseTenantReleasesOne) {
  FakeDaemonOptions fo;
  fo.refused_tenants = {"mallory"};
  FakeDaemon fake(fo);
  fake.start();
  fairsched_options o;
  fairsched_options_init(&o);
  o.socket_path = fake.socketPath().c_str();
  fairsched_client* c = nullptr;
  ASSERT_EQ(fairsched_connect(&o, &c), FAIRSCHED_OK) << fairsched_last_error_message();
  const char* names[] = {"a", "mallory", "b"};
  uint32_t out[3] = {0, 0, 0};
  EXPECT_EQ(fairsched_open_tenants(c, names, 3, nullptr, out), FAIRSCHED_ERR_UNAUTHORIZED);
  EXPECT_NE(out[0], FAIRSCHED_NO_TENANT);
  EXPECT_EQ(out[1], FAIRSCHED_NO_TENANT);
  EXPECT_NE(out[2], FAIRSCHED_NO_TENANT);
  EXPECT_NE(out[0], out[2]);
  const char* with_null[] = {"a", nullptr};
  EXPECT_EQ(fairsched_open_tenants(c, with_null, 2, nullptr, out), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_open_tenants(c, nullptr, 0, nullptr, nullptr), FAIRSCHED_OK);

  ASSERT_EQ(fairsched_close_tenant(c, out[0]), FAIRSCHED_OK) << fairsched_last_error_message();
  const uint32_t prompt[1] = {1};
  fairsched_submit_request r = makeCRequest(out[0], prompt, 1);
  EXPECT_EQ(fairsched_submit(c, &r, nullptr), FAIRSCHED_ERR_UNKNOWN_TENANT);
  EXPECT_EQ(fairsched_close_tenant(c, out[0]), FAIRSCHED_ERR_UNKNOWN_TENANT);
  r.tenant = out[2];
  fairsched_completion done;
  ASSERT_EQ(fairsched_submit_and_wait(c, &r, 5'000'000'000, &done), FAIRSCHED_OK)
      << fairsched_last_error_message();
  EXPECT_EQ(done.status, FAIRSCHED_STATUS_OK);
  fairsched_close(c);
}

// A program built when the struct ended at `tag` passes that struct_size;
// what lies after it in its memory is not the library's to read.
TEST(CApi, ASubmitRequestFromBeforeTheWorkerFieldsIsReadUpToItsSize) {
  FakeDaemon fake;
  fake.start();
  fairsched_options o;
  fairsched_options_init(&o);
  o.socket_path = fake.socketPath().c_str();
  fairsched_client* c = nullptr;
  ASSERT_EQ(fairsched_connect(&o, &c), FAIRSCHED_OK) << fairsched_last_error_message();
  uint32_t tenant = 0;
  ASSERT_EQ(fairsched_open_tenant(c, "acme", nullptr, &tenant), FAIRSCHED_OK);
  const uint32_t prompt[2] = {1, 2};
  fairsched_submit_request r = makeCRequest(tenant, prompt, 4);
  // Garbage where an old caller's struct has ended: read, each is refused.
  r.stream = -1;
  r.counts_only = 1;  // with a prompt
  r.prompt_token_count = 7;
  r.params = nullptr;
  r.params_bytes = 100000;  // too many, and no pointer
  EXPECT_EQ(fairsched_submit(c, &r, nullptr), FAIRSCHED_ERR_INVALID_ARGUMENT);
  const char params[] = "x";
  r.params = params;
  EXPECT_EQ(fairsched_submit(c, &r, nullptr), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fairsched_last_error_message()).find("params"), std::string::npos)
      << fairsched_last_error_message();
  r.struct_size = offsetof(fairsched_submit_request, stream);
  fairsched_completion done;
  ASSERT_EQ(fairsched_submit_and_wait(c, &r, 5'000'000'000, &done), FAIRSCHED_OK)
      << fairsched_last_error_message();
  EXPECT_EQ(done.status, FAIRSCHED_STATUS_OK);
  EXPECT_EQ(done.partial, 0);
  EXPECT_EQ(done.tokens, nullptr);
  r.struct_size = offsetof(fairsched_submit_request, tag);  // older than any header
  EXPECT_EQ(fairsched_submit(c, &r, nullptr), FAIRSCHED_ERR_INVALID_ARGUMENT);
  fairsched_close(c);
}

TEST(CApi, ConnectFailureLeavesAMessageAndNoHandle) {
  fairsched_options o;
  fairsched_options_init(&o);
  o.socket_path = "/nonexistent-fairsched-dir/x.sock";
  fairsched_client* c = reinterpret_cast<fairsched_client*>(0x1);
  EXPECT_EQ(fairsched_connect(&o, &c), FAIRSCHED_ERR_CONNECT_FAILED);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(fairsched_last_error_message()).find("nonexistent"), std::string::npos);
}

TEST(CApi, NullArgumentsAreInvalidNotCrashes) {
  EXPECT_EQ(fairsched_connect(nullptr, nullptr), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_submit(nullptr, nullptr, nullptr), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_wait(nullptr, 0), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_poll(nullptr, nullptr, 1), 0u);
  EXPECT_EQ(fairsched_completion_fd(nullptr), -1);
  fairsched_close(nullptr);
  fairsched_options uninitialised{};
  fairsched_client* c = nullptr;
  EXPECT_EQ(fairsched_connect(&uninitialised, &c), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_cancel(nullptr, 1), FAIRSCHED_ERR_INVALID_ARGUMENT);

  fairsched_worker* w = nullptr;
  EXPECT_EQ(fairsched_worker_connect(nullptr, &w), FAIRSCHED_ERR_INVALID_ARGUMENT);
  fairsched_worker_options wo{};
  EXPECT_EQ(fairsched_worker_connect(&wo, &w), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_connect(&wo, nullptr), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_set_capacity(nullptr, 1, 1), FAIRSCHED_ERR_INVALID_ARGUMENT);
  fairsched_work_item item;
  EXPECT_EQ(fairsched_worker_poll(nullptr, &item, 1), 0u);
  EXPECT_EQ(fairsched_worker_wait(nullptr, 0), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_event_fd(nullptr), -1);
  int block = 0;
  EXPECT_EQ(fairsched_worker_prepare_to_block(nullptr, &block), FAIRSCHED_ERR_INVALID_ARGUMENT);
  const uint32_t token = 1;
  EXPECT_EQ(fairsched_worker_emit(nullptr, 1, &token, 1), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_finish(nullptr, 1, FAIRSCHED_STATUS_OK, 0, nullptr),
            FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_connected(nullptr), 0);
  fairsched_worker_stats st;
  std::memset(&st, 0xff, sizeof(st));
  fairsched_worker_get_stats(nullptr, &st);
  EXPECT_EQ(st.assigned, 0u);
  fairsched_worker_close(nullptr);
}

TEST(CApi, WorkerConnectFailureLeavesAMessageAndNoHandle) {
  fairsched_worker_options o;
  fairsched_worker_options_init(&o);
  o.socket_path = "/nonexistent-fairsched-dir/x.sock";
  o.endpoint = "chat";
  fairsched_worker* w = reinterpret_cast<fairsched_worker*>(0x1);
  EXPECT_EQ(fairsched_worker_connect(&o, &w), FAIRSCHED_ERR_CONNECT_FAILED);
  EXPECT_EQ(w, nullptr);
  EXPECT_NE(std::string(fairsched_last_error_message()).find("nonexistent"), std::string::npos);
  o.endpoint = "bad name";
  EXPECT_EQ(fairsched_worker_connect(&o, &w), FAIRSCHED_ERR_INVALID_ARGUMENT);
}

TEST(CApi, NamesAndHttpHelpers) {
  EXPECT_STREQ(fairsched_status_name(FAIRSCHED_STATUS_OK), "OK");
  EXPECT_STREQ(fairsched_status_name(FAIRSCHED_STATUS_RATE_LIMITED), "RATE_LIMITED");
  EXPECT_STREQ(fairsched_status_name(FAIRSCHED_STATUS_SHUTTING_DOWN), "SHUTTING_DOWN");
  EXPECT_STREQ(fairsched_status_name(FAIRSCHED_STATUS_EXECUTOR_FAILED), "EXECUTOR_FAILED");
  EXPECT_STREQ(fairsched_status_name(FAIRSCHED_STATUS_SLOW_CONSUMER), "SLOW_CONSUMER");
  EXPECT_STREQ(fairsched_status_name(11), "UNKNOWN");
  EXPECT_STREQ(fairsched_status_name(-1), "UNKNOWN");
  EXPECT_STREQ(fairsched_error_name(FAIRSCHED_ERR_RING_FULL), "RING_FULL");
  fairsched_completion c{};
  c.status = FAIRSCHED_STATUS_RATE_LIMITED;
  c.retry_after_ns = 1'200'000;
  EXPECT_EQ(fairsched_http_status(&c), 429);
  EXPECT_EQ(fairsched_retry_after_ms(&c), 2);
  c.status = FAIRSCHED_STATUS_CANCELLED;
  EXPECT_EQ(fairsched_http_status(&c), 499);
  c.status = 77;
  EXPECT_EQ(fairsched_http_status(&c), 500);
}

}  // namespace
}  // namespace fairsched::testing
