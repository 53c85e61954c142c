// nvmeof-target's --subsystems and --namespaces: the real binary serves M subsystems of N
// namespaces each, every one a volume of its own over two ports (a write to one namespace is not
// seen in another), the JSON and the start-up lines list them, and bad counts are refused.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../common/tool_process.hpp"
#include "../common/tracked_io.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

const std::string kNqn = "nqn.2024-01.io.nvmeof:ns-test";

VolumeOptions volume_options(const nlohmann::json& j, const std::string& nqn, uint32_t nsid) {
  VolumeOptions vo;
  for (const auto& p : j["ports"]) {
    TransportAddress a;
    a.traddr = "127.0.0.1";
    a.trsvcid = p["trsvcid"].get<std::string>();
    vo.paths.push_back(a);
  }
  vo.connect.subnqn = nqn;
  vo.nsid = nsid;
  vo.no_path_timeout = 10s;
  return vo;
}

}  // namespace

TEST_CASE("nvmeof-target --subsystems 2 --namespaces 3: six volumes, each its own data",
          "[target][cli]") {
  test::ToolProcess proc({test::tool_path("NVMEOF_TARGET"), "--listen", "127.0.0.1:0", "--listen",
                          "127.0.0.1:0", "--nqn", kNqn, "--subsystems", "2", "--namespaces", "3",
                          "--size", "1M", "--json"});
  const auto j = nlohmann::json::parse(proc.read_line());
  REQUIRE(j["subsystems"].size() == 2);
  CHECK(j["subsystems"][0]["nqn"] == kNqn + "-1");
  CHECK(j["subsystems"][1]["nqn"] == kNqn + "-2");
  for (const auto& s : j["subsystems"]) {
    REQUIRE(s["namespaces"].size() == 3);
    CHECK(s["namespaces"][2]["nsid"] == 3);
    CHECK(s["namespaces"][2]["size_bytes"] == 1u << 20);
  }

  std::vector<std::unique_ptr<Volume>> vols;
  for (int s = 1; s <= 2; ++s)
    for (uint32_t n = 1; n <= 3; ++n) {
      auto v = Volume::open(volume_options(j, kNqn + "-" + std::to_string(s), n));
      REQUIRE(v);
      CHECK((*v)->ns().nsid == n);
      CHECK((*v)->usable_paths() == 2);
      vols.push_back(std::move(*v));
    }
  // Each volume writes its own pattern to block 0, then every one reads back its own.
  alignas(4096) static unsigned char buf[4096];
  for (size_t i = 0; i < vols.size(); ++i) {
    std::memset(buf, static_cast<int>(0x10 + i), sizeof buf);
    test::TrackedIo w(IoOp::write, buf, 0);
    REQUIRE(vols[i]->submit(w.io) == 0);
    REQUIRE(w.wait());
    REQUIRE(w.status().is_success());
  }
  for (size_t i = 0; i < vols.size(); ++i) {
    INFO("volume " << i);
    std::memset(buf, 0, sizeof buf);
    test::TrackedIo r(IoOp::read, buf, 0);
    REQUIRE(vols[i]->submit(r.io) == 0);
    REQUIRE(r.wait());
    REQUIRE(r.status().is_success());
    CHECK(buf[0] == 0x10 + i);
    CHECK(buf[4095] == 0x10 + i);
  }
}

TEST_CASE("nvmeof-target: the start-up lines name every subsystem; bad counts are refused",
          "[target][cli]") {
  test::ToolProcess proc({test::tool_path("NVMEOF_TARGET"), "--listen", "127.0.0.1:0", "--nqn", kNqn,
                          "--subsystems", "2", "--namespaces", "4", "--size", "1M"});
  std::string out;
  for (int i = 0; i < 5; ++i) out += proc.read_line() + "\n";
  CHECK_THAT(out, Catch::Contains(kNqn + "-1 nsid 1-4: 1048576 bytes each"));
  CHECK_THAT(out, Catch::Contains(kNqn + "-2 nsid 1-4: 1048576 bytes each"));
  CHECK_THAT(out, Catch::Contains(kNqn + "-2: any host may connect"));

  const std::string base = test::tool_path("NVMEOF_TARGET") + " --listen 127.0.0.1:0 --size 1M ";
  for (const std::string args : {"--namespaces 0", "--namespaces 1025", "--subsystems 0", "--subsystems 257"}) {
    INFO(args);
    CHECK(test::run_command(base + args, 10).exit_code != 0);
  }
  const auto r = test::run_command(base + "--namespaces 2 --file /tmp/nvmeof-ns-test-never", 10);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--file backs one namespace"));
}
