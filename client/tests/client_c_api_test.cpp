// The C ABI against the fake daemon: defaults, a round trip, errors with
// their thread-local messages, names, and the HTTP helpers.
#include "fairsched/fairsched.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "client_test_util.hpp"

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
  fairsched_retry_policy p;
  fairsched_retry_policy_init(&p);
  EXPECT_EQ(p.max_attempts, 3);
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
  EXPECT_EQ(tenant, 0u);

  const uint32_t prompt[3] = {5, 6, 7};
  fairsched_submit_request r;
  fairsched_submit_request_init(&r);
  r.tenant = tenant;
  r.endpoint = "chat";
  r.prompt = prompt;
  r.prompt_tokens = 3;
  r.max_output_tokens = 8;
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
