// fairsched-client-throughput: one thread of the C++ client keeping a number
// of requests in flight against a running daemon for a while, as the native
// baseline of bench/python_asyncio_bench.py (the Python asyncio client does
// the same in the same run). Each request's prompt is distinct and every
// streamed token is checked against the reference worker's formula.
//
//   fairsched-client-throughput --socket S [--endpoint chat] [--seconds 3]
//       [--inflight 64] [--output-tokens 1] [--prompt-tokens 8] [--stream]
//
// Prints one JSON object: submitted, completed, tokens, mismatched, lost
// (tokens of OK requests that never arrived), failed (not OK),
// submissions_per_s and tokens_per_s over the measured window.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "fairsched/client.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Outstanding {
  std::vector<std::uint32_t> prompt;
  std::uint32_t received = 0;
};

std::uint32_t referenceToken(const std::vector<std::uint32_t>& prompt, std::uint32_t j) {
  const std::uint32_t base = prompt.empty() ? 0 : prompt[j % prompt.size()];
  return base + j + 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fairsched;
  CLI::App app{"fairsched-client-throughput: one C++ client thread, requests kept in flight"};
  std::string socket, endpoint = "chat", tenant_name = "bench";
  double seconds = 3;
  std::uint32_t inflight = 64, output_tokens = 1, prompt_tokens = 8;
  bool stream = false;
  app.add_option("--socket", socket, "fairschedd's socket")->required();
  app.add_option("--endpoint", endpoint)->capture_default_str();
  app.add_option("--tenant", tenant_name)->capture_default_str();
  app.add_option("--seconds", seconds, "the measured window")->capture_default_str();
  app.add_option("--inflight", inflight)->capture_default_str();
  app.add_option("--output-tokens", output_tokens)->capture_default_str();
  app.add_option("--prompt-tokens", prompt_tokens)->capture_default_str();
  app.add_flag("--stream", stream, "stream the output tokens");
  CLI11_PARSE(app, argc, argv);

  ClientOptions o;
  o.socket_path = socket;
  o.client_name = "cpp-throughput";
  Result<Client> c = Client::connect(o);
  if (!c) {
    std::fprintf(stderr, "connect: %s\n", c.error().toString().c_str());
    return 1;
  }
  Result<Tenant> t = c->openTenant(tenant_name);
  if (!t) {
    std::fprintf(stderr, "open tenant: %s\n", t.error().toString().c_str());
    return 1;
  }

  std::unordered_map<RequestId, Outstanding> out;
  std::uint64_t next = 0, submitted = 0, completed = 0, tokens = 0, mismatched = 0, lost = 0,
                failed = 0, ring_full = 0;
  auto submitOne = [&]() -> bool {
    Outstanding req;
    req.prompt.resize(prompt_tokens);
    for (std::uint32_t k = 0; k < prompt_tokens; ++k) {
      req.prompt[k] = static_cast<std::uint32_t>(next * 7 + k);
    }
    SubmitRequest r;
    r.tenant = *t;
    r.endpoint = endpoint;
    r.prompt = req.prompt;
    r.max_output_tokens = output_tokens;
    r.stream = stream;
    Result<RequestId> id = c->submit(r);
    if (!id) {
      if (id.error().code == ErrorCode::kRingFull) {
        ++ring_full;
        return false;
      }
      std::fprintf(stderr, "submit: %s\n", id.error().toString().c_str());
      std::exit(1);
    }
    ++next;
    ++submitted;
    out.emplace(*id, std::move(req));
    return true;
  };

  const auto start = Clock::now();
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<Completion> done;
  bool measuring = true;
  std::uint64_t window_completed = 0, window_tokens = 0;
  while (measuring || !out.empty()) {
    const auto now = Clock::now();
    if (measuring && now >= end) {
      measuring = false;
      window_completed = completed;
      window_tokens = tokens;
    }
    if (!measuring && now >= end + 10s) break;  // the rest is counted lost
    while (measuring && out.size() < inflight && submitOne()) {
    }
    Result<void> w = c->wait(1ms);
    if (!w && w.error().code != ErrorCode::kTimedOut) {
      std::fprintf(stderr, "wait: %s\n", w.error().toString().c_str());
      return 1;
    }
    done.clear();
    c->poll(done);
    for (const Completion& d : done) {
      auto it = out.find(d.request_id);
      if (it == out.end()) continue;
      Outstanding& req = it->second;
      if (d.partial) {
        for (std::size_t k = 0; k < d.tokens.size(); ++k) {
          const auto j = static_cast<std::uint32_t>(d.first_token + k);
          if (j != req.received + k || d.tokens[k] != referenceToken(req.prompt, j)) ++mismatched;
        }
        req.received += static_cast<std::uint32_t>(d.tokens.size());
        tokens += d.tokens.size();
        continue;
      }
      ++completed;
      if (!stream) tokens += d.output_tokens;
      if (d.status != Status::kOk) {
        ++failed;
      } else if (stream && req.received < d.output_tokens) {
        lost += d.output_tokens - req.received;
      }
      out.erase(it);
    }
  }
  lost += out.size();
  nlohmann::json j = {{"client", "c++"},
                      {"seconds", seconds},
                      {"inflight", inflight},
                      {"output_tokens", output_tokens},
                      {"stream", stream},
                      {"submitted", submitted},
                      {"completed", completed},
                      {"tokens", tokens},
                      {"mismatched", mismatched},
                      {"lost", lost},
                      {"failed", failed},
                      {"ring_full", ring_full},
                      {"submissions_per_s", static_cast<double>(window_completed) / seconds},
                      {"tokens_per_s", static_cast<double>(window_tokens) / seconds}};
  std::printf("%s\n", j.dump().c_str());
  return mismatched == 0 && lost == 0 && failed == 0 ? 0 : 1;
}
