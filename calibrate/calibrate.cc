#include "calibrate/calibrate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <Eigen/Dense>
#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include "calibrate/cuda_backend.h"
#include "simulator/cost_model.h"
#include "calibrate/fit.h"
#include "calibrate/nccl_tests.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/text.h"
#include "models/loader.h"

namespace shardcast {

const std::vector<std::string>& CalibrationGroups() {
  static const std::vector<std::string> g = {"gemm", "memory", "attention", "collectives", "overlap"};
  return g;
}

namespace {

/// Today's date (UTC), YYYY-MM-DD: the date a measured profile is stamped with.
std::string TodayUtc() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

/// A measured intra-node all-reduce sets the busbw every in-node group without its own table uses
/// (docs/calibrate.md). It already is NVLink SHARP's rate where NCCL chose NVLS for it, so the
/// default profile's NVLS estimate (cost_model.cc takes the larger of the two) no longer applies.
void TakeMeasuredIntraAllReduce(double busbw_GBps, double alpha_s, HardwareProfile* p) {
  p->intra_busbw_GBps = busbw_GBps;
  p->coll_base_latency_s = alpha_s;
  p->coll_intra_hop_latency_s = 0;
  p->nvls_allreduce_busbw_GBps = 0;
}


int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int Size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}
double MaxOverRanks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

/// Median seconds of `fn` after a warm-up, repeated until `budget_s` or `max_reps`.
double TimeMedian(const std::function<void()>& fn, double budget_s, int max_reps) {
  fn();  // warm-up
  std::vector<double> t;
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(t.size()) < max_reps) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(b - a).count());
    if (std::chrono::duration<double>(b - start).count() > budget_s && t.size() >= 3) break;
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Eigen::MatrixXf RandomNormal(Eigen::Index r, Eigen::Index c, std::mt19937& gen) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Eigen::MatrixXf m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = d(gen);  // never zeros (hardware.md 4.1)
  return m;
}

struct Ctx {
  const CalibrateOptions& o;
  int rank, size;
  mutable std::chrono::steady_clock::time_point group_start = std::chrono::steady_clock::now();
  /// "calibrate: gemm 3/11, 1.2 s left" on stderr (rank 0); the estimate assumes the remaining
  /// items take as long as the done ones.
  void Progress(const std::string& what, std::size_t done, std::size_t total) const {
    if (done == 1) group_start = std::chrono::steady_clock::now();
    if (rank != 0 || !o.progress) return;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - group_start).count();
    const double left = done > 1 ? el / static_cast<double>(done - 1) * static_cast<double>(total - done) : 0.0;
    std::cerr << fmt::format("calibrate: {} {}/{}{}\n", what, done, total,
                             done > 1 && done < total ? fmt::format(", {:.1f} s left", left) : "");
  }
};

// ---- measurement groups: each returns JSON data (identical on every rank) ----

Json MeasureGemm(const Ctx& c) {
  std::vector<std::array<int, 3>> shapes;
  const std::vector<int> dims = c.o.quick ? std::vector<int>{64, 256, 512} : std::vector<int>{64, 128, 256, 512, 1024};
  for (int m : dims) {
    for (int k : dims) shapes.push_back({m, m, k});
  }
  // Off-by-one shapes expose tile effects (hardware.md 4.2); transformer-like skinny shapes.
  shapes.push_back({257, 256, 256});
  shapes.push_back({512, 64, 512});
  if (!c.o.quick) shapes.push_back({1024, 4096, 1024});
  for (const auto& s : c.o.model_shapes) {
    if (std::find(shapes.begin(), shapes.end(), s) == shapes.end()) shapes.push_back(s);
  }
  Json out = Json::array();
  std::mt19937 gen(1234 + static_cast<unsigned>(c.rank));
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const auto [m, n, k] = shapes[i];
    const double flops = 2.0 * m * n * k;
    double secs;
    if (c.o.fake_timer) {
      secs = flops / (40e9 * std::min(1.0, 0.3 + flops / 2e8)) + 2e-6;
    } else {
      Eigen::MatrixXf a = RandomNormal(m, k, gen), b = RandomNormal(k, n, gen), cm(m, n);
      secs = TimeMedian([&] { cm.noalias() = a * b; }, c.o.quick ? 0.05 : 0.2, 50);
    }
    secs = MaxOverRanks(secs);  // the slowest device sets a synchronous step
    out.push_back({{"m", m}, {"n", n}, {"k", k}, {"seconds", secs}});
    c.Progress("gemm", i + 1, shapes.size());
  }
  return out;
}

Json MeasureMemory(const Ctx& c) {
  std::vector<double> sizes;
  for (double b = 1e4; b <= (c.o.quick ? 1.1e7 : 1.1e8); b *= 10) sizes.push_back(b);
  Json out = Json::array();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double bytes = sizes[i];  // axpy y = a*x + y moves 12 bytes per float element
    double secs;
    if (c.o.fake_timer) {
      secs = bytes / (10e9 * std::min(1.0, 0.2 + bytes / 1e7)) + 1e-6;
    } else {
      const std::size_t n = static_cast<std::size_t>(bytes / 12);
      std::vector<float> x(n, 1.5f), y(n, 0.5f);
      secs = TimeMedian(
          [&] {
            for (std::size_t j = 0; j < n; ++j) y[j] = 0.999f * x[j] + y[j];
          },
          c.o.quick ? 0.03 : 0.1, 100);
      if (y[n / 2] == 12345.0f) std::cerr << "";  // keep the loop
    }
    secs = MaxOverRanks(secs);
    out.push_back({{"bytes", bytes}, {"seconds", secs}});
    c.Progress("memory", i + 1, sizes.size());
  }
  return out;
}

Json MeasureAttention(const Ctx& c) {
  // Naive attention for one head: S = Q K^T, P = softmax(S), O = P V, and its backward.
  const int s = c.o.quick ? 256 : 512, d = 64;
  const double fwd_flops = 4.0 * s * s * d;
  double fwd, bwd;
  if (c.o.fake_timer) {
    fwd = fwd_flops / 20e9;
    bwd = 2.2 * fwd;
  } else {
    std::mt19937 gen(99);
    Eigen::MatrixXf q = RandomNormal(s, d, gen), k = RandomNormal(s, d, gen), v = RandomNormal(s, d, gen);
    Eigen::MatrixXf sc(s, s), p(s, s), o(s, d), dout = RandomNormal(s, d, gen), dp(s, s), ds(s, s), dq(s, d),
        dk(s, d), dv(s, d);
    auto softmax = [&] {
      for (int r = 0; r < s; ++r) {
        const float mx = sc.row(r).maxCoeff();
        p.row(r) = (sc.row(r).array() - mx).exp();
        p.row(r) /= p.row(r).sum();
      }
    };
    fwd = TimeMedian(
        [&] {
          sc.noalias() = q * k.transpose();
          softmax();
          o.noalias() = p * v;
        },
        0.1, 30);
    bwd = TimeMedian(
        [&] {
          dv.noalias() = p.transpose() * dout;
          dp.noalias() = dout * v.transpose();
          for (int r = 0; r < s; ++r) ds.row(r) = p.row(r).array() * (dp.row(r).array() - (dp.row(r).array() * p.row(r).array()).sum());
          dq.noalias() = ds * k;
          dk.noalias() = ds.transpose() * q;
        },
        0.1, 30);
  }
  c.Progress("attention", 1, 1);
  return {{"seq", s}, {"head_dim", d}, {"fwd_flops", fwd_flops}, {"fwd_seconds", MaxOverRanks(fwd)},
          {"bwd_seconds", MaxOverRanks(bwd)}};
}

Json MeasureCollectives(const Ctx& c) {
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  // Count nodes: gather host names.
  std::vector<char> all(static_cast<std::size_t>(c.size) * MPI_MAX_PROCESSOR_NAME, 0);
  MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  std::set<std::string> hosts;
  for (int r = 0; r < c.size; ++r) hosts.insert(std::string(&all[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]));
  Json out = {{"ranks", c.size}, {"nodes", static_cast<int>(hosts.size())}, {"host", std::string(host, static_cast<std::size_t>(len))}};
  out["tables"] = Json::array();
  if (c.size < 2) return out;
  std::vector<double> sizes;
  for (double b = 8; b <= (c.o.quick ? 1 << 20 : 1 << 26); b *= (c.o.quick ? 16 : 4)) sizes.push_back(b);
  const std::vector<std::pair<CollectiveOp, std::string>> ops = {
      {CollectiveOp::kAllReduce, "all_reduce"}, {CollectiveOp::kAllGather, "all_gather"},
      {CollectiveOp::kReduceScatter, "reduce_scatter"}, {CollectiveOp::kAllToAll, "alltoall"},
      {CollectiveOp::kSendRecv, "sendrecv"}};
  // Group sizes: powers of two up to the world, and the world itself (consecutive ranks, as
  // tensor-parallel groups are placed).
  std::vector<int> groups;
  for (int g = 2; g < c.size; g *= 2) groups.push_back(g);
  groups.push_back(c.size);
  std::size_t done = 0;
  const std::size_t total = groups.size() * ops.size();
  for (int g : groups) {
    MPI_Comm comm;
    const bool member = c.rank < (c.size / g) * g;
    MPI_Comm_split(MPI_COMM_WORLD, member ? c.rank / g : MPI_UNDEFINED, c.rank, &comm);
    int group_nodes = 1;
    if (member) {
      std::vector<char> names(static_cast<std::size_t>(g) * MPI_MAX_PROCESSOR_NAME, 0);
      MPI_Allgather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm);
      std::set<std::string> h;
      for (int r = 0; r < g; ++r) h.insert(std::string(&names[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]));
      group_nodes = static_cast<int>(h.size());
    }
    int grank = 0;
    if (member) MPI_Comm_rank(comm, &grank);
    for (const auto& [op, name] : ops) {
      Json pts = Json::array();
      for (double size : sizes) {
        // nccl-tests' size: all-reduce and all-to-all per-rank buffer; all-gather total output;
        // reduce-scatter total input; send/recv bytes sent per rank. Float elements.
        const bool per_peer = op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter ||
                              op == CollectiveOp::kAllToAll;
        const std::size_t count = std::max<std::size_t>(1, static_cast<std::size_t>(size / 4 / (per_peer ? g : 1)));
        const double bytes = per_peer ? count * 4.0 * g : count * 4.0;
        double secs = 0;
        if (c.o.fake_timer) {
          secs = 5e-6 + BusBwFactor(op, g) * bytes / 5e9;
        } else if (member) {
          const std::size_t big = count * static_cast<std::size_t>(g);
          std::vector<float> send(op == CollectiveOp::kReduceScatter || op == CollectiveOp::kAllToAll ? big : count, 1.0f);
          std::vector<float> recv(op == CollectiveOp::kAllGather || op == CollectiveOp::kAllToAll ? big : count, 0.0f);
          const int n = static_cast<int>(count);
          auto run = [&] {
            switch (op) {
              case CollectiveOp::kAllReduce:
                MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, comm);
                break;
              case CollectiveOp::kAllGather:
                MPI_Allgather(send.data(), n, MPI_FLOAT, recv.data(), n, MPI_FLOAT, comm);
                break;
              case CollectiveOp::kReduceScatter:
                MPI_Reduce_scatter_block(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, comm);
                break;
              case CollectiveOp::kAllToAll:
                MPI_Alltoall(send.data(), n, MPI_FLOAT, recv.data(), n, MPI_FLOAT, comm);
                break;
              case CollectiveOp::kSendRecv:
                MPI_Sendrecv(send.data(), n, MPI_FLOAT, (grank + 1) % g, 0, recv.data(), n, MPI_FLOAT,
                             (grank + g - 1) % g, 0, comm, MPI_STATUS_IGNORE);
                break;
            }
          };
          run();
          const int reps = bytes < 1e5 ? 50 : 10;
          MPI_Barrier(comm);
          const double t0 = MPI_Wtime();
          for (int i = 0; i < reps; ++i) run();
          secs = (MPI_Wtime() - t0) / reps;
        }
        pts.push_back({bytes, MaxOverRanks(secs)});
      }
      int nodes_all = group_nodes;
      MPI_Allreduce(&group_nodes, &nodes_all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      out["tables"].push_back({{"op", name}, {"ranks", g}, {"nodes", nodes_all}, {"points", pts}});
      c.Progress("collectives", ++done, total);
    }
    if (member) MPI_Comm_free(&comm);
  }
  return out;
}

Json MeasureOverlap(const Ctx& c) {
  // A GEMM alone, and beside a thread that streams memory like a communication kernel.
  double alone, with;
  if (c.o.fake_timer) {
    alone = 1e-3;
    with = 1.1e-3;
  } else {
    std::mt19937 gen(7);
    const int n = c.o.quick ? 256 : 512;
    Eigen::MatrixXf a = RandomNormal(n, n, gen), b = RandomNormal(n, n, gen), cm(n, n);
    alone = TimeMedian([&] { cm.noalias() = a * b; }, 0.1, 30);
    std::atomic<bool> stop{false};
    std::thread comm([&] {
      std::vector<char> src(32 << 20, 1), dst(32 << 20, 0);
      while (!stop) std::memcpy(dst.data(), src.data(), src.size());
    });
    with = TimeMedian([&] { cm.noalias() = a * b; }, 0.1, 30);
    stop = true;
    comm.join();
  }
  c.Progress("overlap", 1, 1);
  // How many ranks share this node's cores: each runs a GEMM and, here, a streaming thread.
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_ranks = 1;
  MPI_Comm_size(local, &local_ranks);
  MPI_Comm_free(&local);
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  return {{"gemm_alone_seconds", MaxOverRanks(alone)},
          {"gemm_with_comm_seconds", MaxOverRanks(with)},
          {"ranks_per_node", MaxOverRanks(local_ranks)},
          {"cores_per_node", -MaxOverRanks(-cores)}};
}

double MemTotalBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  while (in >> key >> kb) {
    if (key == "MemTotal:") return kb * 1024.0;
    in.ignore(1 << 10, '\n');
  }
  return 16.0 * 1073741824.0;
}

/// The profile from the measured data (a pure function of the data: a resumed sweep gives the
/// same profile as an uninterrupted one with the same measurements).
HardwareProfile BuildCpuProfile(const Json& g, int ranks) {
  HardwareProfile p;
  p.kind = "measured";
  p.gpu = "cpu";
  p.source = "shardcast calibrate --backend cpu (Eigen fp32 GEMMs, filed as the bf16/fp16 and the fp32 rate; axpy, "
             "naive attention, MPI collectives)";
  p.date = TodayUtc();
  // The per-kernel overhead from the memory-bound sweep (at most 5 us: a CPU "kernel" is a call);
  // every fit counts the time above it, which the cost model adds back per kernel.
  std::vector<CurvePoint> mem;
  for (const auto& s : g["memory"]) mem.push_back({s["bytes"].get<double>(), s["seconds"].get<double>()});
  p.launch_overhead_s = std::min(FitLaunchOverhead(mem), 5e-6);
  // GEMM: peak = best sample; samples as measured; g(F) = best efficiency per FLOP count.
  auto gemm_tflops = [&](const Json& s) {
    const double flops = 2.0 * s["m"].get<double>() * s["n"].get<double>() * s["k"].get<double>();
    return flops / TimeAboveLaunch(s["seconds"].get<double>(), p.launch_overhead_s) / 1e12;
  };
  double best = 0;
  for (const auto& s : g["gemm"]) best = std::max(best, gemm_tflops(s));
  p.gemm_peak_tflops = best;
  p.gemm_max_efficiency = 1.0;
  // Eigen's GEMMs are fp32, and the CPU executor runs every precision in fp32: the measured rate
  // is the base (16-bit) rate and the fp32 one alike, so --precision fp32 takes it as measured
  // instead of scaling a built-in default.
  p.gemm_rates.push_back({Precision::kFp32, best, 1.0});
  std::map<double, double> by_gflop;
  for (const auto& s : g["gemm"]) {
    const double flops = 2.0 * s["m"].get<double>() * s["n"].get<double>() * s["k"].get<double>();
    const double tf = gemm_tflops(s);
    p.gemm_samples.push_back({s["m"].get<double>(), s["n"].get<double>(), s["k"].get<double>(), tf});
    auto& e = by_gflop[flops / 1e9];
    e = std::max(e, tf / best);
  }
  for (const auto& [x, y] : by_gflop) p.gemm_efficiency_vs_gflop.push_back({x, y});
  // Memory-bound.
  FitMemoryBound(mem, &p);
  // Attention: the model charges 2.5x the forward FLOPs for backward (flash convention).
  const auto& at = g["attention"];
  const double ff = at["fwd_flops"].get<double>();
  const double fwd_s = TimeAboveLaunch(at["fwd_seconds"].get<double>(), p.launch_overhead_s);
  const double bwd_s = TimeAboveLaunch(at["bwd_seconds"].get<double>(), p.launch_overhead_s);
  p.attention_fwd_efficiency = std::min(1.0, ff / fwd_s / (best * 1e12));
  p.attention_bwd_efficiency = std::min(1.0, 2.5 * ff / bwd_s / (best * 1e12));
  p.attention_efficiency_vs_seq = {{at["seq"].get<double>(), 1.0}};
  p.attention_tiles = "";  // measured: the kernel's own head dims
  // Collectives: tables as measured, alpha-beta from the all-reduce.
  const auto& co = g["collectives"];
  const int nodes = co["nodes"].get<int>();
  p.gpus_per_node = std::max(1, ranks / std::max(1, nodes));
  p.nics_per_node = p.gpus_per_node;
  p.coll_intra_hop_latency_s = 0;
  p.coll_inter_hop_latency_s = 0;
  p.coll_base_latency_s = 5e-6;
  p.intra_busbw_GBps = p.hbm_GBps / 2;  // [est] with one rank: a copy through memory
  int fitted_ranks = 0;
  for (const auto& t : co["tables"]) {
    CollectiveTable ct;
    const std::string op = t["op"].get<std::string>();
    ct.op = op == "all_reduce"       ? CollectiveOp::kAllReduce
            : op == "all_gather"     ? CollectiveOp::kAllGather
            : op == "reduce_scatter" ? CollectiveOp::kReduceScatter
            : op == "alltoall"       ? CollectiveOp::kAllToAll
                                     : CollectiveOp::kSendRecv;
    ct.ranks = t.value("ranks", ranks);
    ct.nodes = t.value("nodes", nodes);
    for (const auto& pt : t["points"]) ct.bytes_to_seconds.push_back({pt[0].get<double>(), pt[1].get<double>()});
    if (ct.op == CollectiveOp::kAllReduce && ct.nodes == 1 && ct.ranks > fitted_ranks) {
      const AlphaBeta ab = FitAlphaBeta(ct.bytes_to_seconds);
      TakeMeasuredIntraAllReduce(ab.beta_Bps > 0 ? ab.beta_Bps * BusBwFactor(ct.op, ct.ranks) / 1e9 : p.intra_busbw_GBps,
                                 ab.alpha_s, &p);
      fitted_ranks = ct.ranks;
    }
    if (ct.op == CollectiveOp::kSendRecv && ct.nodes == 1) {
      const auto& last = ct.bytes_to_seconds.back();
      p.p2p_intra_GBps = last.x / last.y / 1e9;
    }
    p.collective_tables.push_back(std::move(ct));
  }
  if (p.p2p_intra_GBps <= 0) p.p2p_intra_GBps = p.intra_busbw_GBps;
  p.nic_effective_GBps = p.intra_busbw_GBps;
  if (fitted_ranks == 0) {
    p.source += fmt::format("; collective rates not measured ({} rank{}, no all-reduce within a node): intra-node, p2p "
                            "and NIC busbw estimated as half the memory-bound peak, {:.4g} GB/s",
                            ranks, ranks == 1 ? "" : "s", p.intra_busbw_GBps);
  }
  const auto& ov = g["overlap"];
  const double slow = std::max(0.0, ov["gemm_with_comm_seconds"].get<double>() / ov["gemm_alone_seconds"].get<double>() - 1.0);
  p.overlap_slowdown_nvlink = p.overlap_slowdown_network = slow;
  if (ov.contains("ranks_per_node") && ov.contains("cores_per_node")) {
    const double r = ov["ranks_per_node"].get<double>(), cores = ov["cores_per_node"].get<double>();
    if (2 * r > cores) {
      p.source += fmt::format("; the overlap slowdown ({:.1f}%) was measured with {:g} ranks and {:g} memory-streaming "
                              "threads on {:g} cores: oversubscribed, it measures contention for cores as much as for "
                              "memory (run fewer ranks per node for a figure to trust)",
                              100 * slow, r, r, cores);
    }
  }
  p.framework_overhead_bytes = 0.1 * 1073741824.0;  // [est] MPI buffers and allocator slack
  ProfileMachine m;
  m.name = fmt::format("{} CPU ranks on {}", ranks, co["host"].get<std::string>());
  m.devices_per_node = p.gpus_per_node;
  m.nodes = std::max(1, nodes);
  m.memory_bytes_per_device = MemTotalBytes() / p.gpus_per_node;
  p.machine = m;
  return p;
}

}  // namespace

bool CudaBackendBuilt() { return cuda::BuiltWithCuda(); }

std::vector<std::array<int, 3>> ModelGemmShapes(const Model& model, const std::vector<int>& tps) {
  std::vector<std::array<int, 3>> out;
  const Cluster cl = LoadCluster("dgx-a100");  // shapes do not depend on the hardware
  const HardwareProfile prof = DefaultProfile(cl);
  for (int t : tps) {
    ParallelConfig c;
    c.tp = t;
    c.seq_length = model.seq_length;
    const CostModel cm = BuildCostModel(model, c, cl, prof);
    for (const auto* ops : {&cm.layer_ops, &cm.embedding_ops, &cm.output_ops}) {
      for (const auto& o : *ops) {
        if (o.kind != OpKind::kGemm) continue;
        const std::array<int, 3> s = {static_cast<int>(o.m), static_cast<int>(o.n), static_cast<int>(o.k)};
        if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
      }
    }
  }
  return out;
}

namespace {

/// GPU preset for a CUDA device name ("NVIDIA H200", "NVIDIA A100-SXM4-40GB", ...), or "".
std::string PresetForDevice(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("GB200")) return "gb200";
  if (has("B200")) return "b200";
  if (has("H200")) return "h200-sxm";
  if (has("H100")) return has("PCIe") ? "h100-pcie" : "h100-sxm";
  if (has("A100")) return has("40GB") ? "a100-sxm4-40gb" : "a100-sxm4-80gb";
  if (has("L40S")) return "l40s";
  return "";
}

/// How the GEMM samples were taken: the soak, and the SM clock, temperature and power NVML read
/// under load (ranges over the shapes), or why NVML was not read.
std::string GemmConditions(const cuda::Measurements& m) {
  std::string s = fmt::format("GEMMs timed after a {:.0f} s soak", m.gemm_soak_s);
  int clo = 0, chi = 0, tlo = 0, thi = 0;
  double pmax = 0;
  for (const auto& g : m.gemm) {
    if (g.sm_clock_mhz <= 0) continue;
    clo = clo == 0 ? g.sm_clock_mhz : std::min(clo, g.sm_clock_mhz);
    chi = std::max(chi, g.sm_clock_mhz);
    if (g.temperature_c > 0) tlo = tlo == 0 ? g.temperature_c : std::min(tlo, g.temperature_c);
    thi = std::max(thi, g.temperature_c);
    pmax = std::max(pmax, g.power_w);
  }
  if (chi > 0) {
    s += fmt::format(" at SM clock {}-{} MHz", clo, chi);
    if (thi > 0) s += fmt::format(", {}-{} C", tlo, thi);
    if (pmax > 0) s += fmt::format(", up to {:.0f} W", pmax);
    return s + " (NVML)";
  }
  return s + " (clock not read: " +
         (m.nvml_note.empty() ? std::string("NVML gave no reading while the GEMMs ran") : m.nvml_note) + ")";
}

}  // namespace

HardwareProfile BuildCudaProfile(const cuda::Measurements& m) {
  const std::string preset = PresetForDevice(m.device_name);
  HardwareProfile p;
  if (!preset.empty()) {
    // Start from the preset's cluster defaults (attention, latencies); measured parts replace them.
    for (const auto& cn : PresetNames(PresetKind::kCluster)) {
      Cluster cl = LoadCluster(cn);
      if (cl.gpu.name == preset) {
        p = DefaultProfile(cl);
        break;
      }
    }
    if (p.gpu.empty()) p.gpu = preset;
  }
  p.kind = "measured";
  p.gpu = preset.empty() ? m.device_name : preset;
  p.source = "shardcast calibrate --backend cuda on " + m.device_name + " (driver " + m.driver_version + ", CUDA runtime " +
             m.runtime_version + ", NCCL " + m.nccl_version + ", " + std::to_string(m.sm_count) + " SMs); kernels vs CPU: " +
             m.kernel_check + "; " +
             (m.attention.empty() ? (m.attention_note.empty() ? "attention not measured" : m.attention_note) +
                                        " (preset default)"
                                  : "attention: " + m.attention_note);
  p.date = TodayUtc();
  // The per-kernel overhead from the memory-bound sweep; every fit counts the time above it,
  // which the cost model adds back per kernel (the preset's where the sweep has under two sizes).
  std::vector<CurvePoint> mem;
  for (const auto& s : m.memory) mem.push_back({s.bytes, s.seconds});
  if (mem.size() >= 2) p.launch_overhead_s = FitLaunchOverhead(mem);
  double best = 0;
  p.gemm_samples.clear();
  for (const auto& g : m.gemm) {
    // frameworks run heuristic #0
    const double tf = 2.0 * g.m * g.n * g.k / TimeAboveLaunch(g.heuristic0_s, p.launch_overhead_s) / 1e12;
    best = std::max(best, tf);
    p.gemm_samples.push_back({static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k), tf});
  }
  if (p.gemm_peak_tflops <= 0) p.gemm_peak_tflops = best;
  p.source += "; " + GemmConditions(m);
  p.gemm_max_efficiency = std::min(1.0, best / p.gemm_peak_tflops);
  if (!mem.empty()) FitMemoryBound(mem, &p);
  p.memcpy_d2d_GBps = m.memcpy_d2d_GBps;
  if (!m.attention.empty()) FitAttention(m.attention, p.gemm_peak_tflops, &p, m.attention_head_dim);
  if (p.memcpy_d2d_GBps > 0) {
    p.source += fmt::format("; memory-bound peak {:.0f} GB/s, {:.0f}% of a device-to-device cudaMemcpy ({:.0f} GB/s)",
                            p.hbm_GBps, 100 * p.hbm_GBps / p.memcpy_d2d_GBps, p.memcpy_d2d_GBps);
  }
  p.collective_tables.clear();
  for (int op = 0; op < 5; ++op) {
    CollectiveTable t;
    t.op = op == 0   ? CollectiveOp::kAllReduce
           : op == 1 ? CollectiveOp::kAllGather
           : op == 2 ? CollectiveOp::kReduceScatter
           : op == 3 ? CollectiveOp::kAllToAll
                     : CollectiveOp::kSendRecv;
    t.ranks = m.ranks;
    t.nodes = m.nodes;
    for (const auto& c : m.collectives) {
      if (c.op == op) t.bytes_to_seconds.push_back({c.bytes, c.seconds});
    }
    if (t.bytes_to_seconds.size() < 2) continue;
    std::sort(t.bytes_to_seconds.begin(), t.bytes_to_seconds.end(), [](auto a, auto b) { return a.x < b.x; });
    if (op == 4 && m.nodes == 1) {
      const auto& last = t.bytes_to_seconds.back();
      p.p2p_intra_GBps = last.x / last.y / 1e9;
    }
    if (op == 0 && m.nodes == 1) {
      const AlphaBeta ab = FitAlphaBeta(t.bytes_to_seconds);
      const auto& last = t.bytes_to_seconds.back();
      TakeMeasuredIntraAllReduce(last.x / last.y * BusBwFactor(t.op, m.ranks) / 1e9, ab.alpha_s, &p);
    }
    p.collective_tables.push_back(std::move(t));
  }
  if (m.gemm_alone_s > 0) {
    p.overlap_slowdown_nvlink = std::max(0.0, m.gemm_with_comm_s / m.gemm_alone_s - 1.0);
  }
  ProfileMachine pm;
  pm.name = std::to_string(m.ranks_per_node) + "x " + m.device_name;
  pm.devices_per_node = m.ranks_per_node;
  pm.nodes = m.nodes;
  pm.memory_bytes_per_device = m.memory_bytes;
  p.machine = pm;
  return p;
}

namespace {

/// An interrupted sweep's partial results from `partial_path`, checked against this sweep
/// (`now`: backend, --quick, rank count, model shapes; each difference named, saved and now) and
/// for the shape of its groups (CheckPartialGroups). InputError naming the file otherwise.
Json ReadPartialResults(const std::string& partial_path, const Json& now_sweep) {
  Json p = ReadJsonFile(partial_path);
  JsonReader r(p, partial_path);
  if (r.String("format") != "shardcast-calibration-partial") {
    throw InputError(partial_path + ": /format: got " + p["format"].dump() +
                     ", expected \"shardcast-calibration-partial\" (an interrupted sweep's results)");
  }
  // What the sweep must share with the saved one, named where they differ.
  std::vector<std::string> differ;
  for (const char* key : {"backend", "quick", "ranks", "model_shapes"}) {
    const Json& value = now_sweep[key];
    const Json saved = p.contains(key) ? p[key] : Json();
    if (saved == value) continue;
    if (std::string(key) == "model_shapes") {  // a count, not the lists
      differ.push_back(fmt::format("model_shapes (from --model and --tp-values) saved {} shapes, now {}",
                                   saved.is_array() ? saved.size() : 0, value.size()));
    } else {
      differ.push_back(fmt::format("{} saved {}, now {}", key, JsonForMessage(saved), JsonForMessage(value)));
    }
  }
  if (!differ.empty()) {
    throw InputError(partial_path + ": partial results of a different sweep (" + Join(differ, "; ") +
                     "); delete it or run without --resume");
  }
  if (!p.contains("groups") || !p["groups"].is_object()) {
    throw InputError(partial_path + ": /groups: missing or not an object, expected the measured groups of an "
                                    "interrupted sweep; delete it or run without --resume");
  }
  CheckPartialGroups(p["groups"], partial_path);
  return p;
}

}  // namespace

/// InputError naming the partial file and the field unless each saved group has the shape its
/// measurement writes: a hand-edited or truncated file is refused before the sweep goes on.
void CheckPartialGroups(const Json& groups, const std::string& file) {
  auto positive = [&](const Json& v, const std::string& ptr) {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      throw InputError::Field(file, ptr, JsonForMessage(v), "a positive number, as the measurement wrote it");
    }
  };
  auto object_with = [&](const Json& o, const std::string& ptr, std::initializer_list<const char*> keys) {
    if (!o.is_object()) throw InputError::Field(file, ptr, JsonForMessage(o), "an object, as the measurement wrote it");
    for (const char* k : keys) positive(o.contains(k) ? o[k] : Json(), ptr + "/" + k);
  };
  auto samples = [&](const Json& a, const std::string& ptr, std::initializer_list<const char*> keys) {
    if (!a.is_array() || a.empty()) {
      throw InputError::Field(file, ptr, JsonForMessage(a), "a non-empty array of samples, as the measurement wrote it");
    }
    for (std::size_t i = 0; i < a.size(); ++i) object_with(a[i], ptr + "/" + std::to_string(i), keys);
  };
  for (auto it = groups.begin(); it != groups.end(); ++it) {
    const std::string ptr = "/groups/" + it.key();
    const Json& g = it.value();
    if (it.key() == "gemm") {
      samples(g, ptr, {"m", "n", "k", "seconds"});
    } else if (it.key() == "memory") {
      samples(g, ptr, {"bytes", "seconds"});
    } else if (it.key() == "attention") {
      object_with(g, ptr, {"fwd_flops", "fwd_seconds", "bwd_seconds", "seq"});
    } else if (it.key() == "overlap") {
      object_with(g, ptr, {"gemm_alone_seconds", "gemm_with_comm_seconds"});
    } else if (it.key() == "collectives") {
      object_with(g, ptr, {"nodes"});
      if (!g.contains("host") || !g["host"].is_string()) {
        throw InputError::Field(file, ptr + "/host", JsonForMessage(g.value("host", Json())), "the host name");
      }
      if (!g.contains("tables") || !g["tables"].is_array()) {
        throw InputError::Field(file, ptr + "/tables", JsonForMessage(g.value("tables", Json())), "an array of tables");
      }
      for (std::size_t t = 0; t < g["tables"].size(); ++t) {
        const Json& tab = g["tables"][t];
        const std::string tp = ptr + "/tables/" + std::to_string(t);
        if (!tab.is_object() || !tab.contains("op") || !tab["op"].is_string() || !tab.contains("points") ||
            !tab["points"].is_array()) {
          throw InputError::Field(file, tp, JsonForMessage(tab), "an object with op and points");
        }
        for (std::size_t k = 0; k < tab["points"].size(); ++k) {
          const Json& pt = tab["points"][k];
          const std::string pp = tp + "/points/" + std::to_string(k);
          if (!pt.is_array() || pt.size() != 2) throw InputError::Field(file, pp, JsonForMessage(pt), "a pair [bytes, seconds]");
          positive(pt[0], pp + "/0");
          positive(pt[1], pp + "/1");
        }
      }
    } else {
      throw InputError::Field(file, ptr, JsonForMessage(g), "a group of the sweep (gemm, memory, attention, collectives, "
                              "overlap)");
    }
  }
}

HardwareProfile RunCalibration(const CalibrateOptions& o) {
  if (o.backend != "cpu" && o.backend != "cuda") {
    throw InputError("command line: --backend: got \"" + o.backend + "\", expected cpu or cuda");
  }
  if (!o.stop_after.empty() && std::find(CalibrationGroups().begin(), CalibrationGroups().end(), o.stop_after) ==
                                   CalibrationGroups().end()) {
    throw InputError("command line: --stop-after: got \"" + o.stop_after + "\", expected one of " +
                     Join(CalibrationGroups(), ", "));
  }
  if (o.backend == "cuda") {
    std::string why;
    if (!cuda::BuiltWithCuda()) {
      throw InputError("--backend cuda: this build has no CUDA backend (no CUDA toolkit was found at configure time)");
    }
    if (!cuda::Usable(&why)) throw InputError("--backend cuda: no usable GPU was found: " + why);
    cuda::Measurements m;
    try {
      m = cuda::Measure(o.quick, o.progress, o.model_shapes, o.attention_heads);
    } catch (const std::runtime_error& e) {
      throw InputError(std::string("--backend cuda: ") + e.what());
    }
    if (Rank() != 0) return HardwareProfile{};
    HardwareProfile p = BuildCudaProfile(m);
    WriteFileAtomic(o.out, ProfileToJson(p).dump(2) + "\n");
    return p;
  }
  Ctx c{o, Rank(), Size()};
  const std::string partial_path = o.out + ".partial.json";
  // Rank 0 reads the partial results and tells the others which groups are done.
  Json partial = {{"format", "shardcast-calibration-partial"}, {"backend", o.backend}, {"quick", o.quick},
                  {"ranks", c.size}, {"model_shapes", o.model_shapes}, {"groups", Json::object()}};
  int loaded = 0;
  if (c.rank == 0 && o.resume && access(partial_path.c_str(), R_OK) == 0) {
    partial = ReadPartialResults(partial_path, partial);
    loaded = 1;
  }
  MPI_Bcast(&loaded, 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (const auto& group : CalibrationGroups()) {
    int have = c.rank == 0 && partial["groups"].contains(group) ? 1 : 0;
    MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!have) {
      Json data = group == "gemm"         ? MeasureGemm(c)
                  : group == "memory"     ? MeasureMemory(c)
                  : group == "attention"  ? MeasureAttention(c)
                  : group == "collectives" ? MeasureCollectives(c)
                                          : MeasureOverlap(c);
      if (c.rank == 0) {
        partial["groups"][group] = data;
        WriteFileAtomic(partial_path, partial.dump(1));
      }
    } else if (c.rank == 0 && o.progress) {
      std::cerr << "calibrate: " << group << " resumed from " << partial_path << "\n";
    }
    if (group == o.stop_after) return HardwareProfile{};  // as if interrupted here
  }
  if (c.rank != 0) return HardwareProfile{};
  HardwareProfile p;
  try {
    p = BuildCpuProfile(partial["groups"], c.size);
    // What is written must load (a resumed file could hold anything).
    ProfileFromJson(ProfileToJson(p), o.out);
  } catch (const Json::exception& e) {
    throw InputError(partial_path + ": the measured groups do not have the expected shape (" + e.what() +
                     "); delete it or run without --resume");
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (from the measurements" + (loaded ? " resumed from " + partial_path : "") +
                     "; nothing written)");
  }
  // A harness test's profile must not pass for a measurement.
  if (o.fake_timer) p.source += "; SYNTHETIC: timings from --fake-timer formulas (a test of the harness), not measured";
  WriteFileAtomic(o.out, ProfileToJson(p).dump(2) + "\n");
  std::remove(partial_path.c_str());
  return p;
}

/// The node count of an imported table. A log that names no hosts (its Rank lines cut away)
/// spans ceil(ranks / GPUs per node) nodes of the cluster, said in `warnings`: taking more ranks
/// than a node holds as one node would file an inter-node rate as NVLink's. A log whose hosts hold
/// more ranks each than the cluster's nodes have GPUs ran on another machine: InputError.
void PlaceOnNodes(const NcclTestsRun& run, const std::string& path, int gpus_per_node, CollectiveTable* t,
                  std::vector<std::string>* warnings) {
  const int per_node = std::max(1, gpus_per_node);
  if (!run.hosts_named) {
    t->nodes = (run.ranks + per_node - 1) / per_node;
    if (t->nodes > 1 && warnings) {
      warnings->push_back(fmt::format("{}: {} over {} ranks names no hosts (no 'Rank ... on HOST' lines): taken as {} "
                                      "nodes of the cluster's {} GPUs",
                                      path, ToString(t->op), run.ranks, t->nodes, per_node));
    }
    return;
  }
  if (run.ranks > run.nodes * per_node) {
    throw InputError(fmt::format("{}: {} ranks on {} host(s), but the cluster has {} GPUs per node; expected the "
                                 "--cluster the log ran on (at most {} ranks per host)",
                                 path, run.ranks, run.nodes, per_node, per_node));
  }
}

HardwareProfile ImportNcclTests(const std::vector<std::string>& logs, HardwareProfile p,
                                const std::string& expected_device, std::vector<std::string>* warnings) {
  p.kind = "measured";
  p.date = TodayUtc();  // the import's; the logs do not say when they were measured
  p.source = "nccl-tests logs: " + Join(logs, ", ") + " (other tables: " + p.source + ")";
  p.collective_tables.clear();
  std::vector<std::string> table_files;  // the log each table came from
  const auto presets = PresetNames(PresetKind::kGpu);
  const bool base_is_preset = std::find(presets.begin(), presets.end(), p.gpu) != presets.end();
  double best_n = 0;
  for (const auto& path : logs) {
    for (const auto& run : ReadNcclTestsLog(path)) {
      if (run.ranks < 2) throw InputError(path + ": cannot tell the rank count (no 'Rank' lines and no busbw/algbw ratio)");
      // The log's GPU against the cluster's: by preset where both are presets, else by name
      // (case and an "NVIDIA " prefix aside; older drivers print none).
      const std::string log_preset = PresetForDevice(run.device);
      const bool other_gpu = !log_preset.empty() && base_is_preset
                                 ? log_preset != p.gpu
                                 : BareGpuName(run.device) != BareGpuName(expected_device);
      if (warnings && !expected_device.empty() && !run.device.empty() && other_gpu) {
        warnings->push_back(path + ": measured on '" + run.device + "', but the cluster's GPU is '" + expected_device +
                            "': the profile pairs that GPU's defaults with these collectives");
      }
      CollectiveTable t = ToCollectiveTable(run);
      PlaceOnNodes(run, path, p.gpus_per_node, &t, warnings);
      if (t.bytes_to_seconds.empty()) {
        throw InputError(path + ": " + ToString(t.op) + " has no row with a size > 0 and a time > 0, expected at least "
                         "one measured size");
      }
      // One table per collective, rank and node count: a second one (the same log given twice,
      // or two runs of one test) would be a duplicate the simulator cannot choose between.
      for (std::size_t k = 0; k < p.collective_tables.size(); ++k) {
        const CollectiveTable& prev = p.collective_tables[k];
        if (prev.op == t.op && prev.ranks == t.ranks && prev.nodes == t.nodes) {
          throw InputError(fmt::format("{}: {} over {} ranks on {} node(s) was already read from {}, expected one "
                                       "measurement of each collective, rank and node count",
                                       path, ToString(t.op), t.ranks, t.nodes, table_files[k]));
        }
      }
      table_files.push_back(path);
      if (t.op == CollectiveOp::kAllReduce && t.nodes == 1 && t.bytes_to_seconds.size() >= 2 && run.ranks >= best_n) {
        const AlphaBeta ab = FitAlphaBeta(t.bytes_to_seconds);
        if (ab.beta_Bps > 0) {
          // Bandwidth regime: the largest messages' busbw; latency from the fit.
          const auto& last = t.bytes_to_seconds.back();
          TakeMeasuredIntraAllReduce(last.x / last.y * BusBwFactor(t.op, run.ranks) / 1e9, ab.alpha_s, &p);
          best_n = run.ranks;
        }
      }
      p.collective_tables.push_back(std::move(t));
    }
  }
  // What is written must load: a value out of the profile's ranges is the logs' fault, said here
  // rather than by every later command that reads the profile.
  try {
    ProfileFromJson(ProfileToJson(p), "the imported profile");
  } catch (const InputError& e) {
    throw InputError(Join(logs, ", ") + ": the measurements give a profile outside the accepted ranges (" + e.what() +
                     "), expected nccl-tests results of a real run");
  }
  return p;
}

namespace {

/// profile show's attention part: the efficiencies, their curves by sequence length and head
/// dim, the kernels' head dims and the unfused core's correction.
std::string DescribeAttention(const HardwareProfile& p) {
  std::string s = fmt::format("\nAttention (fused): forward {:.3f}, backward {:.3f} of the bf16 GEMM peak", p.attention_fwd_efficiency,
                              p.attention_bwd_efficiency);
  s += p.attention_head_dim > 0 ? fmt::format(", at head dim {}", p.attention_head_dim) : std::string();
  s += p.attention_tiles.empty() ? std::string(" (the model's head dim as given: no flash kernel's head-dim rounding)\n")
                                 : fmt::format(" ({} kernels' head dims)\n", p.attention_tiles);
  auto curve = [&](const char* what, const std::vector<CurvePoint>& c) {
    if (c.empty()) return;
    s += fmt::format("  {}:", what);
    for (const auto& pt : c) s += fmt::format(" {:g} -> {:.3f}", pt.x, pt.y);
    s += "\n";
  };
  curve("forward factor by sequence length (1 at the reference length)", p.attention_efficiency_vs_seq);
  if (p.attention_bwd_efficiency_vs_seq.empty()) {
    s += "  backward factor by sequence length: the forward's\n";
  } else {
    curve("backward factor by sequence length", p.attention_bwd_efficiency_vs_seq);
  }
  curve("forward factor by head dim", p.attention_fwd_head_dim_factor);
  curve("backward factor by head dim", p.attention_bwd_head_dim_factor);
  s += fmt::format("  unfused attention core (no flash): its GEMM and memory-bound times / {:.3f}\n",
                   p.unfused_attention_core_efficiency);
  return s;
}

}  // namespace

std::string DescribeProfile(const HardwareProfile& p) {
  std::string s;
  s += fmt::format("Profile: {} ({}), GPU/device: {}, date {}\n  source: {}\n", p.kind, "version " + std::to_string(p.version),
                   p.gpu, p.date, p.source);
  if (p.machine) {
    s += fmt::format("  machine: {} ({} per node x {} nodes, {} per device)\n", p.machine->name,
                     p.machine->devices_per_node, p.machine->nodes, FormatGiB(p.machine->memory_bytes_per_device));
  }
  s += fmt::format("\nGEMM: bf16/fp16 peak {} TFLOP/s, max efficiency {:.3f}\n", FormatRate(p.gemm_peak_tflops),
                   p.gemm_max_efficiency);
  for (const auto& r : p.gemm_rates) {
    s += fmt::format("  {}: peak {} TFLOP/s, max efficiency {:.3f}{}\n", ToString(r.precision), FormatRate(r.peak_tflops),
                     r.max_efficiency,
                     r.max_efficiency == p.gemm_max_efficiency
                         ? std::string(" (the shape curve below as is)")
                         : fmt::format(" (the shape curve below scaled by {:.3f} / {:.3f})", r.max_efficiency,
                                       p.gemm_max_efficiency));
  }
  s += "  GFLOP per GEMM -> efficiency (of max)\n";
  for (const auto& pt : p.gemm_efficiency_vs_gflop) s += fmt::format("    {:>12.4g} -> {:.3f}\n", pt.x, pt.y);
  if (!p.gemm_samples.empty()) {
    s += fmt::format("  {} measured shapes (m x n x k -> TFLOP/s, % of peak):\n", p.gemm_samples.size());
    for (const auto& g : p.gemm_samples) {
      s += fmt::format("    {:>6} x {:>6} x {:>6} -> {:.4g} ({:.0f}%)\n", g.m, g.n, g.k, g.tflops, 100 * g.tflops / p.gemm_peak_tflops);
    }
  }
  s += DescribeAttention(p);
  s += fmt::format("\nMemory-bound: peak {:.4g} GB/s; per-kernel overhead {:.2f} us (added to every kernel's time)\n"
                   "  bytes -> efficiency\n",
                   p.hbm_GBps, p.launch_overhead_s * 1e6);
  if (p.memcpy_d2d_GBps > 0) {
    const double share = p.hbm_GBps / p.memcpy_d2d_GBps;
    s += fmt::format("  {:.0f}% of a device-to-device cudaMemcpy in the same run ({:.4g} GB/s read + write){}\n",
                     100 * share, p.memcpy_d2d_GBps,
                     share < kMemoryBoundVsMemcpyTarget ? fmt::format("; under the {:.0f}% expected of the axpy",
                                                                      100 * kMemoryBoundVsMemcpyTarget)
                                                        : "");
  }
  for (const auto& pt : p.memory_efficiency_vs_bytes) s += fmt::format("    {:>12.4g} -> {:.3f}\n", pt.x, pt.y);
  s += fmt::format("\nCollectives: intra-node busbw {:.4g} GB/s, p2p {:.4g} GB/s, NIC {:.4g} GB/s x {} per node\n",
                   p.intra_busbw_GBps, p.p2p_intra_GBps, p.nic_effective_GBps, p.nics_per_node);
  if (p.nvls_allreduce_busbw_GBps > 0) {
    s += fmt::format("  NVLink SHARP all-reduce busbw {:.4g} GB/s [est] (an in-node all-reduce without its own table "
                     "takes the larger of it and the intra-node busbw)\n",
                     p.nvls_allreduce_busbw_GBps);
  }
  s += fmt::format("  latency: base {:.2f} us + {:.2f} us per intra-node step + {:.2f} us per inter-node step\n",
                   p.coll_base_latency_s * 1e6, p.coll_intra_hop_latency_s * 1e6, p.coll_inter_hop_latency_s * 1e6);
  for (const auto& t : p.collective_tables) {
    s += fmt::format("  {} over {} ranks on {} node(s): size -> time (busbw)\n", ToString(t.op), t.ranks, t.nodes);
    for (const auto& pt : t.bytes_to_seconds) {
      s += fmt::format("    {:>12.4g} B -> {:>10} ({:.3g} GB/s)\n", pt.x, FormatSeconds(pt.y),
                       pt.x / pt.y * BusBwFactor(t.op, t.ranks) / 1e9);
    }
  }
  s += fmt::format("\nOverlap: compute slows {:.1f}% beside NVLink-class traffic, {:.1f}% beside network traffic\n",
                   100 * p.overlap_slowdown_nvlink, 100 * p.overlap_slowdown_network);
  s += fmt::format("Framework overhead: {}\n", FormatGiB(p.framework_overhead_bytes));
  return s;
}

}  // namespace shardcast
