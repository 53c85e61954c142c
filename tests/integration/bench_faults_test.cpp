// nvmeof-bench (the real binary) against its embedded target with a two-fault --fault-script:
// the JSON report has each fault and the failover it caused, the data verified clean, the
// --latency-log CSV has one row per interval in time order plus the events, and the --plot SVG
// parses as XML (python3's xml.etree) with one IOPS point per CSV interval row and one marker per
// fault and per failover. Bad scripts and conflicting flags are refused before anything runs.
//
// Deterministic: a reset fails its path at once; a partition stalls the I/O in flight on its path,
// and the bench waits for every I/O before it reports, so the partition's failover is always in the
// timeline, however loaded the machine.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../common/tool_process.hpp"

using namespace nvmeof;

namespace {

std::string bench_bin() { return test::tool_path("NVMEOF_BENCH"); }

nlohmann::json report_of(const std::string& out) {
  const size_t at = out.rfind('{', 0) == 0 ? 0 : out.find("\n{") + 1;
  return nlohmann::json::parse(out.substr(at));
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> f;
  std::string cur;
  bool quoted = false;
  for (const char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == sep && !quoted) {
      f.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  f.push_back(cur);
  return f;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the bench (a verified run) and returns its JSON report, checked clean: exit 0, ok, no
// error, no mismatch.
nlohmann::json clean_run(const std::string& args) {
  const auto r = test::run_command(bench_bin() + " " + args + " --json", 120);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto j = report_of(r.output);
  CHECK(j["ok"] == true);
  CHECK(j["errors"] == 0);
  CHECK(j["mismatches"] == 0);
  return j;
}

}  // namespace

TEST_CASE("a two-fault script: each fault, its failover, the CSV and the SVG", "[bench]") {
  const std::string base = "/tmp/nvmeof-bench-faults-test." + std::to_string(::getpid());
  const std::string csv = base + ".csv", svg = base + ".svg";
  const auto j = clean_run("--embedded --paths 2 --rw randrw --size 16m --runtime 3s "
                           "--fault-script 800ms:reset:0,1.8s:partition:1 --latency-log " + csv +
                           " --log-interval 250ms --plot " + svg);
  CHECK(j["verify"]["blocks_checked_final"].get<uint64_t>() ==
        16u * 1024 * 1024 / j["namespace"]["block_size"].get<uint64_t>());
  // The first fault keeps the single-fault report's shape.
  CHECK(j["fault"]["injected"] == true);
  CHECK(j["fault"]["kind"] == "reset");

  const auto& faults = j["faults"];
  REQUIRE(faults.size() == 2);
  const char* actions[] = {"reset", "partition"};
  for (size_t i = 0; i < 2; ++i) {
    const auto& f = faults[i];
    INFO("fault " << i);
    CHECK(f["index"] == i);
    CHECK(f["action"] == actions[i]);
    CHECK(f["path"] == i);
    CHECK(f["applied"] == true);
    CHECK(f["delivered"] == true);
    CHECK(f["at_ms"].get<double>() >= f["scheduled_ms"].get<double>());
    // On a loaded machine a deadline may fail the path on its own just before its fault: then
    // the fault finds it failed and says so.
    if (f["outcome"] != "failover") {
      CHECK(f["outcome"] == "no failover");
      CHECK(f["reason"].get<std::string>().starts_with("the path was already failed"));
      continue;
    }
    const auto& fo = f["failover"];
    CHECK(fo["path"] == i);
    CHECK(fo["failed_at_ms"].get<double>() >= f["at_ms"].get<double>());
    // A reset may find the path with nothing in flight (every answer sent before the close):
    // then nothing moved, and the report says so with no move time.
    if (fo["reads_moved"].get<uint64_t>() + fo["writes_moved"].get<uint64_t>() == 0) {
      CHECK(fo["io_moved_at_ms"].is_null());
    } else {
      CHECK(!fo["io_moved_at_ms"].is_null());
      CHECK(fo["io_moved_at_ms"].get<double>() >= fo["failed_at_ms"].get<double>());
    }
    CHECK(f["errors"] == 0);
    CHECK(f["longest_io_ms"].get<double>() > 0);
  }
  CHECK(faults[0]["window_end_ms"] == faults[1]["at_ms"]);
  CHECK(faults[1]["at_ms"].get<double>() > faults[0]["at_ms"].get<double>());
  // The partition stalled I/O until it was detected.
  if (faults[1]["outcome"] == "failover")
    CHECK(faults[1]["longest_io_ms"].get<double>() >= faults[1]["failover"]["detected_after_ms"].get<double>() * 0.5);

  // The CSV: a header, interval rows in time order (3 s / 250 ms = 12), the events.
  std::istringstream lines(slurp(csv));
  std::string line;
  REQUIRE(std::getline(lines, line));
  CHECK(line == "row,time_s,read_iops,write_iops,read_mib_s,write_mib_s,lat_p50_us,lat_p99_us,lat_max_us,"
                "usable_paths,event,path,detail");
  size_t intervals = 0, fault_rows = 0, failed_rows = 0;
  double last_t = -1, last_interval_t = 0;
  uint64_t csv_ios = 0;
  while (std::getline(lines, line)) {
    const auto f = split(line, ',');
    REQUIRE(f.size() == 13);
    const double t = std::stod(f[1]);
    CHECK(t >= last_t);
    last_t = t;
    if (f[0] == "interval") {
      ++intervals;
      CHECK(t > last_interval_t);
      csv_ios += static_cast<uint64_t>((std::stod(f[2]) + std::stod(f[3])) * (t - last_interval_t) + 0.5);
      last_interval_t = t;
      CHECK(std::stod(f[7]) >= std::stod(f[6]));  // p99 >= p50
      CHECK(std::stoi(f[9]) <= 2);
    } else {
      REQUIRE(f[0] == "event");
      CHECK(f[2].empty());
      fault_rows += f[10] == "fault";
      failed_rows += f[10] == "path_failed";
    }
  }
  CHECK(intervals >= 11);
  CHECK(intervals <= 13);
  CHECK(last_interval_t == Approx(3.0));
  CHECK(fault_rows == 2);
  CHECK(failed_rows == j["fault"]["timeline"].size());
  // Every timed I/O is in some interval (the drain's in the last one).
  CHECK(static_cast<double>(csv_ios) == Approx(j["total"]["ios"].get<double>()).epsilon(0.01));

  // The SVG, parsed as XML.
  const std::string py =
      "import sys, json, xml.etree.ElementTree as ET\n"
      "ns = '{http://www.w3.org/2000/svg}'\n"
      "root = ET.parse(sys.argv[1]).getroot()\n"
      "lines = {p.get('id'): len(p.get('points').split()) for p in root.iter(ns + 'polyline')}\n"
      "marks = {}\n"
      "for g in root.iter(ns + 'g'):\n"
      "    c = g.get('class', '').split()\n"
      "    if c and c[0] == 'marker': marks[c[1]] = marks.get(c[1], 0) + 1\n"
      "print(json.dumps({'root': root.tag, 'lines': lines, 'marks': marks}))\n";
  std::ofstream(base + ".py") << py;
  const auto p = test::run_command("/usr/bin/python3 " + base + ".py " + svg, 30);
  INFO(p.output);
  REQUIRE(p.exit_code == 0);
  const auto s = nlohmann::json::parse(p.output);
  CHECK(s["root"] == "{http://www.w3.org/2000/svg}svg");
  CHECK(s["lines"]["iops"] == intervals);
  CHECK(s["lines"]["p99"].get<size_t>() <= intervals);
  CHECK(s["marks"]["fault"] == 2);
  CHECK(s["marks"]["failover"] == j["fault"]["timeline"].size());
  for (const std::string& f : {csv, svg, base + ".py"}) ::unlink(f.c_str());
}

TEST_CASE("a path added and one removed mid-run: both delivered, the new one carries I/O, no error", "[bench]") {
  const auto j = clean_run("--embedded --paths 3 --standby-paths 1 --rw randrw --size 16m --runtime 3s "
                           "--fault-script 800ms:add-path:2,1.8s:remove-path:0");
  const auto& faults = j["faults"];
  REQUIRE(faults.size() == 2);
  CHECK(faults[0]["action"] == "add-path");
  CHECK(faults[1]["action"] == "remove-path");
  for (const auto& f : faults) {
    CHECK(f["delivered"] == true);
    CHECK(f["errors"] == 0);
  }
  // At the end the volume has paths 1 and 2; path 2, added mid-run, carried I/O.
  std::vector<int> indexes;
  uint64_t added_ios = 0;
  for (const auto& p : j["paths"]) {
    indexes.push_back(p["index"].get<int>());
    if (p["index"] == 2) added_ios = p["ios"].get<uint64_t>();
  }
  CHECK(indexes == std::vector<int>{1, 2});
  CHECK(added_ios > 0);
}

TEST_CASE("bad fault scripts and conflicting flags are refused before the run", "[bench]") {
  auto r = test::run_command(bench_bin() + " --embedded --paths 2 --fault-script 1s:explode:0", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--fault-script entry 1 \"1s:explode:0\": unknown action \"explode\"") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --paths 2 --fault-script 1s:reset:2", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("path 2 out of range (2 paths: 0..1)") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --paths 2 --fault-script 1s:add-path:1", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("add-path of path 1, which is in the volume") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --paths 2 --standby-paths 1 --fault-script 1s:remove-path:1", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("remove-path of path 1, which is not in the volume") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --paths 2 --standby-paths 2 --fault-script 1s:add-path:1", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--standby-paths") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --runtime 1s --fault-script 1s:reset:0", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("is not inside --runtime") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --fault-script ''", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--fault-script no fault in it") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --fault-script 1s:reset:0 --fail-path 0", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("excludes") != std::string::npos);
  r = test::run_command(bench_bin() + " --target 127.0.0.1:1 --fault-script 1s:reset:0", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("needs --embedded or --target-control") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --fault-script @/nonexistent/script", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("cannot read /nonexistent/script") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --latency-log /nonexistent/dir/x.csv", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("cannot write /nonexistent/dir/x.csv") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --runtime 3600s --log-interval 100ms --plot /dev/null", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("--log-interval") != std::string::npos);
}
