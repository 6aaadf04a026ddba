// A deliberately simple reference reader for tests: reads a file's bytes straight from its
// devices at the offsets its extent map gives, one pread per extent piece (holes and unwritten
// extents as zeros). Tests compare it with what the filesystem returns, to prove the map right.
#ifndef BLOCKREAD_TESTS_SUPPORT_MAP_READER_H_
#define BLOCKREAD_TESTS_SUPPORT_MAP_READER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "storage/catalog.h"

namespace blockread::testing {

// Bytes [offset, offset + length) of `map`, short at EOF like pread. Uses the catalog's devices'
// O_DIRECT descriptors with aligned bounce buffers.
absl::StatusOr<std::vector<char>> ReadThroughMap(const storage::Catalog& catalog,
                                                 const storage::FileMap& map, uint64_t offset,
                                                 uint64_t length);

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_MAP_READER_H_
