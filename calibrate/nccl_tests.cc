#include "calibrate/nccl_tests.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <cctype>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "common/error.h"
#include "common/json_reader.h"
#include "common/text.h"

namespace shardcast {
namespace {

bool OpFromBinary(const std::string& name, CollectiveOp* op) {
  static const std::map<std::string, CollectiveOp> ops = {
      {"all_reduce", CollectiveOp::kAllReduce},     {"all_gather", CollectiveOp::kAllGather},
      {"reduce_scatter", CollectiveOp::kReduceScatter}, {"alltoall", CollectiveOp::kAllToAll},
      {"sendrecv", CollectiveOp::kSendRecv}};
  for (const auto& [k, v] : ops) {
    if (name.find(k) != std::string::npos) {
      *op = v;
      return true;
    }
  }
  return false;
}

/// The longest line a log may have (nccl-tests prints lines of about 100 characters).
constexpr std::size_t kMaxLogLineChars = 65536;

/// Length of a run of decimal digits at `s[i]`.
std::size_t Digits(const std::string& s, std::size_t i) {
  std::size_t n = 0;
  while (i + n < s.size() && s[i + n] >= '0' && s[i + n] <= '9') ++n;
  return n;
}

/// Strips "[1,0]<stdout>:" / "[1,0]<stderr>:" (Open MPI --tag-output) and "0: " / "[0] " (srun -l)
/// prefixes. A plain scan (no std::regex, whose recursion a long line can overflow).
std::string StripPrefix(const std::string& line) {
  std::size_t i = 0;
  if (!line.empty() && line[0] == '[') {
    const std::size_t a = Digits(line, 1);
    if (a > 0 && 1 + a < line.size()) {
      if (line[1 + a] == ']' && 2 + a < line.size() && std::isspace(static_cast<unsigned char>(line[2 + a]))) {
        i = 3 + a;  // "[0] "
      } else if (line[1 + a] == ',') {
        const std::size_t b = Digits(line, 2 + a);
        const std::size_t close = 2 + a + b;
        if (b > 0 && close < line.size() && line[close] == ']') {
          for (const char* tag : {"<stdout>:", "<stderr>:"}) {
            if (line.compare(close + 1, 9, tag) == 0) i = close + 10;
          }
        }
      }
    }
  } else {
    const std::size_t a = Digits(line, 0);
    if (a > 0 && a + 1 < line.size() && line[a] == ':' && std::isspace(static_cast<unsigned char>(line[a + 1]))) {
      i = a + 2;  // "0: "
    }
  }
  return line.substr(i);
}

/// A line for a message: at most 120 characters.
std::string Quoted(const std::string& line) {
  return line.size() > 120 ? line.substr(0, 120) + "..." : line;
}

std::vector<std::string> Fields(const std::string& s) {
  std::istringstream ss(s);
  std::vector<std::string> f;
  std::string w;
  while (ss >> w) f.push_back(w);
  return f;
}

bool ParseDouble(const std::string& s, double* v) {
  try {
    std::size_t pos = 0;
    *v = std::stod(s, &pos);
    return pos == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

/// The row with the largest algbw, positive and at least `min_algbw_GBps` (a printed value whose
/// two decimals weigh least), or null.
const NcclTestsRow* FastestRow(const NcclTestsRun& run, double min_algbw_GBps) {
  const NcclTestsRow* best = nullptr;
  for (const auto& x : run.rows) {
    if (x.algbw_GBps > 0 && x.algbw_GBps >= min_algbw_GBps && (best == nullptr || x.algbw_GBps > best->algbw_GBps)) {
      best = &x;
    }
  }
  return best;
}

/// n from busbw/algbw: all-reduce f = 2(n-1)/n -> n = 2/(2-f); AG/RS/A2A f = (n-1)/n -> 1/(1-f).
int RanksFromFactor(CollectiveOp op, double f) {
  if (!(f > 0)) return 0;
  if (op == CollectiveOp::kAllReduce) return f < 2 ? static_cast<int>(std::lround(2.0 / (2.0 - f))) : 0;
  if (op == CollectiveOp::kSendRecv) return 0;
  return f < 1 ? static_cast<int>(std::lround(1.0 / (1.0 - f))) : 0;
}

/// The rank count a log lists (its "Rank" lines, or the JSON's devices) against the one its rows'
/// busbw/algbw implies (nccl-tests' doc/PERFORMANCE.md factors). Several single-rank tests run side
/// by side (nccl-tests built without MPI=1 under mpirun) list every process yet time one GPU alone
/// (busbw 0 for all-reduce); a log cut or pasted together disagrees the same way. Only a clear
/// disagreement is an error: the row with the largest algbw, at least 1 GB/s (its two printed
/// decimals then cost at most 1%), and a factor off by more than 0.02 plus that rounding.
void CheckRanksAgreeWithBusBw(const NcclTestsRun& run, const std::string& file) {
  if (run.ranks < 2 || run.op == CollectiveOp::kSendRecv || run.split_groups) return;
  const NcclTestsRow* best = FastestRow(run, 1);
  if (best == nullptr) return;
  const double expected = BusBwFactor(run.op, run.ranks);
  const double got = best->busbw_GBps / best->algbw_GBps;
  const double rounding = 0.005 * (1 + got) / best->algbw_GBps;  // both printed to 0.01 GB/s
  if (std::fabs(got - expected) <= 0.02 + rounding) return;
  const int implied = got == 0 ? 1 : RanksFromFactor(run.op, got);  // one rank: busbw 0
  const std::string formula = run.op == CollectiveOp::kAllReduce ? "2(n-1)/n" : "(n-1)/n";
  throw InputError(fmt::format(
      "{}: {}: the log lists {} ranks, for which busbw/algbw = {} = {:.3f}, but its {:.0f}-byte row has algbw {} and "
      "busbw {} GB/s, a factor of {:.3f} ({}); expected one test over all the ranks it lists (were single-rank "
      "tests run side by side, nccl-tests built without MPI=1, or were logs pasted together?)",
      file, run.binary.empty() ? ToString(run.op) : run.binary, run.ranks, formula, expected,
      best->size_bytes, FormatNumber(best->algbw_GBps), FormatNumber(best->busbw_GBps), got,
      implied == 1 ? std::string("one rank alone")
      : implied > 1 ? fmt::format("{} ranks", implied)
                    : std::string("no rank count gives it")));
}

/// The rank count of a log that lists none, from the busbw/algbw of its row with the largest algbw
/// (whose two printed decimals weigh least); 0 when no row has an algbw.
int RanksFromRows(const NcclTestsRun& run) {
  const NcclTestsRow* best = FastestRow(run, 0);
  return best == nullptr ? 0 : RanksFromFactor(run.op, best->busbw_GBps / best->algbw_GBps);
}

std::vector<NcclTestsRun> ParseJson(const Json& j, const std::string& file) {
  JsonReader r(j, file);
  NcclTestsRun run;
  std::string name = r.OptString("collective").value_or(file);
  if (j.contains("config") && j["config"].is_object() && j["config"].contains("collective")) {
    name = j["config"]["collective"].get<std::string>();
  }
  if (!OpFromBinary(name, &run.op) && !OpFromBinary(file, &run.op)) {
    throw InputError(file + ": cannot tell the collective (expected a \"collective\" key or a file name such as "
                            "all_reduce_perf.json)");
  }
  run.binary = name;
  std::set<std::string> hosts;
  if (j.contains("devices") && j["devices"].is_array()) {
    for (const auto& d : j["devices"]) {
      if (d.contains("hostname") && d["hostname"].is_string()) hosts.insert(d["hostname"].get<std::string>());
      // The GPU, as the text log's "device ... [NVIDIA H200]" lines give it (checked on import).
      if (run.device.empty() && d.contains("device_info") && d["device_info"].is_string()) {
        run.device = d["device_info"].get<std::string>();
      }
    }
    // nccl-tests' JSON lists each process's first device; a process drives ngpus GPUs per thread.
    int per_process = 1;
    if (j.contains("config") && j["config"].is_object()) {
      for (const char* k : {"ngpus", "nthreads"}) {
        const Json& v = j["config"].contains(k) ? j["config"][k] : Json();
        if (v.is_number_integer() && v.get<int>() >= 1 && v.get<int>() <= 1024) per_process *= v.get<int>();
      }
    }
    run.ranks = static_cast<int>(j["devices"].size()) * per_process;
  }
  run.nodes = std::max<int>(1, static_cast<int>(hosts.size()));
  run.hosts_named = !hosts.empty();
  if (!j.contains("results") || !j["results"].is_array()) {
    throw InputError(file + ": /results: missing, expected an array of nccl-tests results");
  }
  for (std::size_t i = 0; i < j["results"].size(); ++i) {
    const std::string ptr = "/results/" + std::to_string(i);
    JsonReader row(j["results"][i], file, ptr);
    JsonReader oop = row.Object("out_of_place");
    NcclTestsRow x;
    x.size_bytes = row.Number("size", 0, 1e15);
    x.time_us = oop.Number("time", 0, 1e12);
    x.algbw_GBps = oop.Number("alg_bw", 0, 1e9);
    x.busbw_GBps = oop.Number("bus_bw", 0, 1e9);
    if (x.size_bytes > 0 && x.time_us <= 0) {
      throw InputError(file + ": " + ptr + "/out_of_place/time: got 0 for " + FormatNumber(x.size_bytes) +
                       " bytes, expected a positive time in us");
    }
    if (oop.Has("nwrong") && oop.json()["nwrong"].is_number() && oop.json()["nwrong"].get<double>() != 0) {
      throw InputError(file + ": " + ptr + "/out_of_place/nwrong: got " + oop.json()["nwrong"].dump() +
                       ", expected 0 (nccl-tests found wrong results: the collective or the run is broken)");
    }
    run.rows.push_back(x);
  }
  if (run.rows.empty()) throw InputError(file + ": /results: empty, expected at least one measured size");
  CheckRanksAgreeWithBusBw(run, file);
  if (run.ranks == 0) run.ranks = RanksFromRows(run);
  return {run};
}

/// The message sizes a test sweeps, from its "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592
/// step: 2(factor) ..." line (or "step: 1048576(bytes)"); 0 where the line does not say.
struct SizeSweep {
  double max_bytes = 0;
  double factor = 0;      ///< sizes multiply by it ...
  double step_bytes = 0;  ///< ... or grow by it
};

SizeSweep ReadSizeSweep(const std::vector<std::string>& f) {
  SizeSweep w;
  for (std::size_t i = 0; i + 1 < f.size(); ++i) {
    if (f[i] == "maxBytes" && !ParseDouble(f[i + 1], &w.max_bytes)) w.max_bytes = 0;
    if (f[i] != "step:") continue;
    const std::string& v = f[i + 1];
    const auto paren = v.find('(');
    double x = 0;
    if (paren == std::string::npos || !ParseDouble(v.substr(0, paren), &x) || !(x > 0)) continue;
    if (v.compare(paren, 8, "(factor)") == 0 && x > 1) w.factor = x;
    if (v.compare(paren, 7, "(bytes)") == 0) w.step_bytes = x;
  }
  return w;
}

/// A log whose rows stop well before the sweep's maxBytes was cut off (a pasted part, a killed
/// run): its largest size's rate would stand for every larger message, the bandwidth of a 1 MiB
/// message for a 1 GiB one. The next size the sweep would have run (nccl-tests rounds a size down
/// to whole elements per rank, hence the 10% slack) must lie past maxBytes.
void CheckSweepIsComplete(const NcclTestsRun& run, const SizeSweep& w, const std::string& file) {
  if (w.max_bytes <= 0 || (w.factor <= 0 && w.step_bytes <= 0) || run.rows.empty()) return;
  double last = 0;
  for (const auto& r : run.rows) last = std::max(last, r.size_bytes);
  const double next = w.factor > 0 ? last * w.factor : last + w.step_bytes;
  if (next >= 0.9 * w.max_bytes) return;
  throw InputError(fmt::format(
      "{}: {}: the result rows stop at {:.0f} B but the test's header sweeps to maxBytes {:.0f} B: the log looks "
      "cut off, and its largest messages would take the rate of {:.0f}-byte ones (expected the whole log; a sweep "
      "that ends there was run with -e {:.0f})",
      file, run.binary.empty() ? std::string(ToString(run.op)) : run.binary, last, w.max_bytes,
      last, last));
}

/// One result row of a text log, "size count type redop [root] time algbw busbw #wrong ...",
/// whose first field `size` has been read: the out-of-place time, algbw and busbw from column
/// `time_col` (the header's; -1 without one: the first three numeric columns after the type and
/// redop words). With `wrong_count` (a "#wrong" header, nccl-tests 2.13+), a row whose count of
/// wrong elements is not 0 (or N/A, -c 0) is an error: a collective that returned wrong data has
/// no timing worth keeping; older logs' "error" column is a deviation and is not checked.
/// `header` (the column header's names, empty before one) gives the row's least column count.
/// `where` names the row in errors (InputError).
NcclTestsRow ParseResultRow(const std::vector<std::string>& f, double size, int time_col, bool wrong_count,
                            const std::vector<std::string>& header, const std::string& where) {
  // Under a column header every row has its columns: a row with one missing would be read
  // shifted (an in-place time as #wrong). More are read by position (another process's output
  // can land at the end of a row under mpirun).
  if (!header.empty() && f.size() < header.size()) {
    std::string names;
    for (const auto& h : header) names += (names.empty() ? "" : " ") + h;
    throw InputError(where + " has " + std::to_string(f.size()) + " columns, expected the header's " +
                     std::to_string(header.size()) + " (" + names + ")");
  }
  int tc = time_col;
  if (tc < 0 || tc + 2 >= static_cast<int>(f.size())) {
    // No header seen: find the first three numeric columns after the type/redop words.
    tc = -1;
    for (std::size_t i = 2; i + 2 < f.size(); ++i) {
      double a, b, c;
      // time, algbw and busbw are never negative (root is -1 for all but rooted collectives).
      if (ParseDouble(f[i], &a) && ParseDouble(f[i + 1], &b) && ParseDouble(f[i + 2], &c) && i >= 4 && a >= 0 &&
          b >= 0 && c >= 0) {
        tc = static_cast<int>(i);
        break;
      }
    }
  }
  if (tc < 0 || tc + 2 >= static_cast<int>(f.size())) {
    throw InputError(where + " is malformed (expected: size count type redop [root] time algbw busbw #wrong ...)");
  }
  NcclTestsRow x;
  x.size_bytes = size;
  const auto column = [&](int i, const char* name, double* v) {
    const std::string& cell = f[static_cast<std::size_t>(i)];
    if (!ParseDouble(cell, v) || !std::isfinite(*v) || *v < 0) {
      throw InputError(where + ": " + name + " = '" + Quoted(cell) + "', expected a finite number >= 0");
    }
  };
  column(tc, "time", &x.time_us);
  column(tc + 1, "algbw", &x.algbw_GBps);
  column(tc + 2, "busbw", &x.busbw_GBps);
  if (!std::isfinite(x.size_bytes) || x.size_bytes < 0) {
    throw InputError(where + ": size = '" + Quoted(f[0]) + "', expected a finite number of bytes >= 0");
  }
  if (x.size_bytes > 0 && x.time_us <= 0) {
    throw InputError(where + ": time = '" + Quoted(f[static_cast<std::size_t>(tc)]) + "' for " + f[0] +
                     " bytes, expected a positive time in us");
  }
  double wrong = 0;
  if (wrong_count && tc + 3 < static_cast<int>(f.size()) && ParseDouble(f[static_cast<std::size_t>(tc) + 3], &wrong) &&
      wrong != 0) {
    throw InputError(where + ": #wrong = " + f[static_cast<std::size_t>(tc) + 3] +
                     ", expected 0 (nccl-tests found wrong results: the collective or the run is broken)");
  }
  return x;
}

/// Whether `s` names one of nccl-tests' datatypes (its third result column, common.cu test_typenames).
bool IsNcclTestsType(const std::string& s) {
  static const std::set<std::string> kTypes = {"int8",  "uint8", "int32",    "uint32", "int64",  "uint64", "half",
                                               "float", "double", "bfloat16", "f8e4m3", "f8e5m2", "char",  "int"};
  return kTypes.count(s) > 0;
}

/// A "#  Rank  0 Group  0 Pid 65234 on gpu49 device 0 [0x07] NVIDIA A100-SXM4-80GB" line (new;
/// "#   Rank  0 Pid 920 on node2 ..." old), `f` its fields: its group (NCCL_TESTS_SPLIT_MASK splits
/// the ranks into communicators, "Group" the colour, and busbw is of one of them), its host, and
/// the GPU's name after the bus id for `run` where it has none yet.
void ReadRankLine(const std::string& body, const std::vector<std::string>& f, std::set<std::string>* groups,
                  std::set<std::string>* hosts, NcclTestsRun* run) {
  for (std::size_t i = 0; i + 1 < f.size(); ++i) {
    if (f[i] == "Group") groups->insert(f[i + 1]);
    if (f[i] == "on") hosts->insert(f[i + 1]);
  }
  const auto bus = body.find("] ");
  if (run->device.empty() && bus != std::string::npos && body.find("device") != std::string::npos) {
    std::string name = body.substr(bus + 2);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.pop_back();
    run->device = name;
  }
}

/// A text log read line by line: the run being read (its Rank lines, column header and size
/// sweep) and the runs finished (a "Collective test starting" line, or the end, finishes one).
struct TextLogReader {
  std::string file;
  std::vector<NcclTestsRun> runs;
  NcclTestsRun cur;
  bool have_op = false;
  std::set<std::string> hosts, groups;
  int rank_lines = 0;
  int time_col = -1;                // index of the out-of-place time column in a data row
  std::vector<std::string> header;  // the column header's names
  SizeSweep sweep;                  // the "# nThread ... maxBytes ... step:" line's
  // Whether the header names the column after busbw "#wrong" (a count of wrong elements, since
  // nccl-tests 2.13); older logs have "error", the largest deviation, small but not 0 in 16-bit.
  bool wrong_count = false;

  void Finish() {
    if (cur.rows.empty()) return;
    if (!have_op) {
      throw InputError(file + ": cannot tell the collective (expected a '# Collective test starting:' line or a file "
                              "name such as all_reduce_perf.log)");
    }
    cur.ranks = rank_lines;
    cur.split_groups = groups.size() > 1;
    cur.nodes = std::max<int>(1, static_cast<int>(hosts.size()));
    cur.hosts_named = !hosts.empty();
    CheckRanksAgreeWithBusBw(cur, file);
    CheckSweepIsComplete(cur, sweep, file);
    if (cur.ranks == 0) cur.ranks = RanksFromRows(cur);
    runs.push_back(cur);
    cur.rows.clear();
    sweep = SizeSweep{};
  }

  /// A "#" line (its text after the "#"): a new test, the size sweep, a Rank line, the header.
  void Comment(const std::string& body, int lineno) {
    if (auto p = body.find("Collective test starting:"); p != std::string::npos) {
      Finish();
      // A new test (logs concatenated): its own Rank lines and column header follow.
      rank_lines = 0;
      header.clear();
      time_col = -1;
      wrong_count = false;
      hosts.clear();
      groups.clear();
      cur.device.clear();
      const auto f = Fields(body.substr(p + 25));
      if (!f.empty()) {
        cur.binary = f[0];
        have_op = OpFromBinary(f[0], &cur.op);
        if (!have_op) {
          throw InputError(file + ":" + std::to_string(lineno) + ": unknown collective '" + Quoted(f[0]) +
                           "' (expected all_reduce, all_gather, reduce_scatter, alltoall or sendrecv)");
        }
      }
      return;
    }
    const auto f = Fields(body);
    if (!f.empty() && f[0] == "nThread") sweep = ReadSizeSweep(f);
    // "# Reducing maxBytes to 25769803776 due to memory limitation": the sweep ends there.
    if (const auto r = body.find("Reducing maxBytes to "); r != std::string::npos) {
      const auto g = Fields(body.substr(r + 21));
      double reduced = 0;
      if (!g.empty() && ParseDouble(g[0], &reduced) && reduced > 0) sweep.max_bytes = reduced;
    }
    // "#  Rank  0 Group  0 Pid 65234 on gpu49 device 0 ..." (new) / "#   Rank  0 Pid 920 on node2 ..." (old)
    if (f.size() >= 2 && f[0] == "Rank") {
      ++rank_lines;
      ReadRankLine(body, f, &groups, &hosts, &cur);
      return;
    }
    // Column header: the first "time" after the key columns is the out-of-place time.
    if (!f.empty() && f[0] == "size" && std::find(f.begin(), f.end(), "time") != f.end()) {
      header = f;
      time_col = static_cast<int>(std::find(f.begin(), f.end(), "time") - f.begin());
      wrong_count = static_cast<std::size_t>(time_col) + 3 < f.size() && f[static_cast<std::size_t>(time_col) + 3] == "#wrong";
    }
  }

  /// Any other line: a result row, or other output (banners, warnings) to pass over.
  void Data(const std::string& line, int lineno) {
    const auto f = Fields(line);
    if (f.empty()) return;
    double size = 0;
    if (!ParseDouble(f[0], &size)) {
      // Other output, unless the line has a result row's datatype column: a row whose size is
      // garbled would otherwise vanish and its rate be interpolated.
      if (f.size() >= 4 && IsNcclTestsType(f[2])) {
        throw InputError(file + ":" + std::to_string(lineno) + ": result row '" + Quoted(line) + "': size = '" +
                         Quoted(f[0]) + "', expected a number of bytes");
      }
      return;
    }
    cur.rows.push_back(ParseResultRow(f, size, time_col, wrong_count, header,
                                      file + ":" + std::to_string(lineno) + ": result row '" + Quoted(line) + "'"));
  }
};

}  // namespace

std::vector<NcclTestsRun> ParseNcclTestsLog(const std::string& text, const std::string& file) {
  std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return ParseJson(ParseJsonText(text, file), file);
  TextLogReader reader;
  reader.file = file;
  reader.have_op = OpFromBinary(file, &reader.cur.op);
  std::istringstream in(text);
  std::string raw;
  int lineno = 0;
  while (std::getline(in, raw)) {
    ++lineno;
    if (raw.size() > kMaxLogLineChars) {
      throw InputError(file + ":" + std::to_string(lineno) + ": a line of " + std::to_string(raw.size()) +
                       " characters, expected at most " + std::to_string(kMaxLogLineChars) +
                       " (nccl-tests lines are short: is this an nccl-tests log?)");
    }
    const std::string line = StripPrefix(raw);
    if (line.find("NCCL INFO") != std::string::npos || line.find("NCCL WARN") != std::string::npos) continue;
    if (line.rfind("#", 0) == 0) {
      reader.Comment(line.substr(1), lineno);
    } else {
      reader.Data(line, lineno);
    }
  }
  reader.Finish();
  if (reader.runs.empty()) throw InputError(file + ": no nccl-tests result rows found (is this an nccl-tests log?)");
  return reader.runs;
}

std::vector<NcclTestsRun> ReadNcclTestsLog(const std::string& path) {
  return ParseNcclTestsLog(ReadTextFile(path), path);
}

CollectiveTable ToCollectiveTable(const NcclTestsRun& run) {
  CollectiveTable t;
  t.op = run.op;
  t.ranks = run.ranks;
  t.nodes = run.nodes;
  std::map<double, double> best;  // size -> time (s); repeated sizes keep the fastest
  for (const auto& r : run.rows) {
    if (r.size_bytes <= 0 || r.time_us <= 0) continue;
    const double s = r.time_us * 1e-6;
    auto it = best.find(r.size_bytes);
    if (it == best.end() || s < it->second) best[r.size_bytes] = s;
  }
  for (const auto& [size, secs] : best) t.bytes_to_seconds.push_back({size, secs});
  return t;
}

}  // namespace shardcast
