// Redis Cluster's client side without I/O: key slots, redirections and the
// slot map (daemon/fleet/redis_topology.hpp). Replies are parsed from RESP
// by hiredis, as they arrive from a server.
#include "daemon/fleet/redis_topology.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>

#include "daemon/fleet/redis_connection.hpp"

namespace fairsched::fleet {
namespace {

RedisReply parse(const std::string& resp) {
  redisReader* reader = newReplyReader();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  redisReaderFree(reader);
  return RedisReply(static_cast<redisReply*>(reply));
}

std::string bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

// One range of CLUSTER SLOTS: [first, last, [host, port, id], [replica...]].
std::string range(int first, int last, const std::string& host, int port) {
  return "*4\r\n:" + std::to_string(first) + "\r\n:" + std::to_string(last) + "\r\n*3\r\n" +
         bulk(host) + ":" + std::to_string(port) + "\r\n" + bulk("id" + std::to_string(port)) +
         "*3\r\n" + bulk(host) + ":" + std::to_string(port + 100) + "\r\n" +
         bulk("replica" + std::to_string(port));
}

config::RedisAddress at(const std::string& host, std::uint16_t port) {
  config::RedisAddress a;
  a.host = host;
  a.port = port;
  return a;
}

TEST(KeySlot, MatchesRedisClusterSpec) {
  // Values from the cluster specification and `CLUSTER KEYSLOT`.
  EXPECT_EQ(keySlot("123456789"), 12739);  // CRC16/XMODEM's check value 0x31C3
  EXPECT_EQ(keySlot("foo"), 12182);
  EXPECT_EQ(keySlot("{user1000}.following"), keySlot("{user1000}.followers"));
  EXPECT_EQ(keySlot("{user1000}.following"), keySlot("user1000"));
  // An empty tag hashes the whole key; only the first '{' ... '}' counts.
  EXPECT_EQ(keySlot("foo{}{bar}"), keySlot(std::string("foo{}{bar}")));
  EXPECT_NE(keySlot("foo{}{bar}"), keySlot("bar"));
  EXPECT_EQ(keySlot("foo{{bar}}zap"), keySlot("{bar"));
  EXPECT_EQ(keySlot("foo{bar}{zap}"), keySlot("bar"));
}

TEST(KeySlot, AllOfATenantsLimitsShareOneSlot) {
  EXPECT_EQ(keySlot("fairsched:{acme}:chat:requests/60s"),
            keySlot("fairsched:{acme}:embed:tokens/86400s"));
  EXPECT_EQ(keySlot("fairsched:{acme}:chat:requests/60s"), keySlot("{acme}"));
}

TEST(Redirect, MovedAndAskAreParsed) {
  const auto moved = parseRedirect("MOVED 3999 127.0.0.1:6381", at("10.0.0.1", 7000));
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(moved->slot, 3999);
  EXPECT_EQ(moved->to.str(), "127.0.0.1:6381");
  const auto ask = parseRedirect("ASK 16383 [::1]:7001", at("10.0.0.1", 7000));
  ASSERT_TRUE(ask);
  EXPECT_EQ(ask->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(ask->to.str(), "[::1]:7001");
  // An unknown endpoint (":port") is the host that answered.
  EXPECT_EQ(parseRedirect("MOVED 1 :7002", at("10.0.0.1", 7000))->to.str(), "10.0.0.1:7002");
  EXPECT_FALSE(parseRedirect("MOVED 16384 h:1", at("h", 1)));
  EXPECT_FALSE(parseRedirect("MOVED x h:1", at("h", 1)));
  EXPECT_FALSE(parseRedirect("ERR unknown command", at("h", 1)));
  EXPECT_FALSE(parseRedirect("TRYAGAIN Multiple keys", at("h", 1)));
}

TEST(SlotMap, FromClusterSlots) {
  const RedisReply reply =
      parse("*3\r\n" + range(0, 5460, "127.0.0.1", 7000) + range(5461, 10922, "127.0.0.1", 7001) +
            range(10923, 16383, "", 7002));
  const auto map = SlotMap::fromClusterSlots(*reply, at("127.0.0.9", 7009));
  ASSERT_TRUE(map);
  ASSERT_EQ(map->nodes().size(), 3u);
  EXPECT_EQ(map->nodeFor(0)->str(), "127.0.0.1:7000");
  EXPECT_EQ(map->nodeFor(5461)->str(), "127.0.0.1:7001");
  EXPECT_EQ(map->nodeFor(16383)->str(), "127.0.0.9:7002");  // empty host: the node asked
  EXPECT_EQ(map->unserved(), 0);
  EXPECT_EQ(formatSlots(map->slotsOf(at("127.0.0.1", 7000))), "0-5460");
}

TEST(SlotMap, MovedReassignsOneSlot) {
  const RedisReply reply = parse("*2\r\n" + range(0, 8191, "h", 1) + range(8192, 16383, "h", 2));
  auto map = SlotMap::fromClusterSlots(*reply, at("h", 1));
  ASSERT_TRUE(map);
  map->assign(100, at("h", 3));
  EXPECT_EQ(map->nodeFor(100)->str(), "h:3");
  EXPECT_EQ(map->nodeFor(99)->str(), "h:1");
  EXPECT_EQ(formatSlots(map->slotsOf(at("h", 1))), "0-99,101-8191");
  EXPECT_EQ(formatSlots(map->slotsOf(at("h", 3))), "100");
}

TEST(SlotMap, PartialCoverageAndBadRepliesAreSeen) {
  const RedisReply half = parse("*1\r\n" + range(0, 8191, "h", 1));
  auto map = SlotMap::fromClusterSlots(*half, at("h", 1));
  ASSERT_TRUE(map);
  EXPECT_EQ(map->unserved(), 8192);
  EXPECT_EQ(map->nodeFor(9000), nullptr);
  EXPECT_FALSE(SlotMap::fromClusterSlots(
      *parse("-ERR This instance has cluster support disabled\r\n"), at("h", 1)));
  EXPECT_FALSE(
      SlotMap::fromClusterSlots(*parse("*1\r\n*3\r\n:5\r\n:1\r\n*2\r\n" + bulk("h") + ":1\r\n"),
                                at("h", 1)));  // first > last
}

TEST(ReplyReader, AnArrayDeclaredHugeIsAnErrorNotAnAllocation) {
  redisReader* reader = newReplyReader();
  const std::string huge = "*400000000\r\n:1\r\n";
  redisReaderFeed(reader, huge.data(), huge.size());
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_ERR);
  EXPECT_EQ(reply, nullptr);
  redisReaderFree(reader);
  // The bound itself is still read, nested.
  const RedisReply nested = parse("*2\r\n*1\r\n$3\r\nabc\r\n:-7\r\n");
  ASSERT_EQ(nested->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(nested->elements, 2u);
  EXPECT_EQ(std::string(nested->element[0]->element[0]->str), "abc");
  EXPECT_EQ(nested->element[1]->integer, -7);
}

TEST(NodeOfKey, FollowsTheTopology) {
  BackendTopology t;
  t.mode = "cluster";
  t.nodes.push_back({"a:1", {{0, 8191}}, true});
  t.nodes.push_back({"b:2", {{8192, 16383}}, true});
  const std::string key = "{acme}";
  EXPECT_EQ(nodeOfKey(t, key), keySlot(key) <= 8191 ? "a:1" : "b:2");
  t.mode = "sentinel";
  t.master = "m:6379";
  EXPECT_EQ(nodeOfKey(t, key), "m:6379");
}

}  // namespace
}  // namespace fairsched::fleet
