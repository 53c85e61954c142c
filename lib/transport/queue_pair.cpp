#include "transport/queue_pair.hpp"

namespace nvmeof {

const char* to_string(QpState s) noexcept {
  switch (s) {
    case QpState::connecting: return "connecting";
    case QpState::live: return "live";
    case QpState::failed: return "failed";
    case QpState::closed: return "closed";
  }
  return "unknown";
}

}  // namespace nvmeof
