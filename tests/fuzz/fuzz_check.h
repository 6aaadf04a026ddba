// FUZZ_CHECK: a property every input must keep. A failure prints the condition and aborts, so
// libFuzzer saves the input as a crash.
#ifndef BLOCKREAD_TESTS_FUZZ_FUZZ_CHECK_H_
#define BLOCKREAD_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                 \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

#endif  // BLOCKREAD_TESTS_FUZZ_FUZZ_CHECK_H_
