// The C++ client library: one object around a gRPC channel to a blockread server.
#ifndef BLOCKREAD_CLIENT_BLOCKREAD_CLIENT_H_
#define BLOCKREAD_CLIENT_BLOCKREAD_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/sync_stream.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blockread/v1/blockread.grpc.pb.h"
#include "client/read_coalescer.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace blockread::client {

// gRPC status -> absl::Status (same codes, same message).
absl::Status FromGrpc(const grpc::Status& status);

// HTTP/2 settings the client advertises (see BlockReadClient::Connect).
inline constexpr int kReceiveWindowBytes = 8 << 20;
inline constexpr int kMaxFrameBytes = 1 << 20;

// How the client proves who the server is, and who it is: PEM file paths. All empty: plaintext.
struct TransportSecurity {
  std::string ca;    // CA bundle that signed the server's certificate (TLS on when set)
  std::string cert;  // client certificate chain, for servers that require one (with `key`)
  std::string key;
  // The name to verify the server's certificate against, when it is not the target's host (a
  // DNS target, or an address whose certificate names the service).
  std::string server_name;
  bool enabled() const { return !ca.empty() || !cert.empty(); }
};

// Channel credentials for `security`: insecure when it is not enabled, TLS otherwise (with the
// client certificate when given). Reads the files now; errors name the file.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TransportSecurity& security);

struct ClientOptions {
  // Per-call deadline for the unary calls; 0 means none.
  std::chrono::milliseconds timeout{10000};
  // Largest message the client accepts; must cover the server's max_read_bytes (and a stream's
  // batched results). gRPC's default, 4 MiB, is too small for big reads.
  int max_receive_bytes = 64 << 20;
  // From ChannelCredentialsFor; null means plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // TransportSecurity::server_name, when set.
  std::string server_name;
  // Sent with every call as "authorization: Bearer <token>" (servers with --auth); empty: none.
  std::string token;
  // How concurrent Read() calls share streams (see BlockReadClient::Read).
  CoalescingOptions coalescing;
};

// Per-call options of BlockReadClient::Read().
struct ReadCallOptions {
  bool want_crc32c = false;
  // This call's deadline; unset: now + ClientOptions::timeout (none if that is 0).
  std::optional<std::chrono::system_clock::time_point> deadline;
  // Cancel() on it makes the call return CANCELLED at once. Must outlive the call.
  ReadCancellation* cancellation = nullptr;
};

// Adds options.token to a call's metadata, as servers with --auth expect it (every call made with
// this library does; for contexts made elsewhere, e.g. the load client's async calls).
void AddToken(const ClientOptions& options, grpc::ClientContext& context);

// The token to use: the contents of `token_file` (trailing newline dropped) when given, else the
// BLOCKREAD_TOKEN environment variable, else none. A token never goes on a command line, where
// any local user could read it. Errors name the file.
absl::StatusOr<std::string> LoadToken(const std::string& token_file);

// A ReadBlocks stream, used synchronously: Send() request messages, Receive() response messages
// (results arrive in completion order, each with its tag), CloseSend() when done sending, then
// Receive() until it returns false, then Finish(). Send and Receive may run on two threads; each
// on one thread at a time.
class ReadStream {
 public:
  // `options`: its token is sent; its timeout is not applied (a stream lives as long as it is
  // used).
  ReadStream(v1::BlockRead::Stub& stub, const ClientOptions& options);
  ~ReadStream();
  // False if the stream is broken (then Finish() says why).
  bool Send(const v1::ReadBlocksRequest& request);
  bool Receive(v1::ReadBlocksResponse* response);
  void CloseSend();
  absl::Status Finish();
  // Cancels the stream (from any thread).
  void Cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ReadBlocksRequest, v1::ReadBlocksResponse>> stream_;
  bool finished_ = false;
};

// Thread-safe: any number of threads may call it at once (gRPC channels are).
class BlockReadClient {
 public:
  // A channel to `target` (host:port), with the receive limit raised, over options.credentials.
  static std::unique_ptr<BlockReadClient> Connect(const std::string& target,
                                                  const ClientOptions& options = ClientOptions());
  BlockReadClient(std::shared_ptr<grpc::Channel> channel, const ClientOptions& options);

  // One read, answered as ReadBlock answers it. Errors carry the server's code and message (see
  // blockread.proto), per read. A call that finds no other Read() of this client running is a
  // ReadBlock call of its own (nothing to wait for, no thread hop). Calls made while others run
  // are coalesced (ClientOptions::coalescing): queued for a few shared ReadBlocks streams, sent
  // many to a message, and answered to each caller, so many threads calling Read() get stream
  // throughput. Deadline and cancellation stay per call (a coalesced read the caller gave up on
  // is still read by the server; its bytes are dropped).
  absl::StatusOr<v1::ReadBlockResponse> Read(const std::string& file, uint64_t offset,
                                             uint64_t length, const ReadCallOptions& call);
  absl::StatusOr<v1::ReadBlockResponse> Read(const std::string& file, uint64_t offset,
                                             uint64_t length, bool want_crc32c = false) {
    ReadCallOptions call;
    call.want_crc32c = want_crc32c;
    return Read(file, offset, length, call);
  }
  std::unique_ptr<ReadStream> OpenStream() {
    return std::make_unique<ReadStream>(*stub_, options_);
  }
  absl::StatusOr<v1::FileInfo> Stat(const std::string& file);
  // Every file whose name starts with `prefix` (empty: every file), all pages.
  absl::StatusOr<std::vector<v1::FileInfo>> List(const std::string& prefix = "");
  absl::StatusOr<v1::GetStatsResponse> Stats();
  absl::StatusOr<v1::ExplainResponse> Explain(const std::string& file, uint64_t offset,
                                              uint64_t length);
  // grpc.health.v1 Check of `service` ("" = the server as a whole).
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& service = "");

  v1::BlockRead::Stub& stub() { return *stub_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  void PrepareContext(grpc::ClientContext& context) const;

  std::shared_ptr<grpc::Channel> channel_;
  ClientOptions options_;
  std::unique_ptr<v1::BlockRead::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_stub_;
  std::atomic<int> reads_running_{0};  // Read() calls in progress
  std::once_flag coalescer_once_;
  std::unique_ptr<ReadCoalescer> coalescer_;  // made by the first coalesced Read()
};

}  // namespace blockread::client

#endif  // BLOCKREAD_CLIENT_BLOCKREAD_CLIENT_H_
