// lib/tls against OpenSSL's own s_server and s_client in TLS 1.3 PSK mode, on loopback.
// s_server/s_client -psk always build their PSK session with TLS_AES_128_GCM_SHA256; for
// TLS_AES_256_GCM_SHA384 the key goes in through -psk_session (a PEM session the test writes).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/tool_process.hpp"
#include "tls/session.hpp"
#include "tls/socket_stream.hpp"

using namespace nvmeof::tls;
using nvmeof::test::run_command;
using nvmeof::test::ToolProcess;

namespace {

constexpr const char* kOpenssl = "/usr/bin/openssl";
constexpr const char* kHost = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
constexpr const char* kSub = "nqn.2024-01.io.nvmeof:tls-openssl";

TlsPsk tls_psk(PskHash h, uint8_t seed = 1) {
  const size_t n = h == PskHash::sha384 ? 48 : 32;
  ConfiguredPsk p{h, SecretBytes(n)};
  for (size_t i = 0; i < n; ++i) p.key.data()[i] = static_cast<uint8_t>(seed * 17 + i);
  auto t = derive_tls_psk(p, kHost, kSub);
  REQUIRE(t);
  return std::move(*t);
}

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/nvmeof-tls-XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    path = t;
  }
  ~TempDir() { (void)run_command("rm -rf " + path); }
};

// The PSK as an OpenSSL session in PEM, for -psk_session.
std::string write_psk_session(const TlsPsk& psk, const std::string& file) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  SSL* ssl = SSL_new(ctx);
  const unsigned char id[2] = {0x13, psk.suite == CipherSuite::aes_256_gcm_sha384 ? uint8_t{2} : uint8_t{1}};
  SSL_SESSION* s = SSL_SESSION_new();
  REQUIRE(SSL_SESSION_set1_master_key(s, psk.key.data(), psk.key.size()) == 1);
  REQUIRE(SSL_SESSION_set_cipher(s, SSL_CIPHER_find(ssl, id)) == 1);
  REQUIRE(SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) == 1);
  FILE* f = std::fopen(file.c_str(), "w");
  REQUIRE(f != nullptr);
  REQUIRE(PEM_write_SSL_SESSION(f, s) == 1);
  std::fclose(f);
  SSL_SESSION_free(s);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return file;
}

// -psk HEX for SHA-256 (the form the tools document), -psk_session for SHA-384.
std::vector<std::string> psk_args(const TlsPsk& psk, const TempDir& dir) {
  if (psk.suite == CipherSuite::aes_128_gcm_sha256) {
    return {"-psk", to_hex(psk.key.bytes()), "-psk_identity", psk.identity};
  }
  return {"-psk_session", write_psk_session(psk, dir.path + "/psk.pem"), "-psk_identity", psk.identity};
}

int listen_loopback(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 4) == 0);
  socklen_t l = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
  port = ntohs(a.sin_port);
  return fd;
}

int connect_loopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string text_line(size_t n, std::mt19937& rng) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s(n, 'x');
  for (auto& c : s) c = kChars[rng() % (sizeof kChars - 1)];
  return s;
}

// s_server -rev on a free loopback port; the process and the port once it listens.
std::unique_ptr<ToolProcess> start_s_server(const TlsPsk& psk, const TempDir& dir, uint16_t& port) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int probe = listen_loopback(port);
    ::close(probe);  // a free port now; s_server takes it next (retried if someone else did)
    std::vector<std::string> argv = {kOpenssl, "s_server", "-tls1_3", "-nocert", "-accept",
                                     "127.0.0.1:" + std::to_string(port), "-ciphersuites",
                                     cipher_suite_name(psk.suite), "-naccept", "1", "-rev"};
    for (auto& a : psk_args(psk, dir)) argv.push_back(a);
    auto p = std::make_unique<ToolProcess>(argv);
    for (std::string line; !(line = p->read_line(std::chrono::seconds(10))).empty();) {
      if (line.find("ACCEPT") != std::string::npos) return p;
    }
  }
  FAIL("openssl s_server did not start");
  return nullptr;
}

}  // namespace

TEST_CASE("our client against openssl s_server (PSK, both suites)", "[tls][interop]") {
  if (::access(kOpenssl, X_OK) != 0) {
    WARN("openssl command not installed: s_server interop skipped");
    return;
  }
  for (PskHash h : {PskHash::sha256, PskHash::sha384}) {
    const TlsPsk psk = tls_psk(h);
    TempDir dir;
    uint16_t port = 0;
    auto server = start_s_server(psk, dir, port);
    const int fd = connect_loopback(port);
    REQUIRE(fd >= 0);
    auto st = SocketStream::handshake(fd, SessionConfig::client(psk));
    REQUIRE(st);
    CHECK((*st)->session().suite() == psk.suite);
    // -rev answers each line reversed: 20 batches of 10 lines of 1000 characters.
    std::mt19937 rng(static_cast<uint32_t>(h));
    bool all = true;
    for (int batch = 0; batch < 20; ++batch) {
      std::string out, want;
      for (int i = 0; i < 10; ++i) {
        std::string l = text_line(1000, rng);
        out += l + "\n";
        want += std::string(l.rbegin(), l.rend()) + "\n";
      }
      REQUIRE((*st)->write_all({reinterpret_cast<const uint8_t*>(out.data()), out.size()},
                               std::chrono::seconds(10)));
      std::string got(want.size(), '\0');
      REQUIRE((*st)->read_exact({reinterpret_cast<uint8_t*>(got.data()), got.size()}, std::chrono::seconds(10)));
      all = all && got == want;
    }
    CHECK(all);
    const std::string bye = "CLOSE\n";
    CHECK((*st)->write_all({reinterpret_cast<const uint8_t*>(bye.data()), bye.size()}));
    ::close(fd);
    server->stop();
  }
}

TEST_CASE("a wrong PSK against openssl s_server fails cleanly", "[tls][interop]") {
  if (::access(kOpenssl, X_OK) != 0) return;
  const TlsPsk psk = tls_psk(PskHash::sha256, 1);
  TlsPsk wrong = tls_psk(PskHash::sha256, 2);
  TempDir dir;
  uint16_t port = 0;
  auto server = start_s_server(psk, dir, port);
  const int fd = connect_loopback(port);
  REQUIRE(fd >= 0);
  auto st = SocketStream::handshake(fd, SessionConfig::client(wrong));
  CHECK(st.error() == TlsErrc::psk_mismatch);
  ::close(fd);
  server->stop();
}

TEST_CASE("openssl s_client against our server (PSK, both suites)", "[tls][interop]") {
  if (::access(kOpenssl, X_OK) != 0) {
    WARN("openssl command not installed: s_client interop skipped");
    return;
  }
  for (PskHash h : {PskHash::sha256, PskHash::sha384}) {
    const TlsPsk psk = tls_psk(h, 3);
    TempDir dir;
    std::mt19937 rng(40 + static_cast<uint32_t>(h));
    std::string input, reply;
    for (int i = 0; i < 60; ++i) input += text_line(999, rng) + "\n";
    for (int i = 0; i < 80; ++i) reply += text_line(777, rng) + "\n";
    std::ofstream(dir.path + "/in") << input;

    uint16_t port = 0;
    const int lfd = listen_loopback(port);
    std::string cmd = "sh -c '" + std::string(kOpenssl) + " s_client -tls1_3 -quiet -nocommands -connect 127.0.0.1:" +
                      std::to_string(port) + " -ciphersuites " + cipher_suite_name(psk.suite);
    for (auto& a : psk_args(psk, dir)) cmd += " \"" + a + "\"";
    cmd += " <" + dir.path + "/in >" + dir.path + "/out 2>" + dir.path + "/err'";
    nvmeof::test::CommandResult client;
    int fd = -1;
    std::thread t([&] { client = run_command(cmd, 30); });
    // Whatever fails below: close our sockets first (s_client then ends), then reap it.
    struct Guard {
      std::thread& t;
      int& fd;
      int lfd;
      ~Guard() {
        if (fd >= 0) ::close(fd);
        ::close(lfd);
        if (t.joinable()) t.join();
      }
    } guard{t, fd, lfd};

    pollfd p{lfd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 20000) == 1);
    fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(fd >= 0);
    auto lookup = [&](std::string_view id) -> std::optional<PskEntry> {
      if (id != psk.identity) return std::nullopt;
      return PskEntry{psk.key, psk.suite};
    };
    auto st = SocketStream::handshake(fd, SessionConfig::server(lookup));
    REQUIRE(st);
    CHECK((*st)->session().suite() == psk.suite);
    CHECK((*st)->session().identity() == psk.identity);
    std::string got(input.size(), '\0');
    REQUIRE((*st)->read_exact({reinterpret_cast<uint8_t*>(got.data()), got.size()}, std::chrono::seconds(20)));
    CHECK(got == input);
    REQUIRE((*st)->write_all({reinterpret_cast<const uint8_t*>(reply.data()), reply.size()}));
    (*st)->close();  // close_notify: s_client exits
    t.join();
    std::stringstream out;
    out << std::ifstream(dir.path + "/out").rdbuf();
    CHECK(client.exit_code == 0);
    CHECK(out.str() == reply);
  }
}
