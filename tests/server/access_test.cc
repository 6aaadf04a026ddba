// The access file and its patterns: what `allow` matches, and the errors a broken file gets.
#include "server/access.h"

#include <fnmatch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
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
      {"[!ab].txt", "c.txt", true},
      {"[[:digit:]]x", "7x", true},
      {"a/**/b/**/c", "a/b/c", true},
      {"a/**/b/**/c", "a/x/b/y/z/c", true},
      {"a/**/b/**/c", "a/x/c/y/b", false},
      {"**/x/**/y", "x/y", true},
      {"**/x/**/y", "y/x", false},
      {"**/**", "", true},
      {"a/**/**/b", "a/b", true},
      {"*/**/b", "b", false},
      {"*", ".hidden", false},
      {"*a*a*b", "aaaaaaab", true},
      {"*a*a*b", "aaaaaaaa", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(AllowPatternMatches(c.pattern, c.name), c.matches)
        << "pattern " << c.pattern << " name " << c.name;
  }
}

// Within a segment, the matcher agrees with fnmatch(FNM_PERIOD) on many small random patterns
// and names (the old matcher called fnmatch; the access files written for it mean the same).
TEST(AccessTest, SegmentPatternsMeanWhatFnmatchSays) {
  std::mt19937 random(24);
  const std::string pattern_alphabet = "ab.*?[]!-\\";
  const std::string name_alphabet = "ab.-]!";
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    std::string pattern, name;
    for (int n = static_cast<int>(random() % 7); n > 0; --n) {
      pattern += pattern_alphabet[random() % pattern_alphabet.size()];
    }
    for (int n = static_cast<int>(random() % 7); n > 0; --n) {
      name += name_alphabet[random() % name_alphabet.size()];
    }
    if (pattern == "**") continue;  // a segment of its own: any number of segments
    const bool want = fnmatch(pattern.c_str(), name.c_str(), FNM_PERIOD) == 0;
    ASSERT_EQ(AllowPatternMatches(pattern, name), want)
        << "pattern '" << pattern << "' name '" << name << "'";
    ++checked;
  }
  EXPECT_GT(checked, 190000);
}

// Patterns that made the old matcher backtrack (every split of the name for every "**", and
// fnmatch's own retries for every '*') against a 1 MiB name. Quadratic would be about 10^11
// segment matches, hours; the bound is that, not a speed goal (the 1 MiB cases take about a
// millisecond each).
TEST(AccessTest, MatchingCostsLinearTimeInTheName) {
  std::string segments;  // "x/x/x/.../x": 512 Ki segments
  while (segments.size() < (1 << 20)) segments += "x/";
  segments += "x";
  const std::string one_segment(1 << 20, 'a');
  const struct {
    std::string pattern, name;
  } cases[] = {
      {"**/x/**/y", segments},
      {"**/x/**/x/**/x/**/y/**", segments},
      {"**/x/y/**/x", segments},
      {"*a*a*a*a*a*a*a*a*b", one_segment},
      {"**/*a*a*a*a*a*b", segments + "/" + one_segment},
  };
  for (const auto& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(AllowPatternMatches(c.pattern, c.name)) << c.pattern;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("access: %s against %zu bytes: %.2f ms\n", c.pattern.c_str(), c.name.size(), ms);
    EXPECT_LT(ms, 2000) << c.pattern << ": not linear in the name";
  }
  EXPECT_TRUE(AllowPatternMatches("**/x/**/x", segments));
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
