#include "tls/session.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <climits>

namespace nvmeof::tls {

struct Session::Impl {
  static const SSL_CIPHER* find_cipher(SSL* ssl, CipherSuite s) {
    // IANA code points: TLS_AES_128_GCM_SHA256 0x1301, TLS_AES_256_GCM_SHA384 0x1302.
    const unsigned char id[2] = {0x13, s == CipherSuite::aes_256_gcm_sha384 ? uint8_t{0x02}
                                                                           : uint8_t{0x01}};
    return SSL_CIPHER_find(ssl, id);
  }

  static SSL_SESSION* make_psk_session(SSL* ssl, const SecretBytes& key, CipherSuite s) {
    const SSL_CIPHER* c = find_cipher(ssl, s);
    if (c == nullptr) return nullptr;
    SSL_SESSION* ss = SSL_SESSION_new();
    if (ss == nullptr) return nullptr;
    if (SSL_SESSION_set1_master_key(ss, key.data(), key.size()) != 1 ||
        SSL_SESSION_set_cipher(ss, c) != 1 ||
        SSL_SESSION_set_protocol_version(ss, TLS1_3_VERSION) != 1) {
      SSL_SESSION_free(ss);
      return nullptr;
    }
    return ss;
  }

  static int use_session(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* idlen,
                         SSL_SESSION** sess) {
    auto* self = static_cast<Session*>(SSL_get_app_data(ssl));
    const TlsPsk& psk = self->cfg_.client_psk;
    *sess = nullptr;
    *id = nullptr;
    *idlen = 0;
    const SSL_CIPHER* c = find_cipher(ssl, psk.suite);
    if (c == nullptr) return 0;
    // After a HelloRetryRequest OpenSSL asks again with the negotiated hash: a PSK of another
    // hash must then not be offered.
    if (md != nullptr && EVP_MD_get_type(md) != EVP_MD_get_type(SSL_CIPHER_get_handshake_digest(c))) {
      return 1;
    }
    SSL_SESSION* ss = make_psk_session(ssl, psk.key, psk.suite);
    if (ss == nullptr) return 0;
    *sess = ss;
    *id = reinterpret_cast<const unsigned char*>(psk.identity.data());
    *idlen = psk.identity.size();
    return 1;
  }

  // OpenSSL's key log (NSS format): "<LABEL> <client random hex> <secret hex>". Only the two
  // first application traffic secrets are kept, and only when asked for (kernel TLS).
  static void keylog(const SSL* ssl, const char* line) {
    auto* self = static_cast<Session*>(SSL_get_app_data(ssl));
    if (self == nullptr || !self->cfg_.keep_traffic_secrets) return;
    const std::string_view l(line);
    SecretBytes* into = nullptr;
    constexpr std::string_view kClient = "CLIENT_TRAFFIC_SECRET_0 ";
    constexpr std::string_view kServer = "SERVER_TRAFFIC_SECRET_0 ";
    if (l.substr(0, kClient.size()) == kClient) into = &self->client_secret_;
    if (l.substr(0, kServer.size()) == kServer) into = &self->server_secret_;
    if (into == nullptr) return;
    const size_t sp = l.rfind(' ');
    const std::string_view hex = l.substr(sp + 1);
    if (hex.size() % 2 != 0 || hex.size() > 2 * EVP_MAX_MD_SIZE) return;
    SecretBytes out(hex.size() / 2);
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    for (size_t i = 0; i < out.size(); ++i) {
      const int hi = nibble(hex[2 * i]);
      const int lo = nibble(hex[2 * i + 1]);
      if (hi < 0 || lo < 0) return;
      out.data()[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    *into = std::move(out);
  }

  static int find_session(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
    auto* self = static_cast<Session*>(SSL_get_app_data(ssl));
    *sess = nullptr;
    const std::string_view identity(reinterpret_cast<const char*>(id), idlen);
    std::optional<PskEntry> e = self->cfg_.server_lookup(identity);
    if (!e) {
      self->unknown_identity_ = true;
      return 1;  // continue without a PSK: the handshake then fails (no certificate)
    }
    SSL_SESSION* ss = make_psk_session(ssl, e->key, e->suite);
    if (ss == nullptr) return 0;
    self->identity_ = std::string(identity);
    *sess = ss;
    return 1;
  }
};

PskLookup nvme_psk_lookup(ConfiguredPsk configured, std::function<bool(std::string_view)> accept_subnqn) {
  return [configured = std::move(configured), accept = std::move(accept_subnqn)](
             std::string_view identity) -> std::optional<PskEntry> {
    // "NVMe0R01 host sub" / "NVMe1R02 host sub digest": NQNs hold no spaces.
    if (identity.size() < 10 || identity.substr(0, 4) != "NVMe" || identity[5] != 'R' ||
        identity[8] != ' ') {
      return std::nullopt;
    }
    const char v = identity[4];
    if (v != '0' && v != '1') return std::nullopt;
    std::string_view rest = identity.substr(9);
    const size_t sp = rest.find(' ');
    if (sp == std::string_view::npos) return std::nullopt;
    const std::string_view host = rest.substr(0, sp);
    rest.remove_prefix(sp + 1);
    const std::string_view sub = rest.substr(0, rest.find(' '));
    if (accept && !accept(sub)) return std::nullopt;
    auto psk = derive_tls_psk(configured, host, sub, v == '1' ? IdentityVersion::v1 : IdentityVersion::v0);
    if (!psk || psk->identity != identity) return std::nullopt;
    return PskEntry{std::move(psk->key), psk->suite};
  };
}

SessionConfig SessionConfig::client(TlsPsk psk) {
  SessionConfig c;
  c.role = Role::client;
  c.client_psk = std::move(psk);
  return c;
}

SessionConfig SessionConfig::server(PskLookup lookup, std::vector<CipherSuite> suites) {
  SessionConfig c;
  c.role = Role::server;
  c.server_lookup = std::move(lookup);
  c.server_suites = std::move(suites);
  return c;
}

Result<std::unique_ptr<Session>> Session::create(SessionConfig cfg) {
  if (cfg.role == Role::client && (cfg.client_psk.identity.empty() || cfg.client_psk.key.empty())) {
    return make_error_code(Errc::invalid_argument);
  }
  if (cfg.role == Role::server && !cfg.server_lookup) return make_error_code(Errc::invalid_argument);
  std::vector<CipherSuite> suites;
  if (cfg.role == Role::client) {
    suites = {cfg.client_psk.suite};
  } else {
    suites = cfg.server_suites.empty()
                 ? std::vector<CipherSuite>{CipherSuite::aes_128_gcm_sha256, CipherSuite::aes_256_gcm_sha384}
                 : cfg.server_suites;
  }
  std::string list;
  for (CipherSuite s : suites) {
    if (!list.empty()) list += ':';
    list += cipher_suite_name(s);
  }

  std::unique_ptr<Session> s(new Session());
  s->cfg_ = std::move(cfg);
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) return make_error_code(TlsErrc::crypto_failure);
  const bool ok = SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) == 1 &&
                  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) == 1 &&
                  SSL_CTX_set_ciphersuites(ctx, list.c_str()) == 1 &&
                  SSL_CTX_set_num_tickets(ctx, 0) == 1;
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (s->cfg_.keep_traffic_secrets) SSL_CTX_set_keylog_callback(ctx, &Impl::keylog);
  if (ok) s->ssl_ = SSL_new(ctx);
  SSL_CTX_free(ctx);  // the SSL keeps its own reference
  if (s->ssl_ == nullptr) {
    ERR_clear_error();
    return make_error_code(TlsErrc::crypto_failure);
  }
  s->rbio_ = BIO_new(BIO_s_mem());
  s->wbio_ = BIO_new(BIO_s_mem());
  if (s->rbio_ == nullptr || s->wbio_ == nullptr) {
    BIO_free(s->rbio_);
    BIO_free(s->wbio_);
    s->rbio_ = s->wbio_ = nullptr;
    return make_error_code(TlsErrc::crypto_failure);
  }
  // An empty input BIO means "retry later", never end of file: EOF comes from peer_closed().
  BIO_set_mem_eof_return(s->rbio_, -1);
  SSL_set_bio(s->ssl_, s->rbio_, s->wbio_);
  SSL_set_app_data(s->ssl_, s.get());
  if (s->cfg_.role == Role::client) {
    SSL_set_psk_use_session_callback(s->ssl_, &Impl::use_session);
    SSL_set_connect_state(s->ssl_);
  } else {
    SSL_set_psk_find_session_callback(s->ssl_, &Impl::find_session);
    SSL_set_accept_state(s->ssl_);
  }
  s->deadline_ = std::chrono::steady_clock::now() + s->cfg_.handshake_timeout;
  return s;
}

Session::~Session() {
  if (ssl_ != nullptr) SSL_free(ssl_);
}

void Session::feed(std::span<const uint8_t> ciphertext) {
  size_t off = 0;
  while (off < ciphertext.size()) {
    const int n = BIO_write(rbio_, ciphertext.data() + off,
                            static_cast<int>(std::min<size_t>(ciphertext.size() - off, INT_MAX)));
    if (n <= 0) break;  // a memory BIO fails only when out of memory; read() then reports it
    off += static_cast<size_t>(n);
  }
}

std::error_code Session::fail(std::error_code ec) {
  if (!failed_) failed_ = ec;
  return failed_;
}

std::error_code Session::classify_handshake_error(int ssl_error) {
  const unsigned long e = ERR_peek_error();
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    detail_ = buf;
  } else {
    detail_ = "SSL_get_error " + std::to_string(ssl_error);
  }
  const int reason = ERR_GET_REASON(e);
  ERR_clear_error();
  if (unknown_identity_) return TlsErrc::unknown_identity;
  if (ssl_error == SSL_ERROR_ZERO_RETURN) return TlsErrc::peer_closed;
  switch (reason) {
    case SSL_R_BINDER_DOES_NOT_VERIFY:
      return TlsErrc::psk_mismatch;
    // The client learns of a binder failure only through the server's alert: decrypt_error in
    // RFC 8446, illegal_parameter from OpenSSL 3.0. In a PSK-only handshake the binder is the
    // one client field a well-formed ClientHello can get wrong, so both read as a PSK mismatch.
    case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
    case SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER:
      if (cfg_.role == Role::client) return TlsErrc::psk_mismatch;
      break;
    case SSL_R_NO_SHARED_CIPHER:
      return TlsErrc::no_shared_cipher;
    case SSL_R_UNEXPECTED_EOF_WHILE_READING:
      return TlsErrc::peer_closed;
    default:
      break;
  }
  // Received alerts are reported as SSL_AD_REASON_OFFSET + alert number.
  if (reason > SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256) {
    return TlsErrc::handshake_rejected;
  }
  return TlsErrc::handshake_failed;
}

Result<HandshakeState> Session::handshake(std::chrono::steady_clock::time_point now) {
  if (failed_) return failed_;
  if (established_) return HandshakeState::done;
  if (now >= deadline_) {
    detail_ = "no handshake within " + std::to_string(cfg_.handshake_timeout.count()) + " ms";
    return fail(TlsErrc::handshake_timeout);
  }
  ERR_clear_error();
  const int rc = SSL_do_handshake(ssl_);
  if (rc == 1) {
    established_ = true;
    const SSL_CIPHER* c = SSL_get_current_cipher(ssl_);
    suite_ = (c != nullptr && (SSL_CIPHER_get_id(c) & 0xffff) == 0x1302)
                 ? CipherSuite::aes_256_gcm_sha384
                 : CipherSuite::aes_128_gcm_sha256;
    if (cfg_.role == Role::client) identity_ = cfg_.client_psk.identity;
    // Without the PSK extension accepted the handshake could only have used a certificate,
    // which neither side has; check anyway that the session is PSK-authenticated.
    if (cfg_.role == Role::server && identity_.empty()) {
      detail_ = "handshake finished without a PSK";
      return fail(TlsErrc::handshake_failed);
    }
    return HandshakeState::done;
  }
  const int err = SSL_get_error(ssl_, rc);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    if (peer_eof_ && BIO_ctrl_pending(rbio_) == 0) {
      detail_ = "peer closed the connection during the handshake";
      return fail(TlsErrc::peer_closed);
    }
    return HandshakeState::want_input;
  }
  return fail(classify_handshake_error(err));
}

Result<void> Session::write(std::span<const uint8_t> plaintext) {
  if (failed_) return failed_;
  if (!established_) return make_error_code(TlsErrc::not_established);
  size_t off = 0;
  ERR_clear_error();
  while (off < plaintext.size()) {
    size_t done = 0;
    if (SSL_write_ex(ssl_, plaintext.data() + off, plaintext.size() - off, &done) != 1) {
      const unsigned long e = ERR_peek_error();
      char buf[256];
      ERR_error_string_n(e, buf, sizeof buf);
      detail_ = buf;
      ERR_clear_error();
      return fail(TlsErrc::record_error);
    }
    off += done;
  }
  return {};
}

Result<size_t> Session::read(std::span<uint8_t> out) {
  if (failed_) return failed_;
  if (!established_) return make_error_code(TlsErrc::not_established);
  if (out.empty()) return size_t{0};
  ERR_clear_error();
  size_t got = 0;
  if (SSL_read_ex(ssl_, out.data(), out.size(), &got) == 1) return got;
  const int err = SSL_get_error(ssl_, 0);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
    if (peer_eof_ && BIO_ctrl_pending(rbio_) == 0) {
      detail_ = "peer closed the connection";
      return fail(TlsErrc::peer_closed);
    }
    return size_t{0};
  }
  if (err == SSL_ERROR_ZERO_RETURN) {
    detail_ = "close_notify received";
    return fail(TlsErrc::peer_closed);
  }
  const unsigned long e = ERR_peek_error();
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  detail_ = buf;
  ERR_clear_error();
  return fail(TlsErrc::record_error);
}

size_t Session::input_buffered() const noexcept {
  return BIO_ctrl_pending(rbio_) + static_cast<size_t>(std::max(0, SSL_pending(ssl_)));
}

size_t Session::output_pending() const noexcept { return BIO_ctrl_pending(wbio_); }

size_t Session::take_output(std::span<uint8_t> out) noexcept {
  size_t moved = 0;
  while (moved < out.size() && BIO_ctrl_pending(wbio_) > 0) {
    const int n = BIO_read(wbio_, out.data() + moved,
                           static_cast<int>(std::min<size_t>(out.size() - moved, INT_MAX)));
    if (n <= 0) break;
    moved += static_cast<size_t>(n);
  }
  return moved;
}

void Session::close() noexcept {
  if (established_ && !failed_) {
    ERR_clear_error();
    SSL_shutdown(ssl_);
    ERR_clear_error();
  }
}

}  // namespace nvmeof::tls
