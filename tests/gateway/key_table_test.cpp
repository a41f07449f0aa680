#include "gateway/key_table.hpp"

#include <gtest/gtest.h>

#include "gateway/sha256.hpp"

namespace fairsched::gateway {

TEST(KeyTable, FindsAKeyByItsDigestOnly) {
  ApiKeyConfig k;
  k.name = "alice";
  k.sha256 = sha256Hex("sk-alice");
  k.tenant = "acme";
  const KeyTable t({k});
  ASSERT_NE(t.find("sk-alice"), nullptr);
  EXPECT_EQ(t.find("sk-alice")->tenant, "acme");
  EXPECT_EQ(t.find("sk-alic"), nullptr);
  EXPECT_EQ(t.find(""), nullptr);
  EXPECT_EQ(t.find(k.sha256), nullptr);  // the digest itself is not a key
}

TEST(BearerToken, ParsesTheSchemeCaseInsensitivelyAndTrims) {
  EXPECT_EQ(bearerToken("Bearer sk-1"), "sk-1");
  EXPECT_EQ(bearerToken("bearer   sk-1  "), "sk-1");
  EXPECT_EQ(bearerToken("BEARER\tsk-1"), "sk-1");
  EXPECT_FALSE(bearerToken("Bearer"));
  EXPECT_FALSE(bearerToken("Bearer   "));
  EXPECT_FALSE(bearerToken("Bearersk-1"));
  EXPECT_FALSE(bearerToken("Basic dXNlcg=="));
}

}  // namespace fairsched::gateway
