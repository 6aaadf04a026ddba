// An engine slot kept past its read's callback, so its bytes can be sent without a copy.
#ifndef BLOCKREAD_SERVER_HELD_SLOT_H_
#define BLOCKREAD_SERVER_HELD_SLOT_H_

#include <cstdint>

#include "storage/read_path.h"

namespace blockread::server {

// A slot the engine delivered and its read's callback kept (returned true), with its bytes.
struct HeldSlot {
  storage::ReadHandle handle;
  storage::ReadPathKind path = storage::ReadPathKind::kSimple;
  const char* data = nullptr;
  uint64_t length = 0;
};

// The slot of `result`, delivered to a callback that keeps it (returns true).
inline HeldSlot HeldSlotOf(const storage::ReadResult& result) {
  return HeldSlot{result.handle, result.path, result.data, result.length};
}

}  // namespace blockread::server

#endif  // BLOCKREAD_SERVER_HELD_SLOT_H_
