// Hex and FNV-1a against their published test vectors.
#include "k8s4r/common/hashing.h"

#include <gtest/gtest.h>

namespace k8s4r {
namespace {

TEST(Hashing, HexIsLowercaseTwoDigitsPerByte) {
  EXPECT_EQ(hex_encode(""), "");
  EXPECT_EQ(hex_encode(std::string("\x00\x0f\xa0\xff", 4)), "000fa0ff");
}

TEST(Hashing, Fnv1a64MatchesTheReferenceVectors) {
  EXPECT_EQ(Fnv1a64().value(), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64().update("a").value(), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64().update("foobar").value(), 0x85944171f73967e8ULL);
  EXPECT_EQ(Fnv1a64().update("foo").update("bar").value(), Fnv1a64().update("foobar").value());
}

}  // namespace
}  // namespace k8s4r
