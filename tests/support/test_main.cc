// main() for every test binary.
//
// Mounts: when root, the binary first moves into a private mount namespace, so that filesystems
// a test mounts vanish with the process even if it crashes (see loop_device.h). That works in a
// chroot too, where / is not a mount point (see MakeMountsPrivate).
//
// Skips: ctest runs each binary as one test, so it sees only the exit status. A binary whose every
// case that ran was skipped exits with kAllSkippedExitCode, which tests/CMakeLists.txt registers as
// SKIP_RETURN_CODE: ctest reports it skipped, not passed. A binary where only some cases skipped
// passes, and says which and why: one "blockread-skipped: CASE: REASON" line per skipped case on
// stdout (kept in ctest's log), and the same lines appended to the file named by
// $BLOCKREAD_SKIPPED_LOG when set. tests/run.sh sets it, lists the skips, and fails when it runs as
// root and a case skipped for a reason that starts with "needs root" (the convention for every
// test that needs root; see LoopDevicesUnavailableReason).
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "storage/catalog.h"

namespace {

constexpr int kAllSkippedExitCode = 77;

// A mount point as /proc/self/mountinfo writes it: space, tab, newline and backslash are octal
// escapes (\040 ...).
std::string UnescapeMountPoint(const std::string& escaped) {
  std::string out;
  for (size_t i = 0; i < escaped.size(); ++i) {
    const bool octal =
        escaped[i] == '\\' && i + 3 < escaped.size() &&
        std::all_of(&escaped[i + 1], &escaped[i + 4], [](char c) { return c >= '0' && c <= '7'; });
    if (octal) {
      out += static_cast<char>((escaped[i + 1] - '0') * 64 + (escaped[i + 2] - '0') * 8 +
                               (escaped[i + 3] - '0'));
      i += 3;
    } else {
      out += escaped[i];
    }
  }
  return out;
}

// Makes every mount this process can reach private, so nothing mounted here propagates to the
// parent namespace. Returns false (having said why) on failure.
bool MakeMountsPrivate() {
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) return true;
  if (errno != EINVAL) {
    perror("blockread tests: making / private in the mount namespace");
    return false;
  }
  // EINVAL: "/" is not a mount point, as in a chroot that package builders use. The mount that
  // holds our root is then outside it: mountinfo does not list it and no path names its root, so
  // it cannot be changed from here. Every mount that is reachable is listed, relative to our root.
  std::ifstream mountinfo("/proc/self/mountinfo");
  if (!mountinfo) {
    perror("blockread tests: reading /proc/self/mountinfo");
    return false;
  }
  int made_private = 0;
  for (std::string line; std::getline(mountinfo, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT ...
    const std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() < 5) continue;
    const std::string mount_point = UnescapeMountPoint(fields[4]);
    if (mount(nullptr, mount_point.c_str(), nullptr, MS_REC | MS_PRIVATE, nullptr) == 0) {
      ++made_private;
    } else if (errno != EINVAL && errno != ENOENT) {
      // EINVAL/ENOENT: hidden under a later mount on or above it, which is made private itself.
      fprintf(stderr, "blockread tests: making %s private in the mount namespace: %s\n",
              mount_point.c_str(), strerror(errno));
      return false;
    }
  }
  fprintf(stderr,
          "blockread tests: / is not a mount point (a chroot?): made the %d mounts under it "
          "private. A filesystem a test mounts outside them is still unmounted by the test, but "
          "would not vanish with this mount namespace if the test crashed.\n",
          made_private);
  return true;
}

// Collects the skipped cases and why.
class SkipRecorder : public ::testing::EmptyTestEventListener {
 public:
  struct Skip {
    std::string test;
    std::string reason;
  };

  void OnTestEnd(const ::testing::TestInfo& info) override {
    ++ran_;
    if (!info.result()->Skipped()) return;
    std::string reason = SkipMessage(*info.result());
    // GTEST_SKIP() in SetUpTestSuite records its message on the suite.
    if (reason.empty()) {
      const ::testing::TestSuite* suite = ::testing::UnitTest::GetInstance()->current_test_suite();
      if (suite != nullptr) reason = SkipMessage(suite->ad_hoc_test_result());
    }
    if (reason.empty()) reason = "(no reason given)";
    skips_.push_back({absl::StrCat(info.test_suite_name(), ".", info.name()), reason});
  }

  int ran() const { return ran_; }
  const std::vector<Skip>& skips() const { return skips_; }

 private:
  static std::string SkipMessage(const ::testing::TestResult& result) {
    for (int i = 0; i < result.total_part_count(); ++i) {
      const ::testing::TestPartResult& part = result.GetTestPartResult(i);
      if (part.skipped()) {
        // One line per skip, whatever the message holds.
        return std::string(absl::StripAsciiWhitespace(
            absl::StrReplaceAll(part.message(), {{"\n", " "}, {"\t", " "}})));
      }
    }
    return "";
  }

  int ran_ = 0;
  std::vector<Skip> skips_;
};

void ReportSkips(const std::vector<SkipRecorder::Skip>& skips) {
  std::string lines;
  for (const SkipRecorder::Skip& skip : skips) {
    absl::StrAppend(&lines, "blockread-skipped: ", skip.test, ": ", skip.reason, "\n");
  }
  fputs(lines.c_str(), stdout);
  fflush(stdout);
  const char* log = getenv("BLOCKREAD_SKIPPED_LOG");
  if (log == nullptr || *log == '\0') return;
  // One O_APPEND write, so binaries that ctest runs in parallel do not interleave their lines.
  const int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0 || write(fd, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size())) {
    fprintf(stderr, "blockread tests: writing %s: %s\n", log, strerror(errno));
  }
  if (fd >= 0) close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts, as the server's main does: catalogs take leases (storage/catalog.h).
  blockread::storage::BlockLeaseSignals();
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) != 0) {
      perror("blockread tests: private mount namespace");
      return 1;
    }
    if (!MakeMountsPrivate()) return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  auto* recorder = new SkipRecorder();  // owned by gtest's listener list
  ::testing::UnitTest::GetInstance()->listeners().Append(recorder);
  const int result = RUN_ALL_TESTS();
  if (!recorder->skips().empty()) ReportSkips(recorder->skips());
  if (result == 0 && recorder->ran() > 0 &&
      static_cast<size_t>(recorder->ran()) == recorder->skips().size()) {
    return kAllSkippedExitCode;
  }
  return result;
}
