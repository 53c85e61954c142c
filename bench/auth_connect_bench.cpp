// Connect time of a path with and without DH-HMAC-CHAP, against the embedded target in this
// process: each round connects one Controller (admin queue: TCP, ICReq, Fabrics Connect,
// Property Get/Set, Identify, Set Features) plus one I/O queue, as a host with no key and as a
// host whose key the target holds (SHA-256 with ffdhe2048 by default, both queues
// authenticated), alternating so both see the same machine. Prints the median and p90 of each
// and their ratio. A measurement, not a test.
//   auth_connect_bench [--rounds N] [--hash sha256] [--dhgroup ffdhe2048] [--bidirectional]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "auth/secret.hpp"
#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/target.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"

using namespace nvmeof;
using Clock = std::chrono::steady_clock;

namespace {
constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:auth-bench";
constexpr char kPlainHost[] = "nqn.2024-01.io.nvmeof.bench:plain";
constexpr char kAuthHost[] = "nqn.2024-01.io.nvmeof.bench:dhchap";

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Connect time with and without DH-HMAC-CHAP against the embedded target"};
  int rounds = 40;
  std::string hash = "sha256", group = "ffdhe2048";
  bool bidi = false;
  app.add_option("--rounds", rounds, "connects of each kind")->check(CLI::Range(1, 100000));
  app.add_option("--hash", hash, "sha256, sha384 or sha512");
  app.add_option("--dhgroup", group, "null, ffdhe2048 ... ffdhe8192");
  app.add_flag("--bidirectional", bidi, "the host authenticates the controller too");
  CLI11_PARSE(app, argc, argv);

  auto hk = auth::generate_secret(auth::HashId::sha256, 32, kAuthHost);
  auto ck = auth::generate_secret(auth::HashId::none, 32, kNqn);
  if (!hk || !ck) return 1;
  TargetOptions to;
  to.ports.assign(1, TargetPort{"127.0.0.1", "0", AnaState::optimized});
  to.subsystems[0].nqn = kNqn;
  to.subsystems[0].namespaces[0].size_bytes = 4ull << 20;
  TargetHost plain;
  plain.nqn = kPlainHost;
  TargetHost authed;
  authed.nqn = kAuthHost;
  authed.dhchap_key = auth::format_secret(*hk);
  if (bidi) authed.dhchap_ctrl_key = auth::format_secret(*ck);
  authed.dhchap_hash = hash;
  authed.dhchap_dhgroup = group;
  to.subsystems[0].hosts = {plain, authed};
  auto target = Target::start(to);
  if (!target) {
    std::fprintf(stderr, "target: %s\n", target.error().message().c_str());
    return 1;
  }
  TransportAddress addr;
  addr.traddr = "127.0.0.1";
  addr.trsvcid = std::to_string((*target)->port_number(0));
  auto cp_made = ControlPlane::create();
  if (!cp_made) {
    std::fprintf(stderr, "%s\n", cp_made.message().c_str());
    return 1;
  }
  ControlPlane& cp = **cp_made;
  auto reactor = Reactor::create();
  if (!reactor) return 1;

  auto connect_once = [&](bool with_auth) -> double {
    ConnectOptions o;
    o.subnqn = kNqn;
    o.hostnqn = with_auth ? kAuthHost : kPlainHost;
    o.kato_ms = 5000;
    if (with_auth) {
      o.dhchap_secret = authed.dhchap_key;
      if (bidi) o.dhchap_ctrl_secret = authed.dhchap_ctrl_key;
    }
    const auto t0 = Clock::now();
    auto c = Controller::connect(cp, addr, o);
    if (!c) {
      std::fprintf(stderr, "connect (%s): %s\n", with_auth ? "dhchap" : "plain", c.error().message().c_str());
      std::exit(1);
    }
    auto qp = create_io_queue(**c, **reactor, 32);
    if (!qp) {
      std::fprintf(stderr, "I/O queue: %s\n", qp.error().message().c_str());
      std::exit(1);
    }
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    qp->reset();
    (*c)->disconnect();
    return us;
  };
  std::vector<double> plain_us, auth_us;
  for (int i = 0; i < rounds; ++i) {
    plain_us.push_back(connect_once(false));
    auth_us.push_back(connect_once(true));
  }
  const auto st = (*target)->stats(0);
  std::printf("connect (admin + 1 I/O queue), %d rounds each, alternating; DH-HMAC-CHAP %s %s %s\n", rounds,
              hash.c_str(), group.c_str(), bidi ? "bidirectional" : "unidirectional");
  std::printf("  plain   median %8.0f us  p90 %8.0f us\n", pct(plain_us, 0.5), pct(plain_us, 0.9));
  std::printf("  dhchap  median %8.0f us  p90 %8.0f us\n", pct(auth_us, 0.5), pct(auth_us, 0.9));
  std::printf("  ratio (median) %.2fx; target counted %llu authentications, %llu failures\n",
              pct(auth_us, 0.5) / pct(plain_us, 0.5), static_cast<unsigned long long>(st.authentications),
              static_cast<unsigned long long>(st.auth_failures));
  return st.auth_failures == 0 && st.authentications == static_cast<uint64_t>(2 * rounds) ? 0 : 1;
}
