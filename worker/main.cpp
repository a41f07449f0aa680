// fairsched-worker: the reference worker (docs/worker.md). Attaches to a
// worker endpoint of a running fairschedd and serves it with the
// continuous-batching engine model of [endpoints.NAME.engine] in --config
// (defaults without one), emitting the documented reference tokens.
// SIGTERM/SIGINT: finish the step, close (running requests end or are
// requeued by the daemon), exit 0.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "daemon/config/config.hpp"
#include "worker/cuda_step.hpp"
#include "worker/reference_engine.hpp"

namespace {

std::atomic<bool> g_stop{false};

void onSignal(int) {
  g_stop.store(true);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fairsched;
  CLI::App app{
      "fairsched-worker: a reference continuous-batching engine serving a worker endpoint"};
  app.set_version_flag("--version", std::string("fairsched-worker ") + FAIRSCHED_VERSION);
  std::string socket = "/run/fairsched/fairsched.sock", endpoint, config_path, name;
  app.add_option("--socket", socket, "fairschedd's socket")->capture_default_str();
  app.add_option("--endpoint", endpoint, "the executor = \"worker\" endpoint to serve")->required();
  app.add_option("--config", config_path,
                 "the daemon's TOML: the engine model is [endpoints.NAME.engine]")
      ->check(CLI::ExistingFile);
  app.add_option("--name", name, "the worker's name in the daemon's log and status");
  bool cuda = false;
  app.add_flag("--cuda", cuda, "run each engine step's work on CUDA streams");
  int device = 0;
  app.add_option("--device", device, "the CUDA device of --cuda")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  reference::EngineModel model;
  if (!config_path.empty()) {
    config::ConfigResult loaded = config::loadConfigFile(config_path);
    if (auto* err = loaded.errorOrNull()) {
      std::fprintf(stderr, "fairsched-worker: %s\n", err->toString().c_str());
      return 1;
    }
    const config::Config& cfg = loaded.value();
    const config::EndpointConfig* ep = nullptr;
    for (const auto& e : cfg.endpoints) {
      if (e.name == endpoint) ep = &e;
    }
    if (ep == nullptr) {
      std::fprintf(stderr, "fairsched-worker: %s has no endpoint '%s'\n", config_path.c_str(),
                   endpoint.c_str());
      return 1;
    }
    const config::EngineConfig& e = ep->engine;
    model = {e.max_sequences,    e.kv_tokens,       e.step_us,
             e.prefill_token_us, e.decode_token_us, e.chunked_prefill_tokens};
    model.cache_blocks = e.prefix_cache_blocks;
    model.block_tokens = ep->worker.prefix_block_tokens;
    model.kv_events = e.kv_events;
  }

  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::unique_ptr<reference::CudaStepRunner> runner;
  if (cuda) {
    reference::CudaStepRunner::Options ro;
    ro.device = device;
    ro.max_sequences = model.max_sequences;
    ro.max_tokens_per_step = model.chunked_prefill_tokens + model.max_sequences;
    auto made = reference::CudaStepRunner::create(ro);
    if (!made) {
      std::fprintf(stderr, "fairsched-worker: --cuda: %s\n", made.error().message.c_str());
      return 2;
    }
    runner = std::move(made).value();
  }

  WorkerOptions options;
  options.socket_path = socket;
  options.endpoint = endpoint;
  options.worker_name = name;
  Result<Worker> worker = Worker::connect(options);
  if (!worker) {
    std::fprintf(stderr, "fairsched-worker: %s\n", worker.error().message.c_str());
    return 1;
  }
  std::fprintf(stderr, "fairsched-worker: serving %s (%u sequences, %llu KV tokens)\n",
               endpoint.c_str(), model.max_sequences,
               static_cast<unsigned long long>(model.kv_tokens));
  reference::ReferenceEngine engine(*worker, model);
  if (runner) {
    engine.setStepWork(
        [&](std::span<const std::uint32_t> lengths, std::span<const std::uint32_t> tokens) {
          return runner->run(lengths, tokens);
        });
    std::fprintf(stderr, "fairsched-worker: each step runs on CUDA device %d\n", device);
  }
  Result<void> r = engine.run(g_stop);
  const reference::EngineStats& s = engine.stats();
  std::fprintf(stderr,
               "fairsched-worker: %llu steps, %llu tokens, %llu finished, %llu aborted, %llu of "
               "%llu prompt tokens found in the prefix cache\n",
               static_cast<unsigned long long>(s.steps), static_cast<unsigned long long>(s.tokens),
               static_cast<unsigned long long>(s.finished),
               static_cast<unsigned long long>(s.aborted),
               static_cast<unsigned long long>(s.cached_tokens),
               static_cast<unsigned long long>(s.prompt_tokens));
  if (!r) {
    std::fprintf(stderr, "fairsched-worker: %s\n", r.error().message.c_str());
    return r.error().code == ErrorCode::kDaemonLost ? 3 : 1;
  }
  return 0;
}
