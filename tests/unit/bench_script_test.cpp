// nvmeof-bench's pure parts: the --fault-script parser (each rule and its message), the
// per-interval recorder and the SVG writer's structure.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "bench/fault_script.hpp"
#include "bench/intervals.hpp"
#include "bench/plot.hpp"

using namespace nvmeof::bench;
using namespace std::chrono_literals;

namespace {

FaultScriptLimits limits(unsigned paths = 2, std::chrono::nanoseconds runtime = 5s) {
  FaultScriptLimits l;
  l.paths = paths;
  l.runtime = runtime;
  l.slow_latency = 50ms;
  return l;
}

std::string error_of(const std::string& script, const FaultScriptLimits& l = limits()) {
  std::string error;
  const auto steps = parse_fault_script(script, l, error);
  CHECK(!steps);
  return error;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("fault script times", "[bench]") {
  CHECK(parse_script_time("2s") == std::chrono::nanoseconds(2s));
  CHECK(parse_script_time("1.5s") == std::chrono::nanoseconds(1500ms));
  CHECK(parse_script_time("250ms") == std::chrono::nanoseconds(250ms));
  CHECK(parse_script_time("0.25ms") == std::chrono::nanoseconds(250us));
  CHECK(parse_script_time("800us") == std::chrono::nanoseconds(800us));
  CHECK(parse_script_time("0s") == std::chrono::nanoseconds(0));
  for (const char* bad : {"", "2", "s", "-1s", "1.s", ".5s", "2 s", "2m", "1e3ms", "2ss"}) {
    INFO(bad);
    CHECK(!parse_script_time(bad));
  }
}

TEST_CASE("fault script entries parse in order, with comments and files", "[bench]") {
  std::string error;
  auto steps = parse_fault_script("2s:reset:0, 2.5s:restore:0,4s:partition:1,4.2s:slow=20ms:0,4.5s:clear:1", limits(),
                                  error);
  REQUIRE(steps);
  REQUIRE(steps->size() == 5);
  CHECK((*steps)[0].at == 2s);
  CHECK((*steps)[0].action == FaultArg::reset);
  CHECK((*steps)[0].path == 0);
  CHECK((*steps)[1].action == FaultArg::restore);
  CHECK((*steps)[1].text == "2.5s:restore:0");
  CHECK((*steps)[2].action == FaultArg::partition);
  CHECK((*steps)[2].path == 1);
  CHECK((*steps)[3].action == FaultArg::slow);
  CHECK((*steps)[3].latency == 20ms);
  CHECK((*steps)[4].action == FaultArg::restore);

  steps = parse_fault_script("1s:latency:1", limits(), error);
  REQUIRE(steps);
  CHECK((*steps)[0].latency == 50ms);  // --slow-latency

  // Equal times keep the written order.
  steps = parse_fault_script("1s:ana-change:0,1s:fail-status:1,1s:refuse:0,1s:ana-inaccessible:1,1s:blackhole:0",
                             limits(), error);
  REQUIRE(steps);
  CHECK((*steps)[1].action == FaultArg::fail_status);
  CHECK((*steps)[4].action == FaultArg::blackhole);

  const std::string file = "/tmp/nvmeof-bench-script-test." + std::to_string(::getpid());
  {
    std::ofstream f(file);
    f << "# two faults\n500ms:reset:0   # the first\n\n  1s:partition:1\n1.5s:restore:1\n";
  }
  steps = load_fault_script("@" + file, limits(), error);
  INFO(error);
  REQUIRE(steps);
  REQUIRE(steps->size() == 3);
  CHECK((*steps)[1].at == 1s);
  CHECK((*steps)[1].text == "1s:partition:1");
  {
    std::ofstream f(file);
    f << "# line 1\n500ms:reset:0\n\n400ms:reset:1\n";
  }
  CHECK(!load_fault_script("@" + file, limits(), error));
  CHECK(error == "--fault-script " + file + ":4: entry 2 \"400ms:reset:1\": time goes back (400 ms after 500 ms): "
                 "write the entries in the order they happen");
  ::unlink(file.c_str());
  CHECK(!load_fault_script("@" + file, limits(), error));
  CHECK(error == "--fault-script: cannot read " + file);

  // Paths unknown (--discover): any index passes here, main() checks it after discovery.
  steps = parse_fault_script("1s:reset:7", limits(0), error);
  CHECK(steps);
}

TEST_CASE("bad fault scripts are refused with a message naming the entry", "[bench]") {
  CHECK(error_of("") == "--fault-script no fault in it");
  CHECK(error_of(" , ,# only a comment") == "--fault-script no fault in it");
  CHECK(error_of("1s:reset") == "--fault-script entry 1 \"1s:reset\": want TIME:ACTION:PATH (e.g. 2s:reset:0)");
  CHECK(error_of("1s:reset:0:1") == "--fault-script entry 1 \"1s:reset:0:1\": want TIME:ACTION:PATH (e.g. 2s:reset:0)");
  CHECK(error_of("1s:reset:0,2:reset:1") ==
        "--fault-script entry 2 \"2:reset:1\": bad time \"2\" (want a number with s, ms or us: 2s, 1.5s, 250ms)");
  CHECK(error_of("1s:boom:0").starts_with(
      "--fault-script entry 1 \"1s:boom:0\": unknown action \"boom\" (one of add-path, ana-change, ana-inaccessible, "
      "blackhole, clear, fail-status, latency, partition, refuse, remove-path, reset, restore, slow)"));
  CHECK(error_of("1s:reset:2") == "--fault-script entry 1 \"1s:reset:2\": path 2 out of range (2 paths: 0..1)");
  CHECK(error_of("1s:reset:1", limits(1)) == "--fault-script entry 1 \"1s:reset:1\": path 1 out of range (1 path: 0..0)");
  CHECK(error_of("1s:reset:x") == "--fault-script entry 1 \"1s:reset:x\": bad path \"x\" (want a path index: 0, 1, ...)");
  CHECK(error_of("1s:reset:-1") == "--fault-script entry 1 \"1s:reset:-1\": bad path \"-1\" (want a path index: 0, 1, ...)");
  CHECK(error_of("5s:reset:0") == "--fault-script entry 1 \"5s:reset:0\": time 5000 ms is not inside --runtime (5000 ms)");
  CHECK(error_of("2s:reset:0,1s:reset:1") ==
        "--fault-script entry 2 \"1s:reset:1\": time goes back (1000 ms after 2000 ms): write the entries in the order "
        "they happen");
  CHECK(error_of("1s:restore:0") == "--fault-script entry 1 \"1s:restore:0\": restore of path 0 with no fault before it");
  CHECK(error_of("1s:reset:0,2s:restore:0,3s:restore:0") ==
        "--fault-script entry 3 \"3s:restore:0\": restore of path 0 with no fault before it");
  CHECK(error_of("1s:slow=fast:0") == "--fault-script entry 1 \"1s:slow=fast:0\": bad delay \"fast\" for slow (e.g. slow=20ms)");
  CHECK(error_of("1s:slow=0ms:0") == "--fault-script entry 1 \"1s:slow=0ms:0\": bad delay \"0ms\" for slow (e.g. slow=20ms)");
  CHECK(error_of("1s:reset=1:0") == "--fault-script entry 1 \"1s:reset=1:0\": \"reset\" takes no =VALUE (only slow does)");
  std::string many;
  for (size_t i = 0; i <= kMaxFaultSteps; ++i) many += "1s:reset:0,";
  CHECK(error_of(many).ends_with(": more than 256 entries"));
}

TEST_CASE("path changes in a fault script: remove-path of a path in the volume, add-path of one outside it",
          "[bench]") {
  FaultScriptLimits l = limits(3);
  l.standby = 1;  // path 2 starts outside the volume
  std::string error;
  auto steps = parse_fault_script("1s:add-path:2,2s:remove-path:0,3s:add-path:0,3.5s:reset:0", l, error);
  INFO(error);
  REQUIRE(steps);
  REQUIRE(steps->size() == 4);
  CHECK((*steps)[0].action == FaultArg::add_path);
  CHECK((*steps)[1].action == FaultArg::remove_path);
  CHECK((*steps)[1].path == 0);
  // A script of path changes alone is still a schedule.
  CHECK(parse_fault_script("1s:remove-path:1", limits(2), error));
  CHECK(error_of("1s:add-path:1", l) ==
        "--fault-script entry 1 \"1s:add-path:1\": add-path of path 1, which is in the volume");
  CHECK(error_of("1s:remove-path:2", l) ==
        "--fault-script entry 1 \"1s:remove-path:2\": remove-path of path 2, which is not in the volume");
  CHECK(error_of("1s:remove-path:0,2s:remove-path:0", l) ==
        "--fault-script entry 2 \"2s:remove-path:0\": remove-path of path 0, which is not in the volume");
  CHECK(error_of("1s:remove-path=1s:0", l) ==
        "--fault-script entry 1 \"1s:remove-path=1s:0\": \"remove-path\" takes no =VALUE (only slow does)");
}

TEST_CASE("the interval recorder sums each interval and takes its percentiles", "[bench]") {
  IntervalRecorder rec(100'000'000, 350'000'000);  // 100 ms intervals over 350 ms: 4, the last 50 ms
  REQUIRE(rec.intervals() == 4);
  const uint64_t t0 = 1'000'000'000;
  rec.record(t0 + 5, false, 4096, 1000);  // before start(): dropped
  rec.start(t0);
  for (int i = 0; i < 99; ++i) rec.record(t0 + 10'000'000, false, 4096, 100'000);  // 100 us
  rec.record(t0 + 20'000'000, true, 8192, 40'000'000);                              // one 40 ms write
  rec.record(t0 + 999'000'000, false, 4096, 200'000);  // after the end (drain): the last interval
  rec.note_usable(t0 + 1, 2);
  rec.note_usable(t0 + 50'000'000, 1);
  rec.note_usable(t0 + 150'000'000, 2);
  const auto rows = rec.rows();
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].end_s == Approx(0.1));
  CHECK(rows[3].end_s == Approx(0.35));
  CHECK(rows[0].read_ios == 99);
  CHECK(rows[0].write_ios == 1);
  CHECK(rows[0].read_iops == Approx(990));
  CHECK(rows[0].write_mib_s == Approx(8192 / 0.1 / 1048576.0));
  CHECK(rows[0].p50_us == Approx(100).epsilon(1.0 / 16));
  CHECK(rows[0].p99_us == Approx(100).epsilon(1.0 / 16));
  CHECK(rows[0].max_us == Approx(40000));
  CHECK(rows[0].usable_paths == 1);
  CHECK(rows[1].usable_paths == 2);
  CHECK(rows[1].read_ios + rows[1].write_ios == 0);
  CHECK(rows[1].p99_us == 0);
  CHECK(rows[2].usable_paths == -1);
  CHECK(rows[3].read_ios == 1);
  CHECK(rows[3].read_iops == Approx(20));  // one I/O in 50 ms
  for (uint64_t v : {0ull, 7ull, 8ull, 15ull, 16ull, 1000ull, 123456789ull}) {
    const uint64_t mid = IntervalRecorder::bucket_mid(IntervalRecorder::bucket_of(v));
    CHECK(static_cast<double>(mid) == Approx(static_cast<double>(v)).epsilon(1.0 / 16).margin(1));
  }
}

TEST_CASE("the SVG has one point per interval, one marker per event, axes and a legend", "[bench]") {
  PlotData d;
  d.title = "test <run> & \"quotes\"";
  d.duration_s = 3;
  for (int i = 1; i <= 12; ++i)
    d.points.push_back({0.25 * i, 1000.0 * i, i % 2 ? 500.0 : 0.0, i == 5 ? 0.0 : 100.0 * i});
  d.markers = {{1.0, PlotMarker::Kind::fault, "reset path 0"},
               {1.02, PlotMarker::Kind::failover, "path 0 failed: connection reset"},
               {2.0, PlotMarker::Kind::fault, "partition path 1"},
               {2.5, PlotMarker::Kind::restore, "restore path 1"}};
  const std::string svg = render_svg(d);
  CHECK(svg.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(svg.ends_with("</svg>\n"));
  CHECK(svg.find("test &lt;run&gt; &amp; &quot;quotes&quot;") != std::string::npos);
  const std::regex series("<polyline id=\"([a-z0-9-]+)\"[^>]* points=\"([^\"]*)\"");
  std::map<std::string, size_t> points;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), series); it != std::sregex_iterator(); ++it) {
    const std::string p = (*it)[2];
    points[(*it)[1]] = p.empty() ? 0 : count(p, " ") + 1;
  }
  CHECK(points["iops"] == 12);
  CHECK(points["p99"] == 11);  // the interval without I/O is left out
  CHECK(points["iops-read"] == 12);  // mixed: read and write drawn too
  CHECK(points["iops-write"] == 12);
  CHECK(count(svg, "<g class=\"marker fault\">") == 2);
  CHECK(count(svg, "<g class=\"marker failover\">") == 1);
  CHECK(count(svg, "<g class=\"marker restore\">") == 1);
  CHECK(svg.find("reset path 0</text>") != std::string::npos);
  CHECK(count(svg, "<g class=\"axis") == 4);
  CHECK(svg.find(">IOPS</text>") != std::string::npos);
  CHECK(svg.find(">p99 latency</text>") != std::string::npos);
  CHECK(svg.find(">100us</text>") != std::string::npos);  // a decade tick
  CHECK(svg.find(">1ms</text>") != std::string::npos);
  CHECK(svg.find("<g class=\"legend\">") != std::string::npos);
  // Opening and closing tags balance (a cheap well-formedness check; the integration test parses).
  CHECK(count(svg, "<g ") == count(svg, "</g>"));
  CHECK(count(svg, "<text") == count(svg, "</text>"));

  // An empty run still draws its axes.
  const std::string empty = render_svg(PlotData{});
  CHECK(empty.find("<polyline id=\"iops\" class=\"series\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"\"/>") !=
        std::string::npos);
  CHECK(count(empty, "<g class=\"marker") == 0);
}
