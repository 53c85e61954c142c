// Our host's DH-HMAC-CHAP against Linux nvmet, run inside the 6.12 testbed guest by
// nvmet_auth_test.sh, which configures nvmet's host entry (key, controller key, hash, DH group)
// before each call:
//   auth_host ADDR:PORT HOSTNQN SECRET [CTRL_SECRET]
// connects a controller (admin queue authenticated), opens an I/O queue (authenticated too),
// writes a pattern, reads it back and compares. Prints "auth_host: ok" and exits 0, or prints
// the error and exits 1 (the script expects that for a wrong key); 2 for bad arguments.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"
#include "reactor/sync_io.hpp"
#include "testbed_env.hpp"

using namespace nvmeof;

int main(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: auth_host ADDR:PORT HOSTNQN SECRET [CTRL_SECRET]\n");
    return 2;
  }
  auto addr = TransportAddress::parse(argv[1]);
  if (!addr) {
    std::fprintf(stderr, "auth_host: bad address %s\n", argv[1]);
    return 2;
  }
  ConnectOptions o = test::testbed_options();
  o.hostnqn = argv[2];
  o.dhchap_secret = argv[3];
  if (argc == 5) o.dhchap_ctrl_secret = argv[4];
  auto cp_made = ControlPlane::create();
  if (!cp_made) {
    std::fprintf(stderr, "%s\n", cp_made.message().c_str());
    return 1;
  }
  ControlPlane& cp = **cp_made;
  auto c = Controller::connect(cp, *addr, o);
  if (!c) {
    std::printf("auth_host: connect failed: %s\n", c.error().message().c_str());
    return 1;
  }
  auto reactor = Reactor::create();
  if (!reactor) return 1;
  auto qp = create_io_queue(**c, **reactor, 16);
  if (!qp) {
    std::printf("auth_host: I/O queue failed: %s\n", qp.error().message().c_str());
    return 1;
  }
  SyncIo io(**qp, **reactor, 1, 4096, std::chrono::seconds(20));
  std::vector<uint8_t> out(16384), in(16384, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 13 + argc);
  if (auto r = io.write(64, 4, out.data()); !r) {
    std::printf("auth_host: write failed: %s\n", r.error().message().c_str());
    return 1;
  }
  if (auto r = io.read(64, 4, in.data()); !r) {
    std::printf("auth_host: read failed: %s\n", r.error().message().c_str());
    return 1;
  }
  if (std::memcmp(out.data(), in.data(), out.size()) != 0) {
    std::printf("auth_host: read back differs from what was written\n");
    return 1;
  }
  std::printf("auth_host: ok (admin and I/O queue authenticated, 16 KiB verified)\n");
  return 0;
}
