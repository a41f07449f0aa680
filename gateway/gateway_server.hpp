// fairsched-gateway's server: HTTP in front, libfairsched behind.
//
// Every generation request is authenticated by its API key, submitted to
// fairschedd as a counts-only request of the key's tenant (the gateway keeps
// the body; the request's params name it), and forwarded to the upstream
// only when the daemon assigns it to this gateway, which is at the same time
// the worker of its endpoint and states the upstream's free sequences and
// tokens as its capacity. The upstream's response streams straight back to
// the caller; the daemon gets counts (one token per streamed text chunk,
// settled by the upstream's usage at the end).
//
// One thread runs everything (an asio io_context): sessions, upstream calls,
// the completion and assignment loops, signals. Nothing blocks it except
// the control round trips of libfairsched (opening a tenant the first time,
// attaching the worker), which are bounded.
#pragma once

#include "gateway/gateway_config.hpp"

namespace fairsched::gateway {

// Serves until SIGTERM or SIGINT (then drains: stops accepting and lets the
// requests in flight finish, bounded); SIGHUP reloads the keys, the log
// level and the advertised limits from cfg.source_path. Prints
// "listening on HOST:PORT" once it accepts. Returns the exit status:
// 0 stopped cleanly, 3 could not serve.
int runGateway(GatewayConfig cfg);

}  // namespace fairsched::gateway
