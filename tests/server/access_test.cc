// The access file and its patterns: what `allow` matches, and the errors a broken file gets.
#include "server/access.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace blockread::server {
namespace {

TEST(AccessTest, AllowPatterns) {
  struct Case {
    const char* pattern;
    const char* name;
    bool matches;
  };
  const Case cases[] = {
      {"public/*", "public/a.bin", true},
      {"public/*", "public/deep/a.bin", false},  // * stays within one segment
      {"public/*", "public", false},
      {"public/*", "publicity/a.bin", false},
      {"datasets/**", "datasets/a", true},
      {"datasets/**", "datasets/x/y/z.bin", true},
      {"datasets/**", "datasets", true},  // ** may match no segment at all
      {"datasets/**", "other/datasets/a", false},
      {"**", "anything/at/all", true},
      {"**/*.idx", "a/b/c.idx", true},
      {"**/*.idx", "c.idx", true},
      {"**/*.idx", "a/b/c.bin", false},
      {"a/**/z", "a/z", true},
      {"a/**/z", "a/b/c/z", true},
      {"a/**/z", "a/b/c/y", false},
      {"*.bin", "x.bin", true},
      {"*.bin", ".hidden.bin", false},  // a leading dot is matched only explicitly
      {"file?.txt", "file1.txt", true},
      {"[ab].txt", "c.txt", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(AllowPatternMatches(c.pattern, c.name), c.matches)
        << "pattern " << c.pattern << " name " << c.name;
  }
}

TEST(AccessTest, ParsesIdentitiesAndNamesWhatIsWrong) {
  const std::string token_digest(64, 'a');
  auto policy = AccessPolicy::Parse("identity { name: \"alice\" token_sha256: \"" + token_digest +
                                        "\" allow: \"public/*\" }\n"
                                        "identity { name: \"trainer\" tls_common_name: "
                                        "\"trainer.example\" allow: \"datasets/**\" }",
                                    "access.textproto");
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_FALSE((*policy)->open());
  EXPECT_EQ((*policy)->identity_count(), 2u);

  struct Broken {
    std::string text;
    std::string expected;
  };
  const Broken broken[] = {
      {"identity { name: \"a\" token_sha256: \"abc\" }", "not 64 hex digits"},
      {"identity { name: \"a\" token_sha256: \"" + std::string(64, 'g') + "\" }",
       "not 64 hex digits"},
      {"identity { name: \"a\" allow: \"**\" }", "neither token_sha256 nor tls_common_name"},
      {"identity { name: \"a\" tls_common_name: \"x\" }\nidentity { name: \"a\" "
       "tls_common_name: \"y\" }",
       "used twice"},
      {"identity { tls_common_name: \"x\" }", "no name"},
      {"identity { name: \"a\" tls_common_name: \"x\" allow: \"/etc/*\" }",
       "not a relative file name pattern"},
      {"identity { nme: \"a\" }", "access.textproto:1:"},
  };
  for (const Broken& b : broken) {
    auto parsed = AccessPolicy::Parse(b.text, "access.textproto");
    ASSERT_FALSE(parsed.ok()) << b.text;
    EXPECT_NE(parsed.status().message().find(b.expected), std::string::npos)
        << b.text << " -> " << parsed.status();
  }
}

TEST(AccessTest, OpenPolicyMayDoEverything) {
  auto policy = AccessPolicy::Open();
  EXPECT_TRUE(policy->open());
}

// The access files shipped in deploy/ parse.
TEST(AccessTest, ShippedAccessFilesParse) {
  for (const char* path : {"/deploy/k8s/access.textproto", "/deploy/systemd/access.textproto"}) {
    auto policy = AccessPolicy::Load(std::string(BLOCKREAD_SOURCE_DIR) + path);
    EXPECT_TRUE(policy.ok()) << path << ": " << policy.status();
  }
}

}  // namespace
}  // namespace blockread::server
