#include "client/blockread_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client/server_choice.h"

namespace blockread::client {

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

void AddToken(const ClientOptions& options, grpc::ClientContext& context) {
  if (!options.token.empty()) context.AddMetadata("authorization", "Bearer " + options.token);
}

ReadStream::ReadStream(v1::BlockRead::Stub& stub, const ClientOptions& options) {
  AddToken(options, context_);
  stream_ = stub.ReadBlocks(&context_);
}

ReadStream::~ReadStream() {
  if (!finished_) {
    context_.TryCancel();
    v1::ReadBlocksResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    stream_->Finish().ok();
  }
}

bool ReadStream::Send(const v1::ReadBlocksRequest& request) { return stream_->Write(request); }

bool ReadStream::Receive(v1::ReadBlocksResponse* response) { return stream_->Read(response); }

void ReadStream::CloseSend() { stream_->WritesDone(); }

absl::Status ReadStream::Finish() {
  finished_ = true;
  return FromGrpc(stream_->Finish());
}

namespace {

absl::StatusOr<std::string> ReadWholeFile(const char* what, const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  if (in) text << in.rdbuf();
  if (!in || text.str().empty()) {
    return absl::NotFoundError(absl::StrCat("--", what, ": cannot read ", path));
  }
  return text.str();
}

}  // namespace

absl::StatusOr<std::string> LoadToken(const std::string& token_file) {
  if (token_file.empty()) {
    const char* from_environment = getenv("BLOCKREAD_TOKEN");
    return std::string(from_environment != nullptr ? from_environment : "");
  }
  auto token = ReadWholeFile("token-file", token_file);
  if (!token.ok()) return token.status();
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) token->pop_back();
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const TransportSecurity& security) {
  if (!security.enabled()) return grpc::InsecureChannelCredentials();
  if (security.cert.empty() != security.key.empty()) {
    return absl::InvalidArgumentError("--cert and --key go together");
  }
  grpc::SslCredentialsOptions options;
  if (!security.ca.empty()) {
    auto ca = ReadWholeFile("ca", security.ca);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (!security.cert.empty()) {
    auto cert = ReadWholeFile("cert", security.cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadWholeFile("key", security.key);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

std::unique_ptr<BlockReadClient> BlockReadClient::Connect(const std::string& target,
                                                          const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_bytes);
  // Each BlockReadClient gets its own TCP connection: gRPC otherwise shares one among channels
  // with equal arguments, and `blockread load --channels` would spread nothing.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Big reads: a per-stream receive window of 64 KiB (gRPC's default) makes every 128 KiB
  // response wait for a WINDOW_UPDATE round trip; larger HTTP/2 frames mean fewer frames to parse.
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kReceiveWindowBytes);
  args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, kMaxFrameBytes);
  // A server that went away is dialled again on the same schedule as the cluster client's
  // back-off (client/server_choice.h), not gRPC's (1 s doubling to 2 min): a restarted storage
  // node is used again within seconds. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS stays gRPC's: despite
  // its name it is the connect timeout (20 s), and at 200 ms a handshake to a busy server (or a
  // TLS one across a WAN) never completes ("timed out before receiving SETTINGS frame").
  const BackoffPolicy reconnect;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, static_cast<int>(reconnect.initial.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(reconnect.max.count()));
  if (!options.server_name.empty()) {
    args.SetSslTargetNameOverride(options.server_name);
  }
  return std::make_unique<BlockReadClient>(
      grpc::CreateCustomChannel(
          target,
          options.credentials != nullptr ? options.credentials : grpc::InsecureChannelCredentials(),
          args),
      options);
}

BlockReadClient::BlockReadClient(std::shared_ptr<grpc::Channel> channel,
                                 const ClientOptions& options)
    : channel_(std::move(channel)),
      options_(options),
      stub_(v1::BlockRead::NewStub(channel_)),
      health_stub_(grpc::health::v1::Health::NewStub(channel_)) {}

void BlockReadClient::PrepareContext(grpc::ClientContext& context) const {
  AddToken(options_, context);
  if (options_.timeout.count() > 0) {
    context.set_deadline(std::chrono::system_clock::now() + options_.timeout);
  }
}

absl::StatusOr<v1::ReadBlockResponse> BlockReadClient::Read(const std::string& file,
                                                            uint64_t offset, uint64_t length,
                                                            const ReadCallOptions& call) {
  std::optional<std::chrono::system_clock::time_point> deadline = call.deadline;
  if (!deadline.has_value() && options_.timeout.count() > 0) {
    deadline = std::chrono::system_clock::now() + options_.timeout;
  }
  const bool alone = reads_running_.fetch_add(1) == 0;
  struct Leave {
    std::atomic<int>& running;
    ~Leave() { running.fetch_sub(1); }
  } leave{reads_running_};
  if (options_.coalescing.enabled && !alone) {
    std::call_once(coalescer_once_, [this] {
      coalescer_ = std::make_unique<ReadCoalescer>(*stub_, options_.coalescing, options_.token);
    });
    v1::ReadItem item;
    item.set_file(file);
    item.set_offset(offset);
    item.set_length(length);
    item.set_want_crc32c(call.want_crc32c);
    return coalescer_->Read(item, deadline, call.cancellation);
  }
  grpc::ClientContext context;
  AddToken(options_, context);
  if (deadline.has_value()) context.set_deadline(*deadline);
  CancellationHook hook(call.cancellation, [&context] { context.TryCancel(); });
  v1::ReadBlockRequest request;
  request.set_file(file);
  request.set_offset(offset);
  request.set_length(length);
  request.set_want_crc32c(call.want_crc32c);
  v1::ReadBlockResponse response;
  grpc::Status status = stub_->ReadBlock(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::StatusOr<v1::FileInfo> BlockReadClient::Stat(const std::string& file) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::StatFileRequest request;
  request.set_file(file);
  v1::FileInfo response;
  grpc::Status status = stub_->StatFile(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::StatusOr<std::vector<v1::FileInfo>> BlockReadClient::List(const std::string& prefix) {
  std::vector<v1::FileInfo> files;
  std::string token;
  do {
    grpc::ClientContext context;
    PrepareContext(context);
    v1::ListFilesRequest request;
    request.set_page_size(1000);
    request.set_page_token(token);
    request.set_prefix(prefix);
    v1::ListFilesResponse response;
    grpc::Status status = stub_->ListFiles(&context, request, &response);
    if (!status.ok()) return FromGrpc(status);
    for (const v1::FileInfo& f : response.files()) files.push_back(f);
    token = response.next_page_token();
  } while (!token.empty());
  return files;
}

absl::StatusOr<v1::GetStatsResponse> BlockReadClient::Stats() {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::GetStatsResponse response;
  grpc::Status status = stub_->GetStats(&context, v1::GetStatsRequest(), &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::StatusOr<v1::ExplainResponse> BlockReadClient::Explain(const std::string& file,
                                                             uint64_t offset, uint64_t length) {
  grpc::ClientContext context;
  PrepareContext(context);
  v1::ExplainRequest request;
  request.set_file(file);
  request.set_offset(offset);
  request.set_length(length);
  v1::ExplainResponse response;
  grpc::Status status = stub_->Explain(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response;
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> BlockReadClient::Health(
    const std::string& service) {
  grpc::ClientContext context;
  PrepareContext(context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status status = health_stub_->Check(&context, request, &response);
  if (!status.ok()) return FromGrpc(status);
  return response.status();
}

}  // namespace blockread::client
