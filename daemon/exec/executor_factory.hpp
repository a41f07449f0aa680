// The executors of a daemon, one per endpoint in config order, built from
// the config (docs/architecture.md §10). Server::create calls it after the daemon's
// signals are blocked, so executor threads inherit the mask; tests pass a
// function of their own (a fault-injecting executor) instead.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "daemon/config/config.hpp"
#include "daemon/error.hpp"
#include "daemon/exec/executor.hpp"

namespace fairsched::daemon {

using Executors = std::vector<std::unique_ptr<Executor>>;
using MakeExecutors = std::function<Result<Executors>(const config::Config&)>;

// cuda where configured and available (else the endpoint's fallback, or an
// error naming the endpoint), cpu otherwise.
Result<Executors> makeExecutors(const config::Config& cfg);

// The executor slot of an executor = "worker" endpoint: it runs nothing
// itself (no slots; its requests go to attached workers, server_workers.cpp).
Result<std::unique_ptr<Executor>> makeWorkerEndpointExecutor();

}  // namespace fairsched::daemon
