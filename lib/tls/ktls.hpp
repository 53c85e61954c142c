// Kernel TLS offload: what this machine offers, probed at run time.
//
// Findings (Debian 12, OpenSSL 3.0.x):
//  * Debian builds libssl with KTLS (OPENSSL_NO_KTLS is not defined), but OpenSSL 3.0 offloads
//    only the TLS 1.3 *transmit* direction (tls13_enc.c installs kernel keys for application
//    write keys only; TLS 1.3 receive offload came with the record-layer rewrite of 3.2), and
//    only when its write BIO is a socket BIO: with the memory BIOs of Session it never engages.
//  * Full offload for a memory-BIO session therefore means installing both directions' keys
//    ourselves (TCP_ULP "tls", then SOL_TLS TLS_TX/TLS_RX with tls12_crypto_info_aes_gcm_{128,256}
//    from the traffic secrets OpenSSL reports through its keylog callback, HKDF-Expand-Label
//    "key"/"iv", record sequence 0 since no post-handshake message is sent), after draining any
//    application data already fed to the session.
//  * Whether the kernel offers it: the "tls" ULP must be listed in
//    /proc/sys/net/ipv4/tcp_available_ulp (or be loadable). When it is absent, the reactor
//    encrypts in user space through Session (one AES-GCM pass per direction, no thread hop).
//
// Only the probe is implemented; the key hand-off is not (no kernel here to test it against).
#pragma once

#include <string>

namespace nvmeof::tls {

struct KtlsSupport {
  bool kernel_ulp = false;       ///< "tls" listed in tcp_available_ulp
  bool openssl_ktls = false;     ///< libssl built with KTLS (compile-time OPENSSL_NO_KTLS unset)
  std::string available_ulps;    ///< the kernel's list as read, for logs
};

/// Reads /proc/sys/net/ipv4/tcp_available_ulp (ulp_path for tests). Thread-safe, no side effects.
KtlsSupport probe_ktls(const char* ulp_path = "/proc/sys/net/ipv4/tcp_available_ulp");

}  // namespace nvmeof::tls
