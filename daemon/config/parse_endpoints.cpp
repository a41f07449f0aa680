// [endpoints.<name>]: batching, cost, default limits and the executor of each
// endpoint, with its [endpoints.<name>.cpu] and [endpoints.<name>.cuda] tables.
#include <string>
#include <utility>
#include <variant>

#include "daemon/config/key_table.hpp"
#include "daemon/config/parse_limits.hpp"
#include "daemon/config/sections.hpp"
#include "shm/worker_protocol.hpp"

namespace fairsched::config {

namespace {

constexpr EnumName<EndpointKind> kEndpointKinds[] = {{"streaming", EndpointKind::kStreaming},
                                                     {"batch", EndpointKind::kBatch}};
constexpr EnumName<CostModel> kCostModels[] = {{"requests", CostModel::kRequests},
                                               {"tokens", CostModel::kTokens},
                                               {"adaptive", CostModel::kAdaptive}};
constexpr EnumName<core::Fairness> kFairness[] = {{"drr", core::Fairness::kDrr},
                                                  {"recent", core::Fairness::kRecent},
                                                  {"vtc", core::Fairness::kVtc}};
constexpr EnumName<ExecutorKind> kExecutors[] = {
    {"cpu", ExecutorKind::kCpu}, {"cuda", ExecutorKind::kCuda}, {"worker", ExecutorKind::kWorker}};
constexpr EnumName<core::Routing> kRoutings[] = {{"roomiest", core::Routing::kRoomiest},
                                                 {"prefix", core::Routing::kPrefix}};
// What a cuda endpoint may fall back to.
constexpr EnumName<ExecutorKind> kFallbackExecutors[] = {{"cpu", ExecutorKind::kCpu}};

constexpr KeyRule<CpuExecutorConfig> kCpuKeys[] = {
    {"per_batch_us", nonNegativeDoubleKey<&CpuExecutorConfig::per_batch_us>},
    {"per_token_us", nonNegativeDoubleKey<&CpuExecutorConfig::per_token_us>},
    {"threads", intKey<&CpuExecutorConfig::threads, 1>},
    {"workload", boolKey<&CpuExecutorConfig::workload>},
};

constexpr KeyRule<CudaExecutorConfig> kCudaKeys[] = {
    {"device", intKey<&CudaExecutorConfig::device, 0>},
    {"streams", intKey<&CudaExecutorConfig::streams, 1>},
    {"staging_bytes", intKey<&CudaExecutorConfig::staging_bytes, 1>},
    {"fallback", enumKey<&CudaExecutorConfig::fallback, kFallbackExecutors>},
};

// A worker's segment (shm::workerGeometry) must be one the layout allows,
// or every worker of the endpoint is refused at attach. Laid out with 64 KiB
// pages, the largest a host uses: it then fits any page size.
bool checkWorkerSegment(ParseContext& ctx, const toml::node& table, const std::string& path,
                        WorkerEndpointConfig& w) {
  const shm::Result<shm::Layout> layout =
      shm::computeLayout(shm::workerGeometry(w.max_sequences, w.max_prompt_tokens), 65536);
  if (!layout.ok()) {
    const shm::Error* err = &layout.error();
    return ctx.fail(
        table, path,
        std::to_string(w.max_sequences) + " sequences of " + std::to_string(w.max_prompt_tokens) +
            " prompt tokens need a worker segment over the layout's limit (" + err->message + ")");
  }
  return true;
}

constexpr KeyRule<WorkerEndpointConfig> kWorkerKeys[] = {
    {"requeue_on_loss", boolKey<&WorkerEndpointConfig::requeue_on_loss>},
    {"max_prompt_tokens", intKey<&WorkerEndpointConfig::max_prompt_tokens, 1, 1U << 18>},
    {"max_sequences", intKey<&WorkerEndpointConfig::max_sequences, 2, 4096>},
    {"client_buffer_chunks", intKey<&WorkerEndpointConfig::client_buffer_chunks, 1, 1U << 20>},
    {"headroom", intKey<&WorkerEndpointConfig::headroom, 0, 4096>},
    {"preemption", boolKey<&WorkerEndpointConfig::preemption>},
    {"max_preemptions_per_s", positiveDoubleKey<&WorkerEndpointConfig::max_preemptions_per_s>},
    {"min_progress_tokens", intKey<&WorkerEndpointConfig::min_progress_tokens, 1, 1U << 20>},
    {"preempt_for_share", boolKey<&WorkerEndpointConfig::preempt_for_share>},
    {"routing", enumKey<&WorkerEndpointConfig::routing, kRoutings>},
    {"prefix_block_tokens", intKey<&WorkerEndpointConfig::prefix_block_tokens, 1, 4096>},
    {"max_prefix_blocks", intKey<&WorkerEndpointConfig::max_prefix_blocks, 1, 65536>},
    {"load_slack", nonNegativeDoubleKey<&WorkerEndpointConfig::load_slack>},
    {"locality_slack", nonNegativeDoubleKey<&WorkerEndpointConfig::locality_slack>},
    {"cache_blocks", intKey<&WorkerEndpointConfig::cache_blocks, 0, 1ULL << 32>},
    {kTableCheck, checkWorkerSegment},
};

constexpr KeyRule<EngineConfig> kEngineKeys[] = {
    {"max_sequences", intKey<&EngineConfig::max_sequences, 1, 4096>},
    {"kv_tokens", intKey<&EngineConfig::kv_tokens, 1>},
    {"step_us", nonNegativeDoubleKey<&EngineConfig::step_us>},
    {"prefill_token_us", nonNegativeDoubleKey<&EngineConfig::prefill_token_us>},
    {"decode_token_us", nonNegativeDoubleKey<&EngineConfig::decode_token_us>},
    {"chunked_prefill_tokens", intKey<&EngineConfig::chunked_prefill_tokens, 1>},
    {"prefix_cache_blocks", intKey<&EngineConfig::prefix_cache_blocks, 0, 1ULL << 32>},
    {"kv_events", boolKey<&EngineConfig::kv_events>},
};

// The endpoint's defaults for every tenant; nothing less specific to inherit.
bool readLimits(ParseContext& ctx, const toml::node& n, const std::string& path,
                EndpointConfig& ep) {
  return readLimitList(ctx, n, path, {}, ep.limits);
}

constexpr KeyRule<EndpointConfig> kEndpointKeys[] = {
    {"kind", enumKey<&EndpointConfig::kind, kEndpointKinds>},
    {"cost", enumKey<&EndpointConfig::cost, kCostModels>},
    {"quantum", intKey<&EndpointConfig::quantum, 1>},
    {"max_batch_requests", intKey<&EndpointConfig::max_batch_requests, 1>},
    {"max_batch_tokens", intKey<&EndpointConfig::max_batch_tokens, 1>},
    {"max_wait_us", intKey<&EndpointConfig::max_wait_us, 0, kMaxMicros>},
    {"max_output_tokens", intKey<&EndpointConfig::max_output_tokens, 0>},
    {"latency_target_ms", intKey<&EndpointConfig::latency_target_ms, 0, kMaxMillis>},
    {"batch_timeout_ms", intKey<&EndpointConfig::batch_timeout_ms, 0, kMaxMillis>},
    {"executor", enumKey<&EndpointConfig::executor, kExecutors>},
    {"fairness", enumKey<&EndpointConfig::fairness, kFairness>},
    {"half_life_s", positiveDoubleKey<&EndpointConfig::half_life_s>},
    {"limits", readLimits},
    {"cpu", tableKey<&EndpointConfig::cpu, kCpuKeys>},
    {"cuda", tableKey<&EndpointConfig::cuda, kCudaKeys>},
    {"worker", tableKey<&EndpointConfig::worker, kWorkerKeys>},
    {"engine", tableKey<&EndpointConfig::engine, kEngineKeys>},
};

}  // namespace

bool parseEndpoints(ParseContext& ctx, const toml::node& n, const std::string& path, Config&) {
  const toml::table* t = ctx.readTable(n, path);
  if (t == nullptr) return false;
  if (entryCount(*t) == 0) return ctx.fail(n, path, "at least one endpoint is required");
  if (entryCount(*t) > kMaxIds) {
    return ctx.fail(n, path, "at most " + std::to_string(kMaxIds) + " endpoints are supported");
  }
  for (const TomlEntry& e : entriesInFileOrder(*t)) {
    const std::string name(e.key);
    const std::string epPath = join(path, name);
    if (!ctx.checkName(e.key_line, epPath, name, kMaxEndpointNameBytes)) return false;
    if (ctx.readTable(*e.value, epPath) == nullptr) return false;
    EndpointConfig ep;
    ep.name = name;
    ep.source_line = lineOf(*e.value);
    if (!readKeys(ctx, *e.value, epPath, kEndpointKeys, ep)) return false;
    ctx.addEndpoint(std::move(ep));
  }
  return true;
}

}  // namespace fairsched::config
