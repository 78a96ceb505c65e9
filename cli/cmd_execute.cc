#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <mpi.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/config_args.h"
#include "common/error.h"
#include "common/text.h"
#include "executor/executor.h"
#include "models/loader.h"

namespace shardcast::cli {
namespace {

struct ExecuteArgs {
  SimulateArgs cfg;
  ExecuteOptions o;
};

void Print(const ExecuteReport& r, const Model& m, const ParallelConfig& c, int ranks) {
  const auto& p = r.predicted;
  std::cout << fmt::format("{} on {} rank(s): {}\n", m.name, ranks, c.Summary());
  std::cout << (c.overlap_grad_reduce ? "(gradient buckets reduced on a worker thread, overlapping the backward pass)\n\n"
                                      : "(gradient reduction after the backward pass)\n\n");
  std::cout << fmt::format("{:<24} {:>12} {:>12} {:>8}\n", "", "predicted", "measured", "error");
  std::cout << fmt::format("{:<24} {:>12} {:>12} {:>+7.1f}%\n", "step time", FormatSeconds(p.step_time_s),
                           FormatSeconds(r.measured_step_time_s), 100 * (p.step_time_s / r.measured_step_time_s - 1));
  std::cout << fmt::format("{:<24} {:>11.1f}% {:>11.1f}%\n", "bubble fraction", 100 * p.bubble_fraction,
                           100 * r.measured_bubble_fraction);
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const double meas = s < r.measured_peak_memory_bytes.size() ? r.measured_peak_memory_bytes[s] : 0;
    const double pred = p.stages[s].memory.peak_bytes - p.stages[s].memory.framework_bytes -
                        p.stages[s].memory.comm_buffer_bytes;
    std::cout << fmt::format("{:<24} {:>12} {:>12} {:>+7.1f}%\n", fmt::format("stage {} peak memory", s),
                             FormatGiB(pred), FormatGiB(meas), 100 * (pred / meas - 1));
  }
  std::cout << fmt::format("\nmeasured step times: {}\n", [&] {
    std::string t;
    for (double x : r.step_times_s) t += FormatSeconds(x) + " ";
    return t;
  }());
  // Receives and data-parallel waits measure mostly blocking on other ranks (the bubble row
  // above), so they are listed apart from the ops whose cost the model predicts.
  auto table = [&](bool waits, const char* title) {
    std::cout << title;
    std::cout << fmt::format("  {:<34} {:>6} {:>12} {:>12} {:>12}\n", "op", "count", "predicted", "measured", "error");
    std::size_t shown = 0;
    for (const auto& o : r.ops) {
      if (o.wait != waits || shown++ >= 10) continue;
      std::cout << fmt::format("  {:<34} {:>6} {:>12} {:>12} {:>12}\n", o.name, o.count, FormatSeconds(o.predicted_s),
                               FormatSeconds(o.measured_s), FormatSeconds(o.predicted_s - o.measured_s));
    }
  };
  table(false, "\nOps with the largest absolute error (one rank per stage, summed over the step):\n");
  if (std::any_of(r.ops.begin(), r.ops.end(), [](const OpError& o) { return o.wait; })) {
    table(true, "\nWaits (measured time is mostly blocking on other ranks: the prediction counts a receive's\n"
                "in the bubble and pipeline comm, a data-parallel wait's in exposed data-parallel comm):\n");
  }
}

void RunExecute(const ExecuteArgs& a) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Used only to agree that every rank failed (below), so it cannot match the program's own
  // collectives on MPI_COMM_WORLD.
  MPI_Comm agree = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &agree);
  try {
    const Model m = LoadModel(a.cfg.model);
    if (a.cfg.profile.empty()) {
      throw InputError("command line: --profile: missing, expected the profile of this machine (shardcast calibrate)");
    }
    const HardwareProfile prof = LoadProfile(a.cfg.profile);
    // The prediction must describe the processors that run the program.
    if ((a.o.backend == "cpu") != (prof.gpu == "cpu")) {
      throw InputError(a.cfg.profile + ": /gpu: got \"" + prof.gpu + "\", expected " +
                       (a.o.backend == "cpu" ? std::string("\"cpu\": the cpu backend runs on this machine's CPUs "
                                                           "(shardcast calibrate --backend cpu writes its profile)")
                                             : std::string("a GPU: the cuda backend runs on this machine's GPU "
                                                           "(shardcast calibrate --backend cuda writes its profile)")));
    }
    const Cluster cl = a.cfg.cluster.empty() ? ClusterFromProfile(prof, a.cfg.profile) : LoadCluster(a.cfg.cluster);
    // The executor's own program: non-blocking pipeline transfers, scatter/gather messages
    // (Megatron-LM 2021-22's pipeline behaviour) unless --framework says otherwise.
    SimulateArgs cfg = a.cfg;
    if (cfg.framework.empty()) cfg.framework = "megatron-2022";
    const ParallelConfig c = BuildConfig(cfg, m, size);
    CheckRanksAgree(ProgramSettings(m, c, a.o));
    if (c.p2p_blocking) {
      throw InputError("command line: --p2p-blocking: not supported by execute (its pipeline sends are MPI_Isend "
                       "on their own; simulate models the blocking transfers of DeepSpeed and of Megatron-LM 2021-22)");
    }
    if (c.precision != Precision::kBf16 && c.precision != Precision::kFp16) {
      throw InputError(fmt::format("command line: --precision {}: not executed (execute runs its GEMMs in 16 bits on "
                                   "the cuda backend and fp32 on the cpu one); simulate and plan predict it",
                                   ToString(c.precision)));
    }
    if (c.tp_comm_overlap) {
      throw InputError("command line: --tp-comm-overlap: not supported by execute (its TP collectives are whole NCCL "
                       "or MPI calls); simulate and plan model Transformer Engine's userbuffers overlap");
    }
    if (c.cp > 1) {
      throw InputError(fmt::format("command line: --cp {}: context parallelism is not executed (execute's attention "
                                   "kernel runs whole sequences on one rank); simulate and plan model it",
                                   c.cp));
    }
    ExecuteReport r = Execute(m, c, cl, prof, a.o);
    if (rank == 0) {
      if (a.cfg.json) {
        Json j;
        ParallelConfig pc = c;
        pc.overlap_param_gather = false;
        pc.async_tp_grad_reduce = false;
        j["predicted"] = ResultToJson(r.predicted, m, pc, cl, size);
        j["measured"] = {{"step_time_s", r.measured_step_time_s},
                         {"step_times_s", r.step_times_s},
                         {"bubble_fraction", r.measured_bubble_fraction},
                         {"peak_memory_bytes", r.measured_peak_memory_bytes}};
        j["ops"] = Json::array();
        for (const auto& o : r.ops) {
          j["ops"].push_back({{"name", o.name}, {"count", o.count}, {"predicted_s", o.predicted_s},
                              {"measured_s", o.measured_s}, {"wait", o.wait}});
        }
        j["executed_rank0"] = r.executed;
        std::cout << WithIntegerBytes(j).dump(2) << "\n";
      } else {
        Print(r, m, c, size);
        if (!a.o.trace.empty()) std::cout << "\nTrace of the last step written to " << a.o.trace << "\n";
      }
    }
  } catch (const std::exception& e) {
    if (size > 1) {
      // Fail all ranks together with the message, never a hang. Bad input fails every rank at the
      // same check: they meet at a barrier of their own and exit cleanly, rank 0 printing the
      // message once. A rank failing alone (mid-run) leaves the others in the program's
      // collectives: after 10 s without the barrier, MPI_Abort ends them all.
      const int code = dynamic_cast<const InputError*>(&e) ? 2 : 1;
      if (rank == 0) std::cerr << "shardcast: error: " << e.what() << "\n" << std::flush;
      MPI_Request req = MPI_REQUEST_NULL;
      MPI_Ibarrier(agree, &req);
      int done = 0;
      for (int ms = 0; ms < 10000 && !done; ++ms) {
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!done) {
        // This rank failed alone: say so from here (rank 0 may not be the one that knows).
        if (rank != 0) std::cerr << "shardcast: error: rank " << rank << ": " << e.what() << "\n" << std::flush;
        MPI_Abort(MPI_COMM_WORLD, code);
      }
      MPI_Comm_free(&agree);
      MPI_Finalize();
      std::exit(code);
    }
    MPI_Comm_free(&agree);
    MPI_Finalize();
    throw;
  }
  MPI_Comm_free(&agree);
  MPI_Finalize();
}

}  // namespace

void RegisterExecute(CLI::App& app) {
  auto a = std::make_shared<ExecuteArgs>();
  auto* cmd = app.add_subcommand(
      "execute",
      "Run a configuration's per-rank op program for real and compare with the prediction.\n"
      "Example: mpirun -np 2 shardcast execute --model tiny.json --profile cpu.json --tp 2 --mbs 1 --gbs 4");
  cmd->add_option("--model", a->cfg.model, "model preset name or JSON / HF config.json path")->required();
  cmd->add_option("--profile", a->cfg.profile, "hardware profile of this machine (shardcast calibrate)");
  cmd->add_option("--cluster", a->cfg.cluster, "cluster (default: the machine the profile measured)");
  AddConfigOptions(cmd, &a->cfg);
  cmd->add_option("--backend", a->o.backend, "cpu (MPI + Eigen, any TP/PP/DP) or cuda (one GPU, one rank; docs/executor.md)")
      ->transform(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case));
  cmd->add_option("--steps", a->o.steps, "measured steps (median reported)")->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup", a->o.warmup, "warm-up steps")->check(CLI::Range(0, 1000));
  cmd->add_option("--timeout", a->o.timeout_s, "seconds a step may take before all ranks abort")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--trace", a->o.trace, "Chrome trace of the last measured step (all ranks)")->check(OutputFile());
  cmd->add_flag("--json", a->cfg.json, "print JSON");
  cmd->callback([a] { RunExecute(*a); });
}

}  // namespace shardcast::cli
