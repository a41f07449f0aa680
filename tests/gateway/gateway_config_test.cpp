#include "gateway/gateway_config.hpp"

#include <gtest/gtest.h>

#include <string>
#include <variant>

namespace fairsched::gateway {

namespace {

const std::string kDigest(64, 'a');
const std::string kMinimal = "[upstream]\nurl = \"http://127.0.0.1:8000\"\n";

std::string errorOf(const std::string& text) {
  auto r = parseGatewayConfig(text, "gw.toml");
  if (r.ok()) return "OK";
  return r.error().toString();
}

}  // namespace

TEST(GatewayConfig, DefaultsAndAFullFile) {
  auto r = parseGatewayConfig(kMinimal +
                              "[gateway]\nlisten = \"0.0.0.0:9000\"\nendpoint = \"chat\"\n"
                              "[keys.alice]\nsha256 = \"" +
                              kDigest +
                              "\"\ntenant = \"acme\"\ntier = \"paid\"\npriority = 3\n"
                              "routes = [\"chat.completions\", \"models\"]\n");
  ASSERT_TRUE(r.ok()) << errorOf(kMinimal);
  const GatewayConfig& c = r.value();
  EXPECT_EQ(c.listen_host, "0.0.0.0");
  EXPECT_EQ(c.listen_port, 9000);
  EXPECT_EQ(c.upstreams[0].host, "127.0.0.1");
  EXPECT_EQ(c.upstreams[0].port, 8000);
  ASSERT_EQ(c.keys.size(), 1u);
  EXPECT_EQ(c.keys[0].tenant, "acme");
  EXPECT_EQ(*c.keys[0].tier, "paid");
  EXPECT_EQ(c.keys[0].priority, 3);
  EXPECT_EQ(c.keys[0].routes, routeBit(Route::kChatCompletions) | routeBit(Route::kModels));
}

TEST(GatewayConfig, UpstreamUrlWithPrefixAndDefaultPort) {
  auto r = parseGatewayConfig("[upstream]\nurl = \"http://engine/api/\"\n");
  ASSERT_TRUE(r.ok());
  const auto& u = r.value().upstreams.at(0);
  EXPECT_EQ(u.host, "engine");
  EXPECT_EQ(u.port, 80);
  EXPECT_EQ(u.prefix, "/api");
}

TEST(GatewayConfig, EachBadFieldNamesItsLineAndKey) {
  EXPECT_EQ(errorOf(""),
            "gw.toml:1: upstream: missing required table ([upstream], or [[upstreams]] for "
            "several)");
  EXPECT_EQ(errorOf("[upstream]\nurl = \"https://x\"\n").substr(0, 31),
            "gw.toml:2: upstream.url: expect");
  EXPECT_EQ(errorOf(kMinimal + "[gateway]\nlisten = \"nowhere\"\n"),
            "gw.toml:4: gateway.listen: expected HOST:PORT, got 'nowhere'");
  EXPECT_EQ(errorOf(kMinimal + "[gateway]\nmax_conections = 3\n").substr(0, 40),
            "gw.toml:4: gateway.max_conections: unkno");
  EXPECT_EQ(errorOf(kMinimal + "[keys.a]\nsha256 = \"abc\"\ntenant = \"t\"\n"),
            "gw.toml:4: keys.a.sha256: expected 64 hex digits (sha256sum of the key), got 'abc'");
  EXPECT_EQ(errorOf(kMinimal + "[keys.a]\nsha256 = \"" + kDigest + "\"\n"),
            "gw.toml:3: keys.a.tenant: missing required key");
  EXPECT_EQ(errorOf(kMinimal + "[keys.a]\nsha256 = \"" + kDigest +
                    "\"\ntenant = \"t\"\nroutes = [\"audio.speech\"]\n"),
            "gw.toml:6: keys.a.routes: unknown route 'audio.speech' (expected completions, "
            "chat.completions, embeddings or models)");
  EXPECT_EQ(errorOf(kMinimal + "[keys.a]\nsha256 = \"" + kDigest + "\"\ntenant = \"t\"\n" +
                    "[keys.b]\nsha256 = \"" + kDigest + "\"\ntenant = \"u\"\n"),
            "gw.toml:7: keys.b.sha256: the same digest as keys.a (line 3)");
  EXPECT_EQ(errorOf(kMinimal + "[keys.a]\nsha256 = \"" + kDigest + "\"\ntenant = \"bad name\"\n")
                .substr(0, 26),
            "gw.toml:5: keys.a.tenant: ");
}

TEST(GatewayConfig, PrefixBlockBytesDefaultsToSixtyFourAndZeroTurnsItOff) {
  auto plain = parseGatewayConfig(kMinimal);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain.value().prefix_block_bytes, 64u);
  auto off = parseGatewayConfig(kMinimal + "[gateway]\nprefix_block_bytes = 0\n");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off.value().prefix_block_bytes, 0u);
  EXPECT_EQ(errorOf(kMinimal + "[gateway]\nprefix_block_bytes = -1\n").substr(0, 40),
            "gw.toml:4: gateway.prefix_block_bytes: m");
}

TEST(GatewayConfig, ThreadsFollowTheCoresUnlessSet) {
  auto r = parseGatewayConfig(kMinimal);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().threads, 0u);  // from the cores
  r = parseGatewayConfig(kMinimal + "[gateway]\nthreads = 3\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().threads, 3u);
  EXPECT_EQ(errorOf(kMinimal + "[gateway]\nthreads = 65\n"),
            "gw.toml:4: gateway.threads: must be at most 64, got 65");
  EXPECT_EQ(errorOf(kMinimal + "[gateway]\nthreads = -1\n"),
            "gw.toml:4: gateway.threads: must not be negative, got -1");
}

TEST(GatewayConfig, SeveralUpstreamsEachWithItsOwnCapacityAndChecks) {
  auto r = parseGatewayConfig(
      "[[upstreams]]\nurl = \"http://10.0.0.1:8000\"\nmax_sequences = 32\n"
      "[[upstreams]]\nname = \"gpu1\"\nurl = \"http://10.0.0.2:8000/v\"\nhealth_path = \"\"\n"
      "eject_ms = 500\n");
  ASSERT_TRUE(r.ok()) << r.error().toString();
  const auto& u = r.value().upstreams;
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].name, "10.0.0.1:8000");  // unnamed: its HOST:PORT
  EXPECT_EQ(u[0].max_sequences, 32u);
  EXPECT_EQ(u[0].pool_connections, 32u);  // one idle connection per sequence
  EXPECT_EQ(u[0].health_path, "/health");
  EXPECT_EQ(u[1].name, "gpu1");
  EXPECT_EQ(u[1].prefix, "/v");
  EXPECT_EQ(u[1].health_path, "");
  EXPECT_EQ(u[1].eject_ms, 500u);
  EXPECT_EQ(u[1].eject_max_ms, 30000u);
}

TEST(GatewayConfig, UpstreamsAreNamedApartAndWrittenOneWay) {
  EXPECT_EQ(errorOf("[[upstreams]]\nurl = \"http://a:1\"\n[[upstreams]]\nurl = \"http://a:1\"\n"),
            "gw.toml:3: upstreams[1].name: another upstream is named 'a:1' (name them apart with "
            "`name`)");
  EXPECT_EQ(errorOf(kMinimal + "[[upstreams]]\nurl = \"http://a:1\"\n"),
            "gw.toml:3: upstreams: write the upstream as [upstream] or as [[upstreams]], not both");
  EXPECT_EQ(
      errorOf("[[upstreams]]\nurl = \"http://a:1\"\nhealth_path = \"health\"\n").substr(0, 40),
      "gw.toml:3: upstreams[0].health_path: exp");
  EXPECT_EQ(errorOf("[[upstreams]]\nurl = \"http://a:1\"\n[[upstreams]]\nurl = \"ftp://b\"\n")
                .substr(0, 40),
            "gw.toml:4: upstreams[1].url: expected ht");
}

TEST(GatewayConfig, CapacityIsFixedOrFollowsTheEnginesMetrics) {
  auto r = parseGatewayConfig(
      "[upstream]\nurl = \"http://a:1\"\ncapacity = \"auto\"\nmin_sequences = 2\n"
      "metrics_path = \"/m\"\nmetrics_interval_ms = 250\n");
  ASSERT_TRUE(r.ok()) << r.error().toString();
  const UpstreamConfig& u = r.value().upstreams.at(0);
  EXPECT_TRUE(u.capacity_auto);
  EXPECT_EQ(u.min_sequences, 2u);
  EXPECT_EQ(u.metrics_path, "/m");
  EXPECT_EQ(u.metrics_interval_ms, 250u);
  auto fixed = parseGatewayConfig("[upstream]\nurl = \"http://a:1\"\n");
  ASSERT_TRUE(fixed.ok());
  EXPECT_FALSE(fixed.value().upstreams.at(0).capacity_auto);
  EXPECT_EQ(fixed.value().upstreams.at(0).metrics_path, "/metrics");

  EXPECT_EQ(errorOf("[upstream]\nurl = \"http://a:1\"\ncapacity = \"dynamic\"\n"),
            "gw.toml:3: upstream.capacity: expected \"fixed\" (max_sequences) or \"auto\" (from "
            "the engine's metrics), got 'dynamic'");
  EXPECT_EQ(errorOf("[upstream]\nurl = \"http://a:1\"\nmax_sequences = 4\nmin_sequences = 5\n"),
            "gw.toml:4: upstream.min_sequences: is above max_sequences (4)");
  EXPECT_EQ(errorOf("[upstream]\nurl = \"http://a:1\"\nmetrics_path = \"\"\n").substr(0, 50),
            "gw.toml:3: upstream.metrics_path: expected a path ");
  EXPECT_EQ(fixed.value().upstreams.at(0).engine_priority, UpstreamConfig::EnginePriority::kOff);
  auto sglang =
      parseGatewayConfig("[upstream]\nurl = \"http://a:1\"\nengine_priority = \"higher_first\"\n");
  ASSERT_TRUE(sglang.ok());
  EXPECT_EQ(sglang.value().upstreams.at(0).engine_priority,
            UpstreamConfig::EnginePriority::kHigherFirst);
  EXPECT_EQ(errorOf("[upstream]\nurl = \"http://a:1\"\nengine_priority = \"vllm\"\n").substr(0, 56),
            "gw.toml:3: upstream.engine_priority: expected \"off\", \"lo");
}

}  // namespace fairsched::gateway
