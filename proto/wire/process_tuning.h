// Process-wide settings that the server and the clients both run with, set once at the top of
// main() before any thread starts.
#ifndef BLOCKREAD_PROTO_WIRE_PROCESS_TUNING_H_
#define BLOCKREAD_PROTO_WIRE_PROCESS_TUNING_H_

namespace blockread::wire {

// - The allocator keeps big blocks on the heap and the heap in place. Messages carry up to
//   max_read_bytes each; glibc maps blocks of 128 KiB and more afresh and trims freed heap above
//   2x that, so every big message page-faulted its buffer in again (6% of the server's CPU at
//   128 KiB reads).
// - absl::Mutex deadlock detection off. Debian's Abseil is built with it on, and gRPC's locks are
//   absl::Mutex: every lock and unlock went through the cycle detector's graph (about a tenth of
//   the server's instructions per unary read and a third of the load client's per streamed read,
//   by callgrind). It is a debugging aid, not a check a served read needs.
void TuneProcess();

}  // namespace blockread::wire

#endif  // BLOCKREAD_PROTO_WIRE_PROCESS_TUNING_H_
