// What a volume and an engine show outside the process: the control socket and the metrics
// endpoints. They belong to the observe layer, above multipath (ARCHITECTURE.md, "Layers"): they
// read volumes and engines, so multipath holds them only through this interface and never
// includes observe/. The start functions are declared here and defined in observe/.
//
// Threading: the start functions run on the thread opening the volume or making the engine;
// destroying what they return stops serving, and no request or scrape reads the volume or the
// engine after the destructor returned.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nvmeof/host.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof {
struct Engine;
}

namespace nvmeof::detail {

class VolumeImpl;

class Observers {
 public:
  virtual ~Observers() = default;
  /// The metrics endpoint's bound TCP port, 0 when none.
  virtual uint16_t metrics_port() const noexcept = 0;
  /// The control socket's path, empty when none.
  virtual std::string control_socket_path() const = 0;
};

/// Opens the volume's control socket (VolumeOptions::control_socket / NVMEOF_CONTROL_DIR) and
/// its metrics endpoint (VolumeOptions::metrics_listen) when asked for; numbers the volume
/// (`serial_`). Errors as ControlSocket::open, invalid_argument for a bad metrics_listen,
/// Errc::unsupported for a metrics endpoint in a build without metrics support.
Result<std::unique_ptr<Observers>> start_volume_observers(VolumeImpl& volume);

/// The engine's metrics endpoint (HostOptions::metrics_listen), or nullptr when none is asked
/// for. `engine` must outlive what this returns. Errors as start_volume_observers.
Result<std::unique_ptr<Observers>> start_host_observers(const Engine& engine);

}  // namespace nvmeof::detail
