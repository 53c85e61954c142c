#include "tls/ktls.hpp"

#include <linux/tls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/opensslconf.h>
#include <openssl/params.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

namespace nvmeof::tls {

KtlsSupport probe_ktls(const char* ulp_path) {
  KtlsSupport s;
#ifndef OPENSSL_NO_KTLS
  s.openssl_ktls = true;
#endif
  std::ifstream f(ulp_path);
  std::getline(f, s.available_ulps);
  std::istringstream words(s.available_ulps);
  for (std::string w; words >> w;) {
    if (w == "tls") s.kernel_ulp = true;
  }
  return s;
}

namespace {

// HKDF-Expand-Label(secret, label, "", length) of RFC 8446 7.1, by OpenSSL's TLS13-KDF.
Result<SecretBytes> expand_label(const SecretBytes& secret, CipherSuite suite,
                                 std::string_view label, size_t length) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "TLS13-KDF", nullptr);
  if (kdf == nullptr) return make_error_code(TlsErrc::crypto_failure);
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return make_error_code(TlsErrc::crypto_failure);
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  char digest[8];
  std::strcpy(digest, suite == CipherSuite::aes_256_gcm_sha384 ? "SHA384" : "SHA256");
  static constexpr char kPrefix[] = "tls13 ";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PREFIX, const_cast<char*>(kPrefix),
                                        sizeof kPrefix - 1),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_LABEL, const_cast<char*>(label.data()),
                                        label.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_DATA, const_cast<char*>(""), 0),
      OSSL_PARAM_construct_end(),
  };
  SecretBytes out(length);
  const int rc = EVP_KDF_derive(ctx, out.data(), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (rc != 1) return make_error_code(TlsErrc::crypto_failure);
  return out;
}

Result<DirectionKeys> direction(const SecretBytes& secret, CipherSuite suite) {
  const size_t key_len = suite == CipherSuite::aes_256_gcm_sha384 ? 32 : 16;
  auto key = expand_label(secret, suite, "key", key_len);
  if (!key) return key.error();
  auto iv = expand_label(secret, suite, "iv", 12);
  if (!iv) return iv.error();
  DirectionKeys d;
  d.key = std::move(*key);
  d.iv = std::move(*iv);
  return d;
}

template <typename Info>
void fill(Info& ci, uint16_t cipher, const DirectionKeys& d) {
  std::memset(&ci, 0, sizeof ci);
  ci.info.version = TLS_1_3_VERSION;
  ci.info.cipher_type = cipher;
  // The kernel's TLS 1.3 nonce is salt || iv (12 bytes), XORed with the record sequence.
  std::memcpy(ci.salt, d.iv.data(), sizeof ci.salt);
  std::memcpy(ci.iv, d.iv.data() + sizeof ci.salt, sizeof ci.iv);
  std::memcpy(ci.key, d.key.data(), sizeof ci.key);
  for (size_t i = 0; i < sizeof ci.rec_seq; ++i) {
    ci.rec_seq[i] = static_cast<unsigned char>(d.seq >> (8 * (sizeof ci.rec_seq - 1 - i)));
  }
}

template <typename Info>
int set_direction(int fd, int optname, uint16_t cipher, const DirectionKeys& d) {
  Info ci;
  fill(ci, cipher, d);
  const int rc = ::setsockopt(fd, SOL_TLS, optname, &ci, sizeof ci);
  const int err = errno;
  OPENSSL_cleanse(&ci, sizeof ci);
  errno = err;
  return rc;
}

}  // namespace

Result<TrafficKeys> traffic_keys(const Session& s) {
  if (!s.is_established()) return make_error_code(TlsErrc::not_established);
  const SecretBytes& client = s.client_traffic_secret();
  const SecretBytes& server = s.server_traffic_secret();
  if (client.empty() || server.empty()) return make_error_code(TlsErrc::ktls_unavailable);
  const bool is_client = s.role() == Role::client;
  TrafficKeys k;
  k.suite = s.suite();
  auto tx = direction(is_client ? client : server, k.suite);
  if (!tx) return tx.error();
  auto rx = direction(is_client ? server : client, k.suite);
  if (!rx) return rx.error();
  k.tx = std::move(*tx);
  k.rx = std::move(*rx);
  return k;
}

Result<void> install_ktls(int fd, const TrafficKeys& keys, bool* socket_changed) {
  if (socket_changed != nullptr) *socket_changed = false;
  auto fail = [&](const char* what) -> Result<void> {
    return {make_error_code(TlsErrc::ktls_unavailable), std::string(what) + ": " + std::strerror(errno)};
  };
  if (keys.tx.key.size() != (keys.suite == CipherSuite::aes_256_gcm_sha384 ? 32u : 16u) ||
      keys.rx.key.size() != keys.tx.key.size() || keys.tx.iv.size() != 12 || keys.rx.iv.size() != 12) {
    errno = EINVAL;
    return fail("traffic keys of the wrong length");
  }
  static constexpr char kUlp[] = "tls";
  if (::setsockopt(fd, IPPROTO_TCP, TCP_ULP, kUlp, sizeof kUlp) != 0) {
    return fail("TCP_ULP tls");
  }
  if (socket_changed != nullptr) *socket_changed = true;
  const bool aes256 = keys.suite == CipherSuite::aes_256_gcm_sha384;
  for (const auto& [opt, d] : {std::pair<int, const DirectionKeys*>{TLS_TX, &keys.tx},
                               std::pair<int, const DirectionKeys*>{TLS_RX, &keys.rx}}) {
    const int rc = aes256 ? set_direction<tls12_crypto_info_aes_gcm_256>(fd, opt, TLS_CIPHER_AES_GCM_256, *d)
                          : set_direction<tls12_crypto_info_aes_gcm_128>(fd, opt, TLS_CIPHER_AES_GCM_128, *d);
    if (rc != 0) return fail(opt == TLS_TX ? "SOL_TLS TLS_TX" : "SOL_TLS TLS_RX");
  }
  return {};
}

Result<void> enable_ktls(int fd, const Session& s, bool* socket_changed) {
  if (socket_changed != nullptr) *socket_changed = false;
  if (s.input_buffered() != 0 || s.output_pending() != 0)
    return {make_error_code(TlsErrc::ktls_unavailable), "records buffered in the user-space session"};
  auto keys = traffic_keys(s);
  if (!keys) return keys.failure();
  return install_ktls(fd, *keys, socket_changed);
}

}  // namespace nvmeof::tls
