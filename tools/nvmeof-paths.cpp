// nvmeof-paths: what this host reaches through the kernel's NVMe host, path by path.
// Text in the shape of `nvme list-subsys` plus, per path, the ANA state, NUMA node and queue
// count; --json gives the same tree with snake_case keys and arrays that are always arrays.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#include "control/kernel_paths.hpp"

namespace {

using nvmeof::KernelTopology;
using Json = nlohmann::ordered_json;

std::string ana_name(const nvmeof::KernelPath& p) {
  return p.ana_state ? nvmeof::to_string(*p.ana_state) : "unknown";
}

Json to_json(const KernelTopology& topo) {
  Json subsystems = Json::array();
  for (const auto& s : topo.subsystems) {
    Json ctrls = Json::array();
    for (const auto& c : s.controllers) {
      ctrls.push_back(Json{{"name", c.name},
                           {"transport", c.transport},
                           {"address", c.address},
                           {"traddr", c.traddr},
                           {"trsvcid", c.trsvcid},
                           {"state", c.state},
                           {"admin_device", c.admin_device},
                           {"numa_node", c.numa_node},
                           {"queue_count", c.queue_count}});
    }
    Json namespaces = Json::array();
    for (const auto& ns : s.namespaces) {
      Json paths = Json::array();
      for (const auto& p : ns.paths) {
        paths.push_back(Json{{"controller", p.controller},
                             {"block_device", p.block_device},
                             {"generic_device", p.generic_device},
                             {"ana_group", p.ana_group},
                             {"ana_state", ana_name(p)},
                             {"ana_source", nvmeof::to_string(p.ana_source)},
                             {"numa_node", p.numa_node},
                             {"queue_count", p.queue_count}});
      }
      namespaces.push_back(Json{{"nsid", ns.nsid},
                                {"lba_size", ns.lba_size},
                                {"lba_count", ns.lba_count},
                                {"head_device", ns.head_device},
                                {"head_generic_device", ns.head_generic_device},
                                {"paths", std::move(paths)}});
    }
    subsystems.push_back(Json{{"name", s.name},
                              {"nqn", s.nqn},
                              {"controllers", std::move(ctrls)},
                              {"namespaces", std::move(namespaces)}});
  }
  return Json{{"subsystems", std::move(subsystems)}};
}

void print_text(const KernelTopology& topo) {
  for (const auto& s : topo.subsystems) {
    std::printf("%s - NQN=%s\n\\\n", s.name.c_str(), s.nqn.c_str());
    for (const auto& c : s.controllers) {
      std::printf(" +- %s %s %s %s numa %d queues %u\n", c.name.c_str(), c.transport.c_str(),
                  c.address.c_str(), c.state.c_str(), c.numa_node, c.queue_count);
    }
    for (const auto& ns : s.namespaces) {
      std::printf("    nsid %u: %llu blocks of %u bytes%s%s\n", ns.nsid,
                  static_cast<unsigned long long>(ns.lba_count), ns.lba_size,
                  ns.head_device.empty() ? "" : ", head ", ns.head_device.c_str());
      for (const auto& p : ns.paths) {
        std::printf("     +- %s %s via %s ana group %u %s (%s) numa %d queues %u\n",
                    p.block_device.c_str(),
                    p.generic_device.empty() ? "-" : p.generic_device.c_str(),
                    p.controller.c_str(), p.ana_group, ana_name(p).c_str(),
                    nvmeof::to_string(p.ana_source), p.numa_node, p.queue_count);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "nvmeof-paths: the NVMe subsystems this host reaches through the kernel, with every path's "
      "generic char device, ANA state, NUMA node and queue count"};
  bool json = false;
  bool no_admin = false;
  nvmeof::KernelScanOptions opts;
  app.add_flag("--json", json, "print JSON (snake_case keys; arrays are always arrays)");
  app.add_option("--sysfs-root", opts.sysfs_root, "where sysfs is mounted")->capture_default_str();
  app.add_option("--dev-root", opts.dev_root, "where the device nodes are")->capture_default_str();
  app.add_flag("--no-admin", no_admin,
               "read ANA states from sysfs only (no Get Log Page through /dev/nvmeX)");
  CLI11_PARSE(app, argc, argv);
  if (no_admin) opts.ana = nvmeof::AnaLookup::sysfs_only;

  auto topo = nvmeof::scan_kernel_paths(opts);
  if (!topo) {
    std::fprintf(stderr, "nvmeof-paths: scan failed: %s\n", topo.error().message().c_str());
    return 1;
  }
  if (json) std::cout << to_json(*topo).dump(2) << '\n';
  else print_text(*topo);
  return 0;
}
