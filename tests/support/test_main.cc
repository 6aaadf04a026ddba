// main() for every test binary.
//
// Mounts: when root, the binary first moves into a private mount namespace, so that filesystems
// a test mounts vanish with the process even if it crashes (see loop_device.h).
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

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"

namespace {

constexpr int kAllSkippedExitCode = 77;

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
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      perror("blockread tests: private mount namespace");
      return 1;
    }
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
