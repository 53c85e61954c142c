// lib/tls sessions: our client against our server, through the memory-BIO interface (as a
// reactor drives it) and through the blocking SocketStream over a socketpair.
#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "tls/ktls.hpp"
#include "tls/session.hpp"
#include "tls/socket_stream.hpp"

using namespace nvmeof::tls;

namespace {

constexpr const char* kHost = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
constexpr const char* kSub = "nqn.2024-01.io.nvmeof:tls-session";

ConfiguredPsk configured(PskHash h, uint8_t seed = 1) {
  const size_t n = h == PskHash::sha384 ? 48 : 32;
  ConfiguredPsk p{h, SecretBytes(n)};
  for (size_t i = 0; i < n; ++i) p.key.data()[i] = static_cast<uint8_t>(seed * 31 + i);
  return p;
}

TlsPsk tls_psk(PskHash h, uint8_t seed = 1, IdentityVersion v = IdentityVersion::v0) {
  auto t = derive_tls_psk(configured(h, seed), kHost, kSub, v);
  REQUIRE(t);
  return std::move(*t);
}

// A server that knows exactly one identity.
PskLookup lookup_for(const TlsPsk& psk) {
  return [id = psk.identity, key = psk.key, suite = psk.suite](std::string_view identity) -> std::optional<PskEntry> {
    if (identity != id) return std::nullopt;
    return PskEntry{key, suite};
  };
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0); }
  ~SocketPair() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  void close(int i) {
    ::close(fd[i]);
    fd[i] = -1;
  }
};

// Moves all pending ciphertext of `from` into `to`, `piece` bytes per feed() call.
void pump(Session& from, Session& to, size_t piece = 1 << 20) {
  std::vector<uint8_t> buf(from.output_pending());
  const size_t n = from.take_output(buf);
  for (size_t off = 0; off < n; off += piece) to.feed({buf.data() + off, std::min(piece, n - off)});
}

// Drives both memory sessions to the end of their handshakes (or a failure); the results.
std::pair<nvmeof::Result<HandshakeState>, nvmeof::Result<HandshakeState>> handshake_in_memory(
    Session& c, Session& s, size_t piece = 1 << 20) {
  nvmeof::Result<HandshakeState> rc = HandshakeState::want_input, rs = HandshakeState::want_input;
  for (int round = 0; round < 20; ++round) {
    rc = c.handshake();
    pump(c, s, piece);
    rs = s.handshake();
    pump(s, c, piece);
    if (!rc || !rs) {
      // Let each side read the other's alert.
      rc = c.handshake();
      rs = s.handshake();
      break;
    }
    if (*rc == HandshakeState::done && *rs == HandshakeState::done) break;
  }
  return {rc, rs};
}

struct ServerResult {
  std::error_code handshake;
  std::error_code data;
  std::string identity;
  CipherSuite suite{};
};

// Client on fd[0] (this thread), server on fd[1] (a thread); `serve` runs after the server's
// handshake, `use` after the client's.
template <class Serve, class Use>
std::pair<std::error_code, ServerResult> run_pair(SessionConfig client, SessionConfig server, Serve serve,
                                                  Use use) {
  SocketPair sp;
  ServerResult sr;
  std::thread t([&] {
    auto st = SocketStream::handshake(sp.fd[1], std::move(server));
    if (!st) {
      sr.handshake = st.error();
      return;
    }
    sr.identity = (*st)->session().identity();
    sr.suite = (*st)->session().suite();
    sr.data = serve(**st);
  });
  auto ct = SocketStream::handshake(sp.fd[0], std::move(client));
  std::error_code cerr;
  if (!ct) {
    cerr = ct.error();
    // Unblock a server that waits for more.
    ::shutdown(sp.fd[0], SHUT_RDWR);
  } else {
    try {
      use(**ct);
    } catch (...) {
      ::shutdown(sp.fd[0], SHUT_RDWR);
      t.join();
      throw;
    }
  }
  t.join();
  return {cerr, sr};
}

const std::vector<size_t> kSizes = {1, 7, 100, 4096, 16383, 16384, 16385, 65539, 131072, 1 << 20};

}  // namespace

TEST_CASE("memory sessions: handshake in one-byte pieces, both suites, data verified", "[tls][session]") {
  for (PskHash h : {PskHash::sha256, PskHash::sha384}) {
    const TlsPsk psk = tls_psk(h);
    auto c = Session::create(SessionConfig::client(psk));
    auto s = Session::create(SessionConfig::server(lookup_for(psk)));
    REQUIRE(c);
    REQUIRE(s);
    CHECK((*c)->write(pattern(10, 1)).error() == TlsErrc::not_established);
    auto [rc, rs] = handshake_in_memory(**c, **s, 1);
    REQUIRE(rc);
    REQUIRE(rs);
    CHECK(*rc == HandshakeState::done);
    CHECK(*rs == HandshakeState::done);
    const CipherSuite want = h == PskHash::sha384 ? CipherSuite::aes_256_gcm_sha384 : CipherSuite::aes_128_gcm_sha256;
    CHECK((*c)->suite() == want);
    CHECK((*s)->suite() == want);
    CHECK((*s)->identity() == psk.identity);

    // Both directions, many records, fed in odd pieces.
    for (size_t n : {size_t{1}, size_t{4096}, size_t{131072}, size_t{300001}}) {
      const auto data = pattern(n, static_cast<uint32_t>(n));
      REQUIRE((*c)->write(data));
      pump(**c, **s, 1000);
      std::vector<uint8_t> got(n);
      size_t off = 0;
      while (off < n) {
        auto r = (*s)->read({got.data() + off, n - off});
        REQUIRE(r);
        REQUIRE(*r > 0);
        off += *r;
      }
      CHECK(got == data);
      auto more = (*s)->read(got);
      REQUIRE(more);
      CHECK(*more == 0);  // nothing buffered: "feed more"

      REQUIRE((*s)->write(data));
      pump(**s, **c, 777);
      std::vector<uint8_t> back(n);
      off = 0;
      while (off < n) {
        auto r = (*c)->read({back.data() + off, n - off});
        REQUIRE(r);
        REQUIRE(*r > 0);
        off += *r;
      }
      CHECK(back == data);
    }
    // close_notify ends the peer's stream cleanly.
    (*c)->close();
    pump(**c, **s);
    std::vector<uint8_t> tail(16);
    CHECK((*s)->read(tail).error() == TlsErrc::peer_closed);
  }
}

TEST_CASE("memory sessions: a corrupted record fails to decrypt", "[tls][session]") {
  const TlsPsk psk = tls_psk(PskHash::sha256);
  auto c = Session::create(SessionConfig::client(psk));
  auto s = Session::create(SessionConfig::server(lookup_for(psk)));
  REQUIRE(c);
  REQUIRE(s);
  auto [rc, rs] = handshake_in_memory(**c, **s);
  REQUIRE(rc);
  REQUIRE(rs);
  REQUIRE((*c)->write(pattern(4096, 3)));
  std::vector<uint8_t> wire((*c)->output_pending());
  (*c)->take_output(wire);
  wire[100] ^= 0x40;
  (*s)->feed(wire);
  std::vector<uint8_t> got(4096);
  auto r = (*s)->read(got);
  CHECK(r.error() == TlsErrc::record_error);
  CHECK_FALSE((*s)->error_detail().empty());
}

TEST_CASE("memory sessions: the handshake deadline", "[tls][session]") {
  SessionConfig cfg = SessionConfig::client(tls_psk(PskHash::sha256));
  cfg.handshake_timeout = std::chrono::milliseconds(50);
  auto c = Session::create(std::move(cfg));
  REQUIRE(c);
  auto first = (*c)->handshake();
  REQUIRE(first);
  CHECK(*first == HandshakeState::want_input);
  CHECK((*c)->output_pending() > 0);  // the ClientHello
  auto late = (*c)->handshake((*c)->handshake_deadline());
  CHECK(late.error() == TlsErrc::handshake_timeout);
  CHECK((*c)->handshake().error() == TlsErrc::handshake_timeout);  // stays failed
}

TEST_CASE("socket streams: both hashes and identity versions, data verified", "[tls][session]") {
  for (PskHash h : {PskHash::sha256, PskHash::sha384}) {
    for (IdentityVersion v : {IdentityVersion::v0, IdentityVersion::v1}) {
      const TlsPsk psk = tls_psk(h, 5, v);
      size_t total = 0;
      for (size_t n : kSizes) total += n;
      // The server reads each message whole, then echoes it (so neither side blocks the other).
      auto serve = [&](SocketStream& st) -> std::error_code {
        for (size_t n : kSizes) {
          std::vector<uint8_t> buf(n);
          if (auto r = st.read_exact(buf); !r) return r.error();
          if (auto w = st.write_all(buf); !w) return w.error();
        }
        // 500 small records in a row.
        std::vector<uint8_t> small(500 * 64);
        if (auto r = st.read_exact(small); !r) return r.error();
        if (auto w = st.write_all(small); !w) return w.error();
        st.close();
        return {};
      };
      bool verified = false;
      auto use = [&](SocketStream& st) {
        bool all = true;
        for (size_t n : kSizes) {
          const auto data = pattern(n, static_cast<uint32_t>(n + total));
          REQUIRE(st.write_all(data));
          std::vector<uint8_t> back(n);
          REQUIRE(st.read_exact(back));
          all = all && back == data;
        }
        const auto small = pattern(64 * 500, 9);
        for (size_t i = 0; i < 500; ++i) REQUIRE(st.write_all({small.data() + i * 64, 64}));
        std::vector<uint8_t> back(small.size());
        REQUIRE(st.read_exact(back));
        all = all && back == small;
        std::vector<uint8_t> tail(1);
        CHECK(st.read_some(tail).error() == TlsErrc::peer_closed);
        verified = all;
      };
      auto [cerr, sr] = run_pair(SessionConfig::client(psk), SessionConfig::server(lookup_for(psk)), serve, use);
      CHECK_FALSE(cerr);
      CHECK_FALSE(sr.handshake);
      CHECK_FALSE(sr.data);
      CHECK(verified);
      CHECK(sr.identity == psk.identity);
      CHECK(sr.suite == psk.suite);
    }
  }
}

TEST_CASE("socket streams: wrong PSK fails cleanly on both sides", "[tls][session]") {
  const TlsPsk client = tls_psk(PskHash::sha256, 1);
  TlsPsk server = tls_psk(PskHash::sha256, 2);  // same identity, another key
  REQUIRE(client.identity == server.identity);
  auto [cerr, sr] = run_pair(SessionConfig::client(client), SessionConfig::server(lookup_for(server)),
                             [](SocketStream&) { return std::error_code{}; }, [](SocketStream&) {});
  CHECK(cerr == TlsErrc::psk_mismatch);
  CHECK(sr.handshake == TlsErrc::psk_mismatch);
}

TEST_CASE("socket streams: unknown identity and no shared cipher", "[tls][session]") {
  const TlsPsk client = tls_psk(PskHash::sha256);
  SECTION("the server does not know the identity") {
    auto none = [](std::string_view) -> std::optional<PskEntry> { return std::nullopt; };
    auto [cerr, sr] = run_pair(SessionConfig::client(client), SessionConfig::server(none),
                               [](SocketStream&) { return std::error_code{}; }, [](SocketStream&) {});
    CHECK(sr.handshake == TlsErrc::unknown_identity);
    CHECK(cerr == TlsErrc::handshake_rejected);
  }
  SECTION("the server accepts only TLS_AES_256_GCM_SHA384") {
    auto [cerr, sr] = run_pair(SessionConfig::client(client),
                               SessionConfig::server(lookup_for(client), {CipherSuite::aes_256_gcm_sha384}),
                               [](SocketStream&) { return std::error_code{}; }, [](SocketStream&) {});
    CHECK(sr.handshake == TlsErrc::no_shared_cipher);
    CHECK(cerr == TlsErrc::handshake_rejected);
  }
}

TEST_CASE("socket streams: a peer closing mid-handshake", "[tls][session]") {
  const TlsPsk psk = tls_psk(PskHash::sha256);
  SECTION("the server closes after the ClientHello") {
    SocketPair sp;
    std::thread t([&] {
      uint8_t b[512];
      (void)::recv(sp.fd[1], b, sizeof b, 0);  // blocks until the ClientHello arrives
      sp.close(1);
    });
    auto ct = SocketStream::handshake(sp.fd[0], SessionConfig::client(psk));
    t.join();
    CHECK(ct.error() == TlsErrc::peer_closed);
  }
  SECTION("the client stops in the middle of its ClientHello") {
    auto c = Session::create(SessionConfig::client(psk));
    REQUIRE(c);
    REQUIRE((*c)->handshake());
    std::vector<uint8_t> hello((*c)->output_pending());
    (*c)->take_output(hello);
    REQUIRE(hello.size() > 20);
    SocketPair sp;
    REQUIRE(::send(sp.fd[0], hello.data(), 20, 0) == 20);
    ::shutdown(sp.fd[0], SHUT_WR);
    auto st = SocketStream::handshake(sp.fd[1], SessionConfig::server(lookup_for(psk)));
    CHECK(st.error() == TlsErrc::peer_closed);
  }
}

TEST_CASE("socket streams: a silent peer times the handshake out", "[tls][session]") {
  SocketPair sp;
  SessionConfig cfg = SessionConfig::client(tls_psk(PskHash::sha384));
  cfg.handshake_timeout = std::chrono::milliseconds(100);
  auto ct = SocketStream::handshake(sp.fd[0], std::move(cfg));
  CHECK(ct.error() == TlsErrc::handshake_timeout);
}

TEST_CASE("kernel TLS probe reads the ULP list", "[tls][ktls]") {
  char path[] = "/tmp/nvmeof-ulp-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "espintcp mptcp tls\n", 19) == 19);
  ::close(fd);
  CHECK(probe_ktls(path).kernel_ulp);
  {
    FILE* f = std::fopen(path, "w");
    std::fputs("mptcp\n", f);
    std::fclose(f);
  }
  const KtlsSupport s = probe_ktls(path);
  CHECK_FALSE(s.kernel_ulp);
  CHECK(s.available_ulps == "mptcp");
  ::unlink(path);
  const KtlsSupport here = probe_ktls();
  INFO("this kernel's ULPs: " << here.available_ulps << "; libssl KTLS: " << here.openssl_ktls);
  CHECK(here.openssl_ktls);  // Debian's libssl 3.0 is built with KTLS
}

namespace {

// One TLS 1.3 record (RFC 8446 5.2) protected with `d` at sequence `seq`, done with EVP
// AES-GCM directly: what the kernel's record layer computes with the keys traffic_keys() gave.
std::vector<uint8_t> seal_record(const DirectionKeys& d, uint64_t seq, std::span<const uint8_t> plain) {
  uint8_t nonce[12];
  std::memcpy(nonce, d.iv.data(), 12);
  for (int i = 0; i < 8; ++i) nonce[4 + i] ^= static_cast<uint8_t>(seq >> (8 * (7 - i)));
  std::vector<uint8_t> inner(plain.begin(), plain.end());
  inner.push_back(0x17);  // application_data
  const size_t len = inner.size() + 16;
  std::vector<uint8_t> rec = {0x17, 0x03, 0x03, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len)};
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  REQUIRE(EVP_EncryptInit_ex(ctx, d.key.size() == 32 ? EVP_aes_256_gcm() : EVP_aes_128_gcm(), nullptr,
                             d.key.data(), nonce) == 1);
  int n = 0;
  REQUIRE(EVP_EncryptUpdate(ctx, nullptr, &n, rec.data(), 5) == 1);
  rec.resize(5 + len);
  REQUIRE(EVP_EncryptUpdate(ctx, rec.data() + 5, &n, inner.data(), static_cast<int>(inner.size())) == 1);
  REQUIRE(EVP_EncryptFinal_ex(ctx, rec.data() + 5 + n, &n) == 1);
  REQUIRE(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, rec.data() + 5 + inner.size()) == 1);
  EVP_CIPHER_CTX_free(ctx);
  return rec;
}

// The inverse: the content of one record, or nullopt when it does not verify.
std::optional<std::vector<uint8_t>> open_record(const DirectionKeys& d, uint64_t seq, std::span<const uint8_t> rec) {
  if (rec.size() < 5 + 17) return std::nullopt;
  uint8_t nonce[12];
  std::memcpy(nonce, d.iv.data(), 12);
  for (int i = 0; i < 8; ++i) nonce[4 + i] ^= static_cast<uint8_t>(seq >> (8 * (7 - i)));
  const size_t clen = rec.size() - 5 - 16;
  std::vector<uint8_t> out(clen);
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  EVP_DecryptInit_ex(ctx, d.key.size() == 32 ? EVP_aes_256_gcm() : EVP_aes_128_gcm(), nullptr, d.key.data(), nonce);
  int n = 0;
  EVP_DecryptUpdate(ctx, nullptr, &n, rec.data(), 5);
  EVP_DecryptUpdate(ctx, out.data(), &n, rec.data() + 5, static_cast<int>(clen));
  EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, const_cast<uint8_t*>(rec.data() + 5 + clen));
  const bool ok = EVP_DecryptFinal_ex(ctx, out.data() + n, &n) == 1;
  EVP_CIPHER_CTX_free(ctx);
  if (!ok || out.empty() || out.back() != 0x17) return std::nullopt;
  out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("kernel TLS keys: derived from OpenSSL's secrets, they open and seal its records", "[tls][ktls]") {
  for (PskHash h : {PskHash::sha256, PskHash::sha384}) {
    const TlsPsk psk = tls_psk(h);
    SessionConfig ccfg = SessionConfig::client(psk);
    ccfg.keep_traffic_secrets = true;
    SessionConfig scfg = SessionConfig::server(lookup_for(psk));
    scfg.keep_traffic_secrets = true;
    auto c = Session::create(std::move(ccfg));
    auto s = Session::create(std::move(scfg));
    REQUIRE(c);
    REQUIRE(s);
    auto [rc, rs] = handshake_in_memory(**c, **s);
    REQUIRE(rc);
    REQUIRE(rs);
    CHECK((*c)->client_traffic_secret().size() == hash_size(h));
    CHECK((*c)->server_traffic_secret() == (*s)->server_traffic_secret());
    CHECK((*c)->input_buffered() == 0);
    auto ck = traffic_keys(**c);
    auto sk = traffic_keys(**s);
    REQUIRE(ck);
    REQUIRE(sk);
    CHECK(ck->tx.key.size() == (h == PskHash::sha384 ? 32u : 16u));
    CHECK(ck->tx.key == sk->rx.key);
    CHECK(ck->rx.iv == sk->tx.iv);
    CHECK_FALSE(ck->tx.key == ck->rx.key);

    // The server's records (OpenSSL's record layer), opened with the client's receive keys at
    // sequences 0, 1, 2: what the kernel does after the hand-off.
    for (uint64_t seq = 0; seq < 3; ++seq) {
      const auto msg = pattern(100 + seq * 1000, static_cast<uint32_t>(seq));
      REQUIRE((*s)->write(msg));
      std::vector<uint8_t> rec((*s)->output_pending());
      (*s)->take_output(rec);
      auto got = open_record(ck->rx, seq, rec);
      REQUIRE(got);
      CHECK(*got == msg);
      // A wrong sequence or the other direction's keys do not open it (the negative control).
      CHECK_FALSE(open_record(ck->rx, seq + 1, rec));
      CHECK_FALSE(open_record(ck->tx, seq, rec));
    }
    // Records sealed with the client's send keys, read by OpenSSL's server.
    for (uint64_t seq = 0; seq < 3; ++seq) {
      const auto msg = pattern(4096, static_cast<uint32_t>(seq + 7));
      const auto rec = seal_record(ck->tx, seq, msg);
      (*s)->feed(rec);
      std::vector<uint8_t> out(8192);
      auto n = (*s)->read(out);
      REQUIRE(n);
      REQUIRE(*n == msg.size());
      out.resize(*n);
      CHECK(out == msg);
    }
  }
}

TEST_CASE("kernel TLS hand-off refuses what it cannot take", "[tls][ktls]") {
  const TlsPsk psk = tls_psk(PskHash::sha256);
  // Secrets not kept: no keys.
  auto c = Session::create(SessionConfig::client(psk));
  auto s = Session::create(SessionConfig::server(lookup_for(psk)));
  REQUIRE(c);
  REQUIRE(s);
  CHECK(traffic_keys(**c).error() == TlsErrc::not_established);
  auto [rc, rs] = handshake_in_memory(**c, **s);
  REQUIRE(rc);
  CHECK((*c)->client_traffic_secret().empty());
  CHECK(traffic_keys(**c).error() == TlsErrc::ktls_unavailable);

  // Kept, but a record is already buffered: the hand-off would lose it.
  SessionConfig ccfg = SessionConfig::client(psk);
  ccfg.keep_traffic_secrets = true;
  auto c2 = Session::create(std::move(ccfg));
  auto s2 = Session::create(SessionConfig::server(lookup_for(psk)));
  auto [rc2, rs2] = handshake_in_memory(**c2, **s2);
  REQUIRE(rc2);
  REQUIRE((*s2)->write(pattern(10, 1)));
  pump(**s2, **c2);
  CHECK((*c2)->input_buffered() > 0);
  auto buffered = enable_ktls(-1, **c2);
  CHECK(buffered.error() == TlsErrc::ktls_unavailable);
  CHECK(buffered.detail().find("buffered") != std::string::npos);

  // A socket that is not TCP: the kernel refuses the ULP, the error says so.
  SocketPair sp;
  auto keys = traffic_keys(**c2);
  REQUIRE(keys);
  auto not_tcp = install_ktls(sp.fd[0], *keys);
  CHECK(not_tcp.error() == TlsErrc::ktls_unavailable);
  CHECK(not_tcp.detail().find("TCP_ULP") != std::string::npos);
}

TEST_CASE("the NVMe PSK lookup derives the key from the identity", "[tls][session]") {
  const ConfiguredPsk cfg = configured(PskHash::sha384, 4);
  auto lookup = nvme_psk_lookup(cfg, [](std::string_view sub) { return sub == kSub; });
  for (IdentityVersion v : {IdentityVersion::v0, IdentityVersion::v1}) {
    for (const char* host : {kHost, "nqn.2014-08.org.nvmexpress:uuid:another-host"}) {
      auto psk = derive_tls_psk(cfg, host, kSub, v);
      REQUIRE(psk);
      auto e = lookup(psk->identity);
      REQUIRE(e);
      CHECK(e->key == psk->key);
      CHECK(e->suite == CipherSuite::aes_256_gcm_sha384);
      // And a handshake with it.
      auto c = Session::create(SessionConfig::client(*psk));
      auto s = Session::create(SessionConfig::server(lookup));
      REQUIRE(c);
      REQUIRE(s);
      auto [rc, rs] = handshake_in_memory(**c, **s);
      CHECK(rc);
      CHECK(rs);
    }
  }
  auto other_sub = derive_tls_psk(cfg, kHost, "nqn.2024-01.io.nvmeof:elsewhere");
  CHECK_FALSE(lookup(other_sub->identity));
  // The identity's hash must be the PSK's: NVMe0R01 for a SHA-384 key is refused.
  std::string wrong_hash = derive_tls_psk(cfg, kHost, kSub)->identity;
  wrong_hash[7] = '1';
  CHECK_FALSE(lookup(wrong_hash));
  // A v1 identity with a forged digest.
  std::string forged = derive_tls_psk(cfg, kHost, kSub, IdentityVersion::v1)->identity;
  forged[forged.size() - 3] = forged[forged.size() - 3] == 'A' ? 'B' : 'A';
  CHECK_FALSE(lookup(forged));
  for (const char* junk : {"", "NVMe", "NVMe0R01", "NVMe0R01 hostonly", "NVMe2R01 a b", "XXXX0R01 a b"}) {
    CHECK_FALSE(lookup(junk));
  }
}
