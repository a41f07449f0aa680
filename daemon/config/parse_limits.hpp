// Limit lists ("limits = [...]") and limit tables keyed by endpoint, at the
// three levels that set them: endpoint defaults, tier and tenant overrides.
//
// A list's elements are strings in core::parseLimitSpec's grammar, or inline
// tables { limit = "<limit>", scope = "host" | "fleet" }. Each level's list
// is relative to the less specific levels ("inherited"): a bare "unlimited"
// removes every inherited limit by adding an amount-0 entry for its slot (its
// unit and window), and "unlimited <unit>/<window>" removes one slot. Amount 0
// never comes out of parseLimitSpec, so it can only mean "no limit here".
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "daemon/config/parse_context.hpp"
#include "daemon/core/limit_spec.hpp"

namespace fairsched::config {

// One level's limit list for one endpoint, into `out` (replaced).
// A fleet-scoped limit needs ctx.config().fleet, so [fleet] is read first.
bool readLimitList(ParseContext& ctx, const toml::node& n, const std::string& path,
                   const std::vector<core::LimitSpec>& inherited,
                   std::vector<core::LimitSpec>& out);

// The limits of the less specific levels for one endpoint.
using InheritedLimits = std::function<std::vector<core::LimitSpec>(const EndpointConfig&)>;

// A `limits` table keyed by endpoint name, each value a limit list; appends
// to `out` in file order. Every key must name an endpoint already read.
bool readLimitTable(ParseContext& ctx, const toml::node& n, const std::string& path,
                    const InheritedLimits& inheritedFor, std::vector<EndpointLimits>& out);

// What a tenant of `tier` inherits on `endpoint`: the endpoint's limits, then
// the tier's for `endpoint` in the slots the endpoint leaves open.
std::vector<core::LimitSpec> endpointAndTierLimits(const EndpointConfig& endpoint,
                                                   const TierConfig& tier);

}  // namespace fairsched::config
