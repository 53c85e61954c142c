// Our own fabric controllers (NVMe/TCP, NVMe/RDMA) as volume paths.
#include "control/endpoint.hpp"

#include "control/controller_access.hpp"

namespace nvmeof::detail {
namespace {

class FabricEndpoint final : public PathEndpoint {
 public:
  explicit FabricEndpoint(std::shared_ptr<Controller> c) : ctrl_(std::move(c)) {}
  const ControllerInfo& info() const noexcept override { return ctrl_->info(); }
  Result<NamespaceInfo> identify_namespace(uint32_t nsid) override { return ctrl_->identify_namespace(nsid); }
  Result<std::vector<uint32_t>> active_namespaces() override { return ctrl_->active_namespaces(); }
  Result<AnaLog> ana_log() override { return ctrl_->ana_log(); }
  Result<std::vector<uint32_t>> changed_namespaces() override { return nvmeof::changed_namespaces(*ctrl_); }
  Result<PreparedQueue> prepare_io_queue(Reactor& r, uint32_t depth, int memory_node) override {
    return nvmeof::prepare_io_queue(*ctrl_, r, depth, memory_node);
  }
  uint32_t kato_ms() const noexcept override { return ctrl_->kato_ms(); }
  uint64_t keep_alives_sent() const noexcept override { return ctrl_->keep_alives_sent(); }
  bool can_reset_others() const noexcept override { return ctrl_->info().ccrl > 0 && ctrl_->is_live(); }
  Result<void> cross_controller_reset(const ControllerInfo& impacted, std::chrono::milliseconds t) override {
    return ctrl_->cross_controller_reset(impacted, t);
  }
  void on_async_event(std::function<void(uint32_t)> fn) override { ctrl_->on_async_event(std::move(fn)); }
  void on_failure(std::function<void(std::error_code)> fn) override { ctrl_->on_failure(std::move(fn)); }
  bool is_live() const noexcept override { return ctrl_->is_live(); }
  void fence() override { ctrl_->disconnect(); }
  void close() override { ctrl_->disconnect(); }

 private:
  std::shared_ptr<Controller> ctrl_;
};

}  // namespace

Result<std::shared_ptr<PathEndpoint>> open_endpoint(ControlPlane& cp, const TransportAddress& addr,
                                                    const ConnectOptions& opts) {
  if (addr.transport == Transport::passthrough) return open_kernel_endpoint(addr);
  auto c = Controller::connect(cp, addr, opts);
  if (!c) return c.error();
  return std::shared_ptr<PathEndpoint>(std::make_shared<FabricEndpoint>(std::move(*c)));
}

}  // namespace nvmeof::detail
