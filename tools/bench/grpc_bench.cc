// gRPC C++'s side of tools/bench/compare.sh: the same workloads as
// conch-bench's list/setup/bulk modes, against tools/bench/bench_server.c,
// on one channel with the callback API.  Built only when CMake finds gRPC++.
//
//   grpc-bench list  HOST:PORT CONC CALLS
//   grpc-bench setup HOST:PORT CONC STREAMS
//   grpc-bench bulk  HOST:PORT MESSAGES BYTES
//
// Prints one JSON line like conch-bench.
#include <sys/resource.h>
#include <time.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "process.grpc.pb.h"

namespace {

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

double cpu_s() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec) + double(ru.ru_utime.tv_usec) / 1e6 +
         double(ru.ru_stime.tv_sec) + double(ru.ru_stime.tv_usec) / 1e6;
}

struct Counter {
  std::mutex mu;
  std::condition_variable cv;
  long started = 0, done = 0, errors = 0, total = 0;
  double bytes = 0;

  // Claims the next call number; false when all are started.
  bool claim() {
    std::lock_guard<std::mutex> l(mu);
    if (started >= total) return false;
    started++;
    return true;
  }
  void finish(bool ok, double b = 0) {
    std::lock_guard<std::mutex> l(mu);
    if (ok) done++; else errors++;
    bytes += b;
    if (done + errors == total) cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [this] { return done + errors == total; });
  }
};

struct Unary {
  process::Process::Stub *stub;
  Counter *n;
  process::ListRequest req;

  void start() {
    if (!n->claim()) return;
    auto *ctx = new grpc::ClientContext;
    auto *resp = new process::ListResponse;
    stub->async()->List(ctx, &req, resp,
                        [this, ctx, resp](grpc::Status st) {
                          bool ok = st.ok() && resp->processes_size() == 3;
                          delete resp;
                          delete ctx;
                          n->finish(ok);
                          start();
                        });
  }
};

class Reader : public grpc::ClientReadReactor<process::StartResponse> {
 public:
  Reader(process::Process::Stub *stub, const process::StartRequest &req,
         Counter *n, bool chain)
      : n_(n), chain_(chain), stub_(stub), req_(req) {
    stub->async()->Start(&ctx_, &req_, this);
    StartRead(&resp_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    bytes_ += double(resp_.event().data().stdout().size());
    StartRead(&resp_);
  }
  void OnDone(const grpc::Status &st) override {
    Counter *n = n_;
    bool chain = chain_;
    auto *stub = stub_;
    process::StartRequest req = req_;
    double b = bytes_;
    delete this;
    n->finish(st.ok(), b);
    if (chain && n->claim()) new Reader(stub, req, n, true);
  }

 private:
  Counter *n_;
  bool chain_;
  process::Process::Stub *stub_;
  process::StartRequest req_;
  grpc::ClientContext ctx_;
  process::StartResponse resp_;
  double bytes_ = 0;
};

}  // namespace

int main(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: grpc-bench list|setup|bulk HOST:PORT A B\n");
    return 2;
  }
  std::string mode = argv[1];
  long a = std::atol(argv[3]), b = std::atol(argv[4]);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  auto ch = grpc::CreateCustomChannel(argv[2], grpc::InsecureChannelCredentials(),
                                      args);
  auto stub = process::Process::NewStub(ch);
  Counter n;
  const char *unit = "calls";
  double t0, c0;

  // Warm up the connection with one call first.
  {
    grpc::ClientContext ctx;
    process::ListRequest req;
    process::ListResponse resp;
    if (!stub->List(&ctx, req, &resp).ok()) {
      std::fprintf(stderr, "grpc-bench: warm-up call failed\n");
      return 1;
    }
  }
  t0 = now_s();
  c0 = cpu_s();
  if (mode == "list") {
    Unary u{stub.get(), &n, {}};
    n.total = b;
    for (long i = 0; i < a; i++) u.start();
    n.wait();
  } else if (mode == "setup" || mode == "bulk") {
    process::StartRequest req;
    req.mutable_process()->set_cmd("bench");
    if (mode == "setup") {
      req.mutable_process()->add_args("1");
      req.mutable_process()->add_args("64");
      n.total = b;
      for (long i = 0; i < a && n.claim(); i++)
        new Reader(stub.get(), req, &n, true);
      unit = "streams";
    } else {
      req.mutable_process()->add_args(std::to_string(a));
      req.mutable_process()->add_args(std::to_string(b));
      n.total = 1;
      n.claim();
      new Reader(stub.get(), req, &n, false);
      unit = "bytes";
    }
    n.wait();
  } else {
    std::fprintf(stderr, "grpc-bench: unknown mode %s\n", argv[1]);
    return 2;
  }
  double secs = now_s() - t0, cpu = cpu_s() - c0;
  std::printf("{\"mode\":\"%s\",\"%s\":%.0f,\"errors\":%ld,\"seconds\":%.3f,"
              "\"cpu_seconds\":%.3f}\n",
              mode.c_str(), unit,
              mode == "bulk" ? n.bytes : double(n.done), n.errors, secs, cpu);
  return n.errors > 0;
}
