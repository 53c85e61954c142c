// The user-space TLS data path's cost (lib/tls Session over memory BIOs, what a reactor runs
// when the kernel has no TLS offload): encrypt on one side + decrypt on the other per 4 KiB
// message and per 128 KiB message, both cipher suites, against memcpy of the same bytes; and
// a full PSK handshake (both sides, in memory, X25519 key exchange).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "tls/session.hpp"

namespace {

using namespace nvmeof::tls;

TlsPsk make_psk(PskHash h) {
  const size_t n = h == PskHash::sha384 ? 48 : 32;
  ConfiguredPsk p{h, SecretBytes(n)};
  for (size_t i = 0; i < n; ++i) p.key.data()[i] = static_cast<uint8_t>(i);
  return derive_tls_psk(p, "nqn.2014-08.org.nvmexpress:uuid:bench", "nqn.2024-01.io.nvmeof:bench").value();
}

struct Pair {
  std::unique_ptr<Session> c, s;
  std::vector<uint8_t> wire;
  void move(Session& from, Session& to) {
    wire.resize(from.output_pending());
    const size_t n = from.take_output(wire);
    to.feed({wire.data(), n});
  }
  bool handshake() {
    for (int i = 0; i < 10; ++i) {
      auto a = c->handshake();
      move(*c, *s);
      auto b = s->handshake();
      move(*s, *c);
      if (!a || !b) return false;
      if (*a == HandshakeState::done && *b == HandshakeState::done) return true;
    }
    return false;
  }
};

Pair make_pair(const TlsPsk& psk) {
  Pair p;
  p.c = Session::create(SessionConfig::client(psk)).value();
  auto lookup = [&psk](std::string_view) -> std::optional<PskEntry> { return PskEntry{psk.key, psk.suite}; };
  p.s = Session::create(SessionConfig::server(lookup)).value();
  return p;
}

void bm_record_stream(benchmark::State& state, PskHash h) {
  const auto len = static_cast<size_t>(state.range(0));
  const TlsPsk psk = make_psk(h);
  Pair p = make_pair(psk);
  if (!p.handshake()) {
    state.SkipWithError("handshake failed");
    return;
  }
  std::vector<uint8_t> msg(len, 0x5a), out(len);
  for (auto _ : state) {
    if (!p.c->write(msg)) break;
    p.move(*p.c, *p.s);
    size_t off = 0;
    while (off < len) {
      auto r = p.s->read({out.data() + off, len - off});
      if (!r || *r == 0) {
        state.SkipWithError("read failed");
        return;
      }
      off += *r;
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void bm_aes128(benchmark::State& s) { bm_record_stream(s, PskHash::sha256); }
void bm_aes256(benchmark::State& s) { bm_record_stream(s, PskHash::sha384); }

void bm_memcpy(benchmark::State& state) {
  const auto len = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> a(len, 0x5a), b(len);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), len);
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void bm_handshake(benchmark::State& state, PskHash h) {
  const TlsPsk psk = make_psk(h);
  for (auto _ : state) {
    Pair p = make_pair(psk);
    if (!p.handshake()) {
      state.SkipWithError("handshake failed");
      return;
    }
  }
}
void bm_handshake_aes128(benchmark::State& s) { bm_handshake(s, PskHash::sha256); }
void bm_handshake_aes256(benchmark::State& s) { bm_handshake(s, PskHash::sha384); }

}  // namespace

BENCHMARK(bm_memcpy)->Arg(4096)->Arg(128 << 10);
BENCHMARK(bm_aes128)->Arg(4096)->Arg(128 << 10);
BENCHMARK(bm_aes256)->Arg(4096)->Arg(128 << 10);
BENCHMARK(bm_handshake_aes128)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_handshake_aes256)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
