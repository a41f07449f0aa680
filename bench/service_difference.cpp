#include "bench/service_difference.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>

namespace fairsched::bench {
namespace {

using Credit = std::pair<TimeNs, double>;  // (instant, normalised cost credited then)
using Interval = std::pair<TimeNs, TimeNs>;

struct TenantTimeline {
  std::vector<Credit> credits;       // sorted, one entry per instant
  std::vector<Interval> backlogged;  // sorted, disjoint, positive length
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool parseNumber(std::string_view s, double& out) {
  s = trim(s);
  if (s.empty()) return false;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(out) && out >= 0;
}

TenantTimeline buildTimeline(const std::vector<const RequestEvent*>& events, double weight,
                             const CostWeights& cost) {
  TenantTimeline tl;
  std::vector<std::pair<TimeNs, int>> changes;  // +1 arrival, -1 leaves the queue
  for (const RequestEvent* e : events) {
    const TimeNs leaves = e->dispatch >= 0 ? e->dispatch : e->completion;
    changes.push_back({e->arrival, +1});
    changes.push_back({std::max(leaves, e->arrival), -1});
    if (e->dispatch >= 0) {
      tl.credits.push_back({e->dispatch, cost.of(e->input_tokens, e->output_tokens) / weight});
    }
  }
  std::sort(tl.credits.begin(), tl.credits.end());
  std::vector<Credit> merged;
  for (const Credit& c : tl.credits) {
    if (!merged.empty() && merged.back().first == c.first) {
      merged.back().second += c.second;
    } else {
      merged.push_back(c);
    }
  }
  tl.credits = std::move(merged);

  std::sort(changes.begin(), changes.end());
  int waiting = 0;
  TimeNs start = 0;
  for (std::size_t k = 0; k < changes.size();) {
    const TimeNs t = changes[k].first;
    const int before = waiting;
    for (; k < changes.size() && changes[k].first == t; ++k) waiting += changes[k].second;
    if (before == 0 && waiting > 0) start = t;
    if (before > 0 && waiting == 0 && t > start) tl.backlogged.push_back({start, t});
  }
  return tl;
}

// max D − min D over [s, e], D(s⁻) = 0, D = credits of a − credits of b.
double windowDifference(const TenantTimeline& a, const TenantTimeline& b, TimeNs s, TimeNs e) {
  auto firstAt = [s](const std::vector<Credit>& c) {
    return std::lower_bound(c.begin(), c.end(), Credit{s, -1e300});
  };
  auto ia = firstAt(a.credits), ib = firstAt(b.credits);
  double d = 0, hi = 0, lo = 0;
  for (;;) {
    const TimeNs ta = ia != a.credits.end() && ia->first <= e ? ia->first : kNever;
    const TimeNs tb = ib != b.credits.end() && ib->first <= e ? ib->first : kNever;
    const TimeNs t = std::min(ta, tb);
    if (t == kNever) break;
    if (ta == t) d += (ia++)->second;
    if (tb == t) d -= (ib++)->second;
    hi = std::max(hi, d);
    lo = std::min(lo, d);
  }
  return hi - lo;
}

}  // namespace

std::string CostWeights::toString() const {
  std::string out;
  auto term = [&](double c, const char* name) {
    if (c == 0) return;
    if (!out.empty()) out += "+";
    char buf[64];
    if (!*name) {
      std::snprintf(buf, sizeof buf, "%g", c);
    } else if (c == 1) {
      std::snprintf(buf, sizeof buf, "%s", name);
    } else {
      std::snprintf(buf, sizeof buf, "%g*%s", c, name);
    }
    out += buf;
  };
  term(per_request, "");
  term(per_input, "input");
  term(per_output, "output");
  return out.empty() ? "0" : out;
}

std::variant<CostWeights, std::string> parseCostWeights(std::string_view expr) {
  CostWeights w{0, 0, 0};
  if (trim(expr).empty()) return std::string("empty cost expression");
  std::size_t pos = 0;
  while (pos <= expr.size()) {
    const std::size_t plus = std::min(expr.find('+', pos), expr.size());
    const std::string_view termText = trim(expr.substr(pos, plus - pos));
    const std::size_t star = termText.find('*');
    std::string_view name = termText;
    double coef = 1;
    if (star != std::string_view::npos) {
      name = trim(termText.substr(star + 1));
      if (!parseNumber(termText.substr(0, star), coef)) {
        return "bad coefficient in '" + std::string(termText) + "'";
      }
    }
    if (name == "input") {
      w.per_input += coef;
    } else if (name == "output") {
      w.per_output += coef;
    } else if (star == std::string_view::npos && parseNumber(name, coef)) {
      w.per_request += coef;
    } else {
      return "bad term '" + std::string(termText) +
             "' (expected input, output, C*input, C*output or a constant)";
    }
    pos = plus + 1;
  }
  if (w.per_request == 0 && w.per_input == 0 && w.per_output == 0) {
    return std::string("the cost is zero for every request");
  }
  return w;
}

ServiceDifference maxServiceDifference(const std::vector<RequestEvent>& events,
                                       const std::map<std::string, double>& weights,
                                       const CostWeights& cost) {
  std::map<std::string, std::vector<const RequestEvent*>> byTenant;
  for (const RequestEvent& e : events) byTenant[e.tenant].push_back(&e);
  std::vector<std::pair<std::string, TenantTimeline>> timelines;
  for (const auto& [name, list] : byTenant) {
    auto w = weights.find(name);
    const double weight = w != weights.end() && w->second > 0 ? w->second : 1.0;
    timelines.push_back({name, buildTimeline(list, weight, cost)});
  }
  ServiceDifference best;
  for (std::size_t i = 0; i < timelines.size(); ++i) {
    for (std::size_t j = i + 1; j < timelines.size(); ++j) {
      const auto& a = timelines[i].second.backlogged;
      const auto& b = timelines[j].second.backlogged;
      std::size_t ia = 0, ib = 0;
      while (ia < a.size() && ib < b.size()) {
        const TimeNs s = std::max(a[ia].first, b[ib].first);
        const TimeNs e = std::min(a[ia].second, b[ib].second);
        if (e > s) {
          const double d = windowDifference(timelines[i].second, timelines[j].second, s, e);
          if (d > best.value) {
            best = {d, timelines[i].first, timelines[j].first, s, e};
          }
        }
        if (a[ia].second < b[ib].second) {
          ++ia;
        } else {
          ++ib;
        }
      }
    }
  }
  return best;
}

WindowedDifference windowedServiceDifference(const std::vector<RequestEvent>& events,
                                             const std::map<std::string, double>& weights,
                                             TimeNs window, const CostWeights& cost,
                                             Activity activity) {
  WindowedDifference out;
  if (events.empty() || window <= 0) return out;
  TimeNs start = events.front().arrival, end = start;
  std::map<std::string, std::size_t> index;
  for (const RequestEvent& e : events) {
    start = std::min(start, e.arrival);
    end = std::max(end, e.completion);
    index.emplace(e.tenant, 0);
  }
  std::size_t n = 0;
  std::vector<double> weight;
  for (auto& [name, i] : index) {
    i = n++;
    const auto w = weights.find(name);
    weight.push_back(w != weights.end() && w->second > 0 ? w->second : 1.0);
  }
  const auto windows = static_cast<std::size_t>((end - start) / window) + 1;
  std::vector<double> service(n * windows, 0.0);
  std::vector<char> active(n * windows, 0);
  auto at = [&](TimeNs t) {
    return std::min(windows - 1, static_cast<std::size_t>((t - start) / window));
  };
  for (const RequestEvent& e : events) {
    const std::size_t t = index[e.tenant];
    TimeNs until = std::max(e.arrival, e.completion);
    if (activity == Activity::kWaiting) {
      if (e.dispatch >= 0) until = e.dispatch;
      if (until <= e.arrival) until = -1;  // never waited
    }
    if (until >= e.arrival) {
      for (std::size_t w = at(e.arrival); w <= at(until); ++w) active[t * windows + w] = 1;
    }
    if (e.dispatch < 0 || e.status != Status::kOk) continue;
    const double total =
        (cost.per_request + cost.per_input * e.input_tokens + cost.per_output * e.output_tokens) /
        weight[t];
    const TimeNs d = e.dispatch, c = std::max(e.dispatch, e.completion);
    if (c == d) {
      service[t * windows + at(d)] += total;
      continue;
    }
    for (std::size_t w = at(d); w <= at(c); ++w) {
      const TimeNs ws = start + static_cast<TimeNs>(w) * window;
      const TimeNs overlap = std::min(c, ws + window) - std::max(d, ws);
      if (overlap > 0) {
        service[t * windows + w] +=
            total * static_cast<double>(overlap) / static_cast<double>(c - d);
      }
    }
  }
  double sum = 0;
  for (std::size_t w = 0; w < windows; ++w) {
    double lo = 0, hi = 0;
    std::size_t count = 0;
    for (std::size_t t = 0; t < n; ++t) {
      if (!active[t * windows + w]) continue;
      const double v = service[t * windows + w];
      lo = count == 0 ? v : std::min(lo, v);
      hi = count == 0 ? v : std::max(hi, v);
      ++count;
    }
    if (count < 2) continue;
    sum += hi - lo;
    out.max = std::max(out.max, hi - lo);
    ++out.windows;
  }
  out.mean = out.windows ? sum / static_cast<double>(out.windows) : 0.0;
  return out;
}

}  // namespace fairsched::bench
