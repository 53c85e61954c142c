#include "tls/ktls.hpp"

#include <openssl/opensslconf.h>

#include <fstream>
#include <sstream>

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

}  // namespace nvmeof::tls
