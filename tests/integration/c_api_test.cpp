// The C ABI's streaming, cancel and worker functions against a real
// fairschedd (forked): a worker thread serving the `chat` endpoint through
// fairsched_worker_*, and a client streaming through fairsched_poll. Only
// the C functions touch the library; the reference token function (output
// token j = prompt[j % n] + j + 1 mod 2^32, j + 1 without a prompt) is
// written out here, so a token that reaches the wrong request, or a chunk
// that skips or repeats, fails the test.
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include "daemon/config/config.hpp"
#include "fairsched/fairsched.h"
#include "fairsched/prefix_hash.hpp"
#include "shm/worker_protocol.hpp"
#include "tests/support/daemon_config.hpp"
#include "tests/support/forked_daemon.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/requests.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/temp_dir.hpp"

namespace fairsched {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kMs = 1'000'000;  // nanoseconds
constexpr std::uint32_t kWorkerSequences = 8;
constexpr std::uint64_t kWorkerKvTokens = 1 << 20;

std::optional<config::Config> makeConfig(const std::string& socket) {
  testing::DaemonConfigText c;
  c.socket = socket;
  c.test_event_loop = true;
  c.body =
      "[endpoints.chat]\nexecutor = \"worker\"\nmax_batch_tokens = 65536\n"
      "max_output_tokens = 32768\nbatch_timeout_ms = 60000\n"
      "[endpoints.chat.worker]\nmax_sequences = 256\nclient_buffer_chunks = 1024\n";
  c.client_extra = "workers = [\"chat\"]\nadmin = true\n";  // admin: fairschedctl drain
  auto parsed = c.parse();
  if (auto* err = parsed.errorOrNull()) {
    ADD_FAILURE() << *err;
    return std::nullopt;
  }
  return std::move(parsed).value();
}

using shm::referenceToken;

std::vector<std::uint32_t> promptFor(std::uint64_t salt) {
  return testing::promptFor(salt, testing::kMixedPrompts);
}

std::string paramsFor(std::uint32_t output_tokens) {
  return "output_tokens=" + std::to_string(output_tokens);
}

// `output_tokens=N` from an assignment's params; 0 when absent.
std::uint32_t outputTokensParam(const void* params, std::uint32_t bytes) {
  const std::string text(static_cast<const char*>(params), bytes);
  const std::string key = "output_tokens=";
  if (text.rfind(key, 0) != 0) return 0;
  return static_cast<std::uint32_t>(std::stoul(text.substr(key.size())));
}

// A worker engine through the C ABI: one token per running sequence per
// step, a step every 200 µs; finishes a sequence when it reaches
// output_tokens=N (its params), acknowledges an ABORT with CANCELLED. Idle,
// it blocks on the worker's event descriptor. Runs on its own thread until
// `stop`; the first failure is in error().
class CWorker {
 public:
  explicit CWorker(fairsched_worker* w) : w_(w) {}

  void run(const std::atomic<bool>& stop) {
    if (!check(fairsched_worker_set_capacity(w_, kWorkerSequences, kWorkerKvTokens), "capacity"))
      return;
    fairsched_work_item items[16];
    while (!stop.load()) {
      if (running_.empty() && !idle()) return;
      const std::size_t n = fairsched_worker_poll(w_, items, 16);
      for (std::size_t i = 0; i < n; ++i) {
        if (!take(items[i])) return;
      }
      if (n > 0 && !stateCapacity()) return;
      if (running_.empty()) continue;
      std::this_thread::sleep_for(200us);  // the step: the first token is never instant
      if (!step()) return;
    }
  }

  const std::string& error() const { return error_; }
  std::uint64_t tokensEmitted() const { return tokens_emitted_; }

 private:
  struct Sequence {
    std::vector<std::uint32_t> prompt;
    std::uint32_t target = 0;
    std::uint32_t generated = 0;
  };

  bool check(fairsched_error e, const char* what) {
    if (e == FAIRSCHED_OK) return true;
    if (error_.empty()) {
      error_ = std::string(what) + ": " + fairsched_error_name(e) + ": " +
               fairsched_last_error_message();
    }
    return false;
  }

  // Blocks (at most 20 ms) on the event descriptor the way an event loop would.
  bool idle() {
    int block = 0;
    if (!check(fairsched_worker_prepare_to_block(w_, &block), "prepare_to_block")) return false;
    if (block) {
      pollfd pfd{fairsched_worker_event_fd(w_), POLLIN, 0};
      (void)::poll(&pfd, 1, 20);
    }
    return true;
  }

  bool take(const fairsched_work_item& item) {
    if (item.kind == FAIRSCHED_WORK_ABORT) {
      auto it = running_.find(item.id);
      if (it == running_.end()) return true;  // finished before the abort came
      const std::uint32_t done = it->second.generated;
      running_.erase(it);
      return check(fairsched_worker_finish(w_, item.id, FAIRSCHED_STATUS_CANCELLED, done, nullptr),
                   "finish CANCELLED") &&
             stateCapacity();
    }
    if (item.kind != FAIRSCHED_WORK_ASSIGN) {
      error_ = "work item of kind " + std::to_string(item.kind);
      return false;
    }
    if (item.counts_only ? item.prompt_len != 0 || item.prompt != nullptr
                         : item.prompt_len != item.prompt_tokens) {
      error_ = "assignment " + std::to_string(item.id) + ": prompt_len " +
               std::to_string(item.prompt_len) + ", prompt_tokens " +
               std::to_string(item.prompt_tokens);
      return false;
    }
    Sequence s;
    if (item.prompt_len > 0) s.prompt.assign(item.prompt, item.prompt + item.prompt_len);
    s.target = std::min(outputTokensParam(item.params, item.params_bytes), item.max_output_tokens);
    if (s.target == 0) s.target = item.max_output_tokens;
    running_.emplace(item.id, std::move(s));
    return true;
  }

  bool step() {
    for (auto it = running_.begin(); it != running_.end();) {
      Sequence& s = it->second;
      const std::uint32_t token = referenceToken(s.prompt, s.generated);
      if (!check(fairsched_worker_emit(w_, it->first, &token, 1), "emit")) return false;
      ++s.generated;
      ++tokens_emitted_;
      if (s.generated < s.target) {
        ++it;
        continue;
      }
      if (!check(fairsched_worker_finish(w_, it->first, FAIRSCHED_STATUS_OK, s.generated, nullptr),
                 "finish OK"))
        return false;
      it = running_.erase(it);
      if (!stateCapacity()) return false;
    }
    return true;
  }

  bool stateCapacity() {
    return check(
        fairsched_worker_set_capacity(
            w_, kWorkerSequences - static_cast<std::uint32_t>(running_.size()), kWorkerKvTokens),
        "capacity");
  }

  fairsched_worker* w_;
  std::map<std::uint64_t, Sequence> running_;
  std::uint64_t tokens_emitted_ = 0;
  std::string error_;
};

// What the client saw of one request.
struct Seen {
  std::vector<std::uint32_t> prompt;  // empty for counts only
  std::uint32_t want = 0;
  std::uint64_t tag = 0;
  std::vector<std::uint32_t> tokens;
  int finals = 0;
  fairsched_completion final_completion{};
  std::string error;
};

// Applies one completion; records the first inconsistency. `c.tokens` is
// valid here: it lives until this thread's next fairsched_poll.
void account(std::map<std::uint64_t, Seen>& seen, const fairsched_completion& c) {
  auto it = seen.find(c.request_id);
  if (it == seen.end()) {
    ADD_FAILURE() << "a completion for request " << c.request_id << ", never submitted";
    return;
  }
  Seen& s = it->second;
  auto note = [&](const std::string& what) {
    if (s.error.empty()) s.error = what;
  };
  if (c.tag != s.tag) note("tag " + std::to_string(c.tag) + ", submitted " + std::to_string(s.tag));
  if (c.partial == 0) {
    ++s.finals;
    s.final_completion = c;
    if (c.tokens != nullptr || c.token_count != 0) note("a final completion carries tokens");
    return;
  }
  if (s.finals > 0) note("a chunk after the final completion");
  if (c.status != FAIRSCHED_STATUS_OK) note("a chunk with a status");
  if (c.token_count == 0 || c.tokens == nullptr) note("an empty chunk");
  if (c.first_token != s.tokens.size()) {
    note("chunk starts at " + std::to_string(c.first_token) + ", expected " +
         std::to_string(s.tokens.size()));
  }
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  if (c.emitted_ns <= 0 || c.emitted_ns > now) note("emitted_ns is not a past CLOCK_MONOTONIC");
  for (std::uint32_t i = 0; i < c.token_count; ++i) {
    const auto j = static_cast<std::uint32_t>(s.tokens.size());
    if (c.tokens[i] != referenceToken(s.prompt, j)) {
      note("token " + std::to_string(j) + " is not this request's");
    }
    s.tokens.push_back(c.tokens[i]);
  }
}

class CApiWithDaemon : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty()) << "no temporary directory";
    const std::optional<config::Config> cfg = makeConfig(socket());
    ASSERT_TRUE(cfg.has_value());
    auto d = daemon::ForkedDaemon::start(*cfg);
    ASSERT_TRUE(d.ok()) << d.error().message;
    daemon_.emplace(std::move(d).value());

    fairsched_worker_options wo;
    fairsched_worker_options_init(&wo);
    wo.socket_path = socket().c_str();
    wo.endpoint = "chat";
    wo.worker_name = "c-worker";
    ASSERT_EQ(fairsched_worker_connect(&wo, &worker_), FAIRSCHED_OK)
        << fairsched_last_error_message();
    EXPECT_EQ(fairsched_worker_connected(worker_), 1);
    EXPECT_GE(fairsched_worker_event_fd(worker_), 0);
    // Nothing assigned before it states a capacity.
    EXPECT_EQ(fairsched_worker_wait(worker_, kMs), FAIRSCHED_ERR_TIMED_OUT);
    engine_ = std::make_unique<CWorker>(worker_);
    worker_thread_ = std::thread([this] { engine_->run(stop_); });

    fairsched_options o;
    fairsched_options_init(&o);
    o.socket_path = socket().c_str();
    ASSERT_EQ(fairsched_connect(&o, &client_), FAIRSCHED_OK) << fairsched_last_error_message();
    ASSERT_EQ(fairsched_open_tenant(client_, "acme", nullptr, &tenant_), FAIRSCHED_OK)
        << fairsched_last_error_message();
  }

  void TearDown() override {
    stop_.store(true);
    if (worker_thread_.joinable()) worker_thread_.join();
    if (engine_) {
      EXPECT_EQ(engine_->error(), "");
    }
    fairsched_close(client_);
    fairsched_worker_close(worker_);
    if (daemon_) {
      EXPECT_EQ(daemon_->terminate(), 0);
    }
  }

  const std::string& socket() const { return socket_; }

  // Submits a streamed request; its id, or 0 (after a test failure).
  std::uint64_t submit(Seen s, const std::string& params, std::uint32_t max_output_tokens,
                       std::uint32_t counts_only_prompt = 0) {
    fairsched_submit_request r;
    fairsched_submit_request_init(&r);
    r.tenant = tenant_;
    r.endpoint = "chat";
    r.max_output_tokens = max_output_tokens;
    r.stream = 1;
    r.params = params.data();
    r.params_bytes = params.size();
    if (counts_only_prompt > 0) {
      r.counts_only = 1;
      r.prompt_token_count = counts_only_prompt;
    } else {
      r.prompt = s.prompt.data();
      r.prompt_tokens = s.prompt.size();
    }
    s.tag = 1000 + seen_.size();
    r.tag = s.tag;
    std::uint64_t id = 0;
    const fairsched_error e = fairsched_submit(client_, &r, &id);
    EXPECT_EQ(e, FAIRSCHED_OK) << fairsched_last_error_message();
    if (e != FAIRSCHED_OK) return 0;
    seen_.emplace(id, std::move(s));
    return id;
  }

  // Waits and polls until `pred` holds or `timeout` passes.
  template <class Pred>
  bool pollUntil(Pred&& pred, std::chrono::nanoseconds timeout = 30s) {
    fairsched_completion got[64];
    const auto until = Clock::now() + timeout;
    while (!pred()) {
      if (Clock::now() >= until) return false;
      const fairsched_error e = fairsched_wait(client_, 20 * kMs);
      if (e != FAIRSCHED_OK && e != FAIRSCHED_ERR_TIMED_OUT) {
        ADD_FAILURE() << "wait: " << fairsched_last_error_message();
        return false;
      }
      const std::size_t n = fairsched_poll(client_, got, 64);
      for (std::size_t i = 0; i < n; ++i) account(seen_, got[i]);
    }
    return true;
  }

  testing::TempDir tmp_{"fairsched-c-api"};
  const std::string socket_ = tmp_.path() + "/fairsched.sock";  // the C options point into it
  std::optional<daemon::ForkedDaemon> daemon_;
  fairsched_worker* worker_ = nullptr;
  std::unique_ptr<CWorker> engine_;
  std::atomic<bool> stop_{false};
  std::thread worker_thread_;
  fairsched_client* client_ = nullptr;
  std::uint32_t tenant_ = 0;
  std::map<std::uint64_t, Seen> seen_;
};

TEST_F(CApiWithDaemon, StreamedRequestsGetEveryReferenceTokenInOrderThenOneFinal) {
  constexpr int kRequests = 24;  // three times the worker's sequences: some queue
  std::vector<std::string> params;
  params.reserve(kRequests + 1);
  std::uint64_t expected_tokens = 0;
  for (int i = 0; i < kRequests; ++i) {
    Seen s;
    s.prompt = promptFor(static_cast<std::uint64_t>(i) + 7);
    s.want = 1 + static_cast<std::uint32_t>(i * 5 % 40);
    expected_tokens += s.want;
    params.push_back(paramsFor(s.want));
    ASSERT_NE(submit(std::move(s), params.back(), 64), 0u);
  }
  // Counts only: the worker sees the length, no ids, and serves j + 1.
  Seen counted;
  counted.want = 6;
  expected_tokens += counted.want;
  params.push_back(paramsFor(counted.want));
  const std::uint64_t counted_id = submit(std::move(counted), params.back(), 16, 5);
  ASSERT_NE(counted_id, 0u);

  ASSERT_TRUE(pollUntil([&] {
    for (const auto& [id, s] : seen_)
      if (s.finals == 0) return false;
    return true;
  })) << "not every request ended";
  for (const auto& [id, s] : seen_) {
    SCOPED_TRACE("request " + std::to_string(id));
    EXPECT_EQ(s.error, "");
    EXPECT_EQ(s.finals, 1);
    const fairsched_completion& f = s.final_completion;
    EXPECT_EQ(f.status, FAIRSCHED_STATUS_OK) << fairsched_status_name(f.status);
    EXPECT_EQ(f.partial, 0);
    EXPECT_EQ(f.output_tokens, s.want);
    EXPECT_EQ(s.tokens.size(), s.want);
    EXPECT_EQ(f.input_tokens, id == counted_id ? 5u : s.prompt.size());
    EXPECT_GT(f.time_to_first_token_ns, 0) << "the worker waits a step before its first token";
    EXPECT_EQ(f.time_to_first_token_ns % 1000, 0) << "microsecond resolution";
    EXPECT_EQ(fairsched_http_status(&f), 200);
  }
  stop_.store(true);
  worker_thread_.join();
  fairsched_worker_stats st;
  fairsched_worker_get_stats(worker_, &st);
  EXPECT_EQ(st.assigned, kRequests + 1u);
  EXPECT_EQ(st.finished, kRequests + 1u);
  EXPECT_EQ(st.aborted, 0u);
  EXPECT_EQ(st.tokens_emitted, expected_tokens);
  EXPECT_EQ(engine_->tokensEmitted(), expected_tokens);
}

TEST_F(CApiWithDaemon, CancelEndsARunningRequestCancelledWithTheTokensStreamedSoFar) {
  constexpr std::uint32_t kLong = 20000;  // seconds at a token per 200 µs step
  Seen s;
  s.prompt = promptFor(3);
  s.want = kLong;
  const std::string params = paramsFor(kLong);
  const std::uint64_t id = submit(std::move(s), params, kLong);
  ASSERT_NE(id, 0u);
  ASSERT_TRUE(pollUntil([&] { return seen_[id].tokens.size() >= 3; }))
      << "no tokens from the running request";
  ASSERT_EQ(fairsched_cancel(client_, id), FAIRSCHED_OK) << fairsched_last_error_message();
  ASSERT_TRUE(pollUntil([&] { return seen_[id].finals > 0; }, 10s)) << "no final completion";
  const Seen& got = seen_[id];
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.final_completion.status, FAIRSCHED_STATUS_CANCELLED)
      << fairsched_status_name(got.final_completion.status);
  EXPECT_GE(got.final_completion.output_tokens, 3u);
  EXPECT_LT(got.final_completion.output_tokens, kLong);
  EXPECT_EQ(got.tokens.size(), got.final_completion.output_tokens)
      << "the CANCELLED completion counts the tokens the client received";
  // No longer outstanding: the C++ error maps to its C code, with a message.
  EXPECT_EQ(fairsched_cancel(client_, id), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(fairsched_last_error_message(), "");

  // The freed sequence serves the next request to the end.
  Seen next;
  next.prompt = promptFor(4);
  next.want = 5;
  const std::string next_params = paramsFor(next.want);
  const std::uint64_t next_id = submit(std::move(next), next_params, 8);
  ASSERT_NE(next_id, 0u);
  ASSERT_TRUE(pollUntil([&] { return seen_[next_id].finals > 0; }, 10s));
  EXPECT_EQ(seen_[next_id].error, "");
  EXPECT_EQ(seen_[next_id].final_completion.status, FAIRSCHED_STATUS_OK);
  EXPECT_EQ(seen_[next_id].tokens.size(), 5u);

  stop_.store(true);
  worker_thread_.join();
  fairsched_worker_stats st;
  fairsched_worker_get_stats(worker_, &st);
  EXPECT_EQ(st.assigned, 2u);
  EXPECT_EQ(st.aborted, 1u);
  EXPECT_EQ(st.finished, 2u);
}

TEST_F(CApiWithDaemon, SubmitAndWaitOnAStreamedRequestReturnsOnlyTheFinal) {
  const std::vector<std::uint32_t> prompt = promptFor(5);
  const std::string params = paramsFor(4);
  fairsched_submit_request r = testing::makeCRequest(tenant_, prompt, 8);
  r.stream = 1;
  r.params = params.data();
  r.params_bytes = params.size();
  fairsched_completion done;
  ASSERT_EQ(fairsched_submit_and_wait(client_, &r, 10'000 * kMs, &done), FAIRSCHED_OK)
      << fairsched_last_error_message();
  EXPECT_EQ(done.partial, 0);
  EXPECT_EQ(done.tokens, nullptr);
  EXPECT_EQ(done.status, FAIRSCHED_STATUS_OK);
  EXPECT_EQ(done.output_tokens, 4u);
  EXPECT_EQ(done.input_tokens, prompt.size());
  fairsched_completion stray[4];
  EXPECT_EQ(fairsched_poll(client_, stray, 4), 0u) << "its chunks went nowhere";
}

// A request carrying its prefix identity is served as any other (the
// endpoint here routes by room); a prefix without hashes, or over 1024, is
// the caller's error.
TEST_F(CApiWithDaemon, APrefixTravelsWithARequestAndABadOneIsRefused) {
  const std::vector<std::uint32_t> prompt = promptFor(6);
  const std::vector<std::uint64_t> prefix =
      fairsched::prefixBlockHashes(prompt, fairsched::kDefaultPrefixBlockTokens);
  fairsched_submit_request r = testing::makeCRequest(tenant_, prompt, 8);
  const std::uint64_t one = 7;
  r.prefix = prefix.empty() ? &one : prefix.data();
  r.prefix_blocks = prefix.empty() ? 1 : prefix.size();
  fairsched_completion done;
  ASSERT_EQ(fairsched_submit_and_wait(client_, &r, 10'000 * kMs, &done), FAIRSCHED_OK)
      << fairsched_last_error_message();
  EXPECT_EQ(done.status, FAIRSCHED_STATUS_OK);
  EXPECT_EQ(done.input_tokens, prompt.size()) << "the hashes are not prompt tokens";
  std::uint64_t id = 0;
  r.prefix = nullptr;
  EXPECT_EQ(fairsched_submit(client_, &r, &id), FAIRSCHED_ERR_INVALID_ARGUMENT);
  const std::vector<std::uint64_t> too_many(1025, 1);
  r.prefix = too_many.data();
  r.prefix_blocks = too_many.size();
  EXPECT_EQ(fairsched_submit(client_, &r, &id), FAIRSCHED_ERR_INVALID_ARGUMENT);
}

TEST_F(CApiWithDaemon, WorkerCallsMapTheirErrorsToCodes) {
  fairsched_worker_options wo;
  fairsched_worker_options_init(&wo);
  wo.socket_path = socket().c_str();
  fairsched_worker* w = reinterpret_cast<fairsched_worker*>(0x1);
  EXPECT_EQ(fairsched_worker_connect(&wo, &w), FAIRSCHED_ERR_INVALID_ARGUMENT) << "no endpoint";
  EXPECT_EQ(w, nullptr);
  wo.endpoint = "nope";
  EXPECT_EQ(fairsched_worker_connect(&wo, &w), FAIRSCHED_ERR_REFUSED)
      << fairsched_last_error_message();
  wo.endpoint = "chat";
  ASSERT_EQ(fairsched_worker_connect(&wo, &w), FAIRSCHED_OK) << fairsched_last_error_message();
  EXPECT_EQ(fairsched_worker_emit(w, 1, nullptr, 0), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_finish(w, 1, static_cast<fairsched_status>(99), 0, nullptr),
            FAIRSCHED_ERR_INVALID_ARGUMENT);
  const std::uint64_t hash = 42;
  EXPECT_EQ(fairsched_worker_cache_event(w, 9, &hash, 1), FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_cache_event(w, FAIRSCHED_CACHE_STORED, nullptr, 1),
            FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(fairsched_worker_cache_event(w, FAIRSCHED_CACHE_STORED, &hash, 0),
            FAIRSCHED_ERR_INVALID_ARGUMENT)
      << "no hashes";
  EXPECT_EQ(fairsched_worker_cache_event(w, FAIRSCHED_CACHE_STORED, &hash, 1), FAIRSCHED_OK);
  EXPECT_EQ(fairsched_worker_cache_event(w, FAIRSCHED_CACHE_CLEARED, nullptr, 0), FAIRSCHED_OK);
  fairsched_worker_close(w);
}

// The C form of prefixBlockHashes: the same chain, bounded by the room given.
TEST(CApi, PrefixBlockHashesAreTheHeadersChain) {
  std::vector<std::uint32_t> tokens(50);
  for (std::uint32_t i = 0; i < tokens.size(); ++i) tokens[i] = i * 7 + 1;
  const std::vector<std::uint64_t> want = fairsched::prefixBlockHashes(tokens);
  ASSERT_EQ(want.size(), 3u);
  std::uint64_t out[8] = {};
  EXPECT_EQ(fairsched_prefix_block_hashes(tokens.data(), tokens.size(), 16, out, 8), 3u);
  EXPECT_EQ(std::vector<std::uint64_t>(out, out + 3), want);
  EXPECT_EQ(fairsched_prefix_block_hashes(tokens.data(), tokens.size(), 16, out, 2), 2u);
  EXPECT_EQ(fairsched_prefix_block_hashes(tokens.data(), tokens.size(), 0, out, 8), 0u);
  EXPECT_EQ(fairsched_prefix_block_hashes(nullptr, 5, 16, out, 8), 0u);
}

// What worker.hpp has beside the loop, in C: finish with the prompt count
// the engine made (the client's completion reports it), the endpoint's name,
// and the daemon's id for the worker (the one `fairschedctl status` lists).
TEST_F(CApiWithDaemon, AWorkerFinishesWithItsPromptCountAndKnowsItsEndpointAndId) {
  EXPECT_STREQ(fairsched_worker_endpoint_name(worker_), "chat");
  EXPECT_STREQ(fairsched_worker_endpoint_name(nullptr), "");
  EXPECT_EQ(fairsched_worker_id(nullptr), 0u);
  const std::uint64_t id = fairsched_worker_id(worker_);
  EXPECT_NE(id, 0u);
  std::string out;
  ASSERT_EQ(testing::runFairschedctl("--socket " + socket() + " status --json", &out), 0) << out;
  const nlohmann::json workers = nlohmann::json::parse(out, nullptr, false)["workers"];
  ASSERT_EQ(workers.size(), 1u) << out;
  EXPECT_EQ(workers[0]["id"].get<std::uint64_t>(), id) << out;
  EXPECT_EQ(workers[0]["name"], "c-worker") << out;
  // This test serves the request itself.
  stop_.store(true);
  worker_thread_.join();
  ASSERT_EQ(fairsched_worker_set_capacity(worker_, 1, kWorkerKvTokens), FAIRSCHED_OK);
  Seen s;
  s.prompt = promptFor(17);
  const std::uint64_t request = submit(s, "", 8);
  ASSERT_NE(request, 0u);
  fairsched_work_item item{};
  const auto until = Clock::now() + 10s;
  std::size_t n = 0;
  while (n == 0 && Clock::now() < until) {
    (void)fairsched_worker_wait(worker_, 20 * kMs);
    n = fairsched_worker_poll(worker_, &item, 1);
  }
  ASSERT_EQ(n, 1u) << "no assignment";
  ASSERT_EQ(item.kind, FAIRSCHED_WORK_ASSIGN);
  EXPECT_EQ(item.prompt_tokens, s.prompt.size());
  const std::uint32_t t = referenceToken(s.prompt, 0);
  ASSERT_EQ(fairsched_worker_emit(worker_, item.id, &t, 1), FAIRSCHED_OK);
  ASSERT_EQ(fairsched_worker_finish_counted(worker_, item.id, FAIRSCHED_STATUS_OK, 1, 77, nullptr),
            FAIRSCHED_OK)
      << fairsched_last_error_message();
  ASSERT_TRUE(pollUntil([&] { return seen_[request].finals > 0; }));
  const Seen& got = seen_[request];
  EXPECT_EQ(got.error, "");
  EXPECT_EQ(got.final_completion.status, FAIRSCHED_STATUS_OK);
  EXPECT_EQ(got.final_completion.input_tokens, 77u) << "the engine's count, not the prompt's";
  EXPECT_EQ(got.final_completion.output_tokens, 1u);
  EXPECT_EQ(fairsched_worker_finish_counted(nullptr, 1, FAIRSCHED_STATUS_OK, 0, 0, nullptr),
            FAIRSCHED_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      fairsched_worker_finish_counted(worker_, 1, static_cast<fairsched_status>(99), 0, 0, nullptr),
      FAIRSCHED_ERR_INVALID_ARGUMENT);
}

// While the daemon drains, a worker cannot attach: fairsched_worker_connect
// returns FAIRSCHED_ERR_SHUTTING_DOWN, as its comment says; the attached one
// stays attached, and after a resume a worker attaches again.
TEST_F(CApiWithDaemon, AWorkerConnectingDuringADrainGetsShuttingDown) {
  const std::string ctl = "--socket " + socket() + " ";
  std::string out;
  ASSERT_EQ(testing::runFairschedctl(ctl + "drain", &out), 0) << out;
  fairsched_worker_options wo;
  fairsched_worker_options_init(&wo);
  wo.socket_path = socket().c_str();
  wo.endpoint = "chat";
  fairsched_worker* w = reinterpret_cast<fairsched_worker*>(0x1);
  EXPECT_EQ(fairsched_worker_connect(&wo, &w), FAIRSCHED_ERR_SHUTTING_DOWN)
      << fairsched_last_error_message();
  EXPECT_EQ(w, nullptr);
  EXPECT_NE(std::string(fairsched_last_error_message()).find("draining"), std::string::npos)
      << fairsched_last_error_message();
  EXPECT_EQ(fairsched_worker_connected(worker_), 1) << "an attached worker is not let go";
  ASSERT_EQ(testing::runFairschedctl(ctl + "resume", &out), 0) << out;
  ASSERT_EQ(fairsched_worker_connect(&wo, &w), FAIRSCHED_OK) << fairsched_last_error_message();
  EXPECT_STREQ(fairsched_worker_endpoint_name(w), "chat");
  fairsched_worker_close(w);
}

}  // namespace
}  // namespace fairsched
