// grpc-bench-server: gRPC C++'s server (callback API) under
// tools/bench/compare_server.sh, answering as conch-bench-server does.
// A benchmark peer, not a test; built only where gRPC++ is installed.
//
//   grpc-bench-server LIST_FILE
//
// LIST_FILE holds the canned ListResponse (conch-bench-server
// --write-list).  Listens on 127.0.0.1, a free port, printed as
// "LISTENING <port>"; exits on SIGTERM or SIGINT.
//   - process.Process/List: the canned response, parsed once, copied into
//     every call's response (serialized by gRPC for every call);
//   - process.Process/Start: one StartEvent, then the stream stays open
//     and idle until the client cancels it.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include "process.grpc.pb.h"

namespace {

volatile std::sig_atomic_t stopping = 0;

void OnSignal(int) { stopping = 1; }

class IdleStart final
    : public grpc::ServerWriteReactor<process::StartResponse> {
 public:
  IdleStart() {
    msg_.mutable_event()->mutable_start()->set_pid(4242);
    StartWrite(&msg_);
  }
  void OnWriteDone(bool) override {}
  void OnCancel() override { Finish(grpc::Status::CANCELLED); }
  void OnDone() override { delete this; }

 private:
  process::StartResponse msg_;
};

class Service final : public process::Process::CallbackService {
 public:
  explicit Service(process::ListResponse list) : list_(std::move(list)) {}

  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const process::ListRequest*,
                                 process::ListResponse* resp) override {
    *resp = list_;
    grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  grpc::ServerWriteReactor<process::StartResponse>* Start(
      grpc::CallbackServerContext*, const process::StartRequest*) override {
    return new IdleStart();
  }

 private:
  process::ListResponse list_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s LIST_FILE\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  process::ListResponse list;
  if (bytes.empty() || !list.ParseFromString(bytes)) {
    std::fprintf(stderr, "grpc-bench-server: cannot read %s\n", argv[1]);
    return 1;
  }
  Service svc(std::move(list));
  int port = 0;
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&svc);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "grpc-bench-server: cannot listen\n");
    return 1;
  }
  std::printf("LISTENING %d\n", port);
  std::fflush(stdout);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (!stopping) {
    pause();
  }
  server->Shutdown(std::chrono::system_clock::now());
  return 0;
}
