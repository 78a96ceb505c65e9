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
#include "cli/plan_common.h"
#include "cli/config_args.h"
#include "cli/mpi_ranks.h"
#include "common/error.h"
#include "common/text.h"
#include "executor/executor.h"
#include "models/loader.h"
#include "report/execute_report.h"

namespace shardcast::cli {
namespace {

struct ExecuteArgs {
  SimulateArgs cfg;
  ExecuteOptions o;
};

/// InputError for a configuration execute does not run (simulate and plan predict it): blocking
/// pipeline transfers, precisions below 16 bits, TP communication overlap, context parallelism,
/// hybrid sharding, ZeRO-3 (FSDP's or DeepSpeed's parameter gathers), the MoE token exchange
/// overlapped with another micro-batch's pass, torchtitan's per-op selective checkpointing,
/// partial recompute (some layers only).
void RefuseWhatExecuteDoesNotRun(const ParallelConfig& c, const SimulateArgs& a) {
  if (c.TorchOpCheckpointing()) {
    throw InputError("command line: --selective-ac-option op: not executed (execute reruns whole modules, not "
                     "parts of GEMMs); simulate and plan model torchtitan's per-op checkpointing");
  }
  if (c.PartialRecompute()) {
    throw InputError(std::string("command line: ") +
                     (c.recompute_block_layers >= 0 ? "--recompute-method block" : "--selective-ac-option") +
                     ": not executed (execute recomputes every layer or none); simulate models partial recompute");
  }
  if (c.moe_a2a_overlap) {
    throw InputError("command line: --overlap-moe-expert-parallel-comm: not executed (execute runs each token "
                     "exchange between its layer's ops, not beside another micro-batch's pass); simulate and plan "
                     "model the overlap");
  }
  if (c.p2p_blocking) {
    // Megatron-Core's 1F1B waits on each send and receive: --framework megatron-core implies it.
    const std::string flag = a.p2p_blocking ? "--p2p-blocking" : "--framework " + a.framework;
    throw InputError("command line: " + flag + ": not supported by execute (its pipeline sends are MPI_Isend on "
                     "their own, as --framework megatron-2022, execute's default, without --p2p-blocking; simulate "
                     "models the blocking transfers of Megatron-Core's 1F1B, DeepSpeed and Megatron-LM 2021-22)");
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
  if (c.hybrid_shard()) {
    throw InputError(fmt::format("command line: --dp-shard {}: hybrid sharding is not executed (execute's "
                                 "data-parallel collectives span every rank); simulate and plan model it",
                                 c.dp_shard));
  }
  if (c.zero_stage >= 3) {
    throw InputError(fmt::format("command line: --zero {}: not executed (execute's program gathers no parameters "
                                 "layer by layer: ZeRO-1/2 only); simulate and plan model ZeRO-3 ({})",
                                 c.zero_stage,
                                 c.zero3_impl == Zero3Impl::kPerLayer ? std::string("FSDP's per-layer gathers")
                                                                      : std::string("--zero3-impl ") + ToString(c.zero3_impl)));
  }
  if (c.pipeline_flushes > 1 && c.flush_grad_reduce && c.dp_cp() > 1) {
    throw InputError(fmt::format("command line: --pipeline-flushes {} with --flush-grad-reduce every (the default): "
                                 "not executed (execute reduces gradients once, after the step's last backward); give "
                                 "--flush-grad-reduce last, or simulate it",
                                 c.pipeline_flushes));
  }
}

/// CPU ranks share their host's memory: a CPU profile gives each of the ranks it was calibrated
/// with (devices_per_node) MemTotal / devices_per_node. More ranks on a host than that (mpirun
/// --oversubscribe, a profile from fewer ranks) get the host's memory over the ranks on the
/// busiest host, so that the check before allocating does not count the RAM twice. Rank 0 says
/// so on stderr. Collective over MPI_COMM_WORLD.
void ShareHostMemory(const HardwareProfile& prof, int rank, Cluster* cl) {
  if (prof.gpu != "cpu") return;
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  int local = 1, busiest = 1;
  MPI_Comm_size(host, &local);
  MPI_Comm_free(&host);
  MPI_Allreduce(&local, &busiest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  // Each CPU rank runs its GEMMs on one core; more ranks than cores time the wait for a core.
  // Each host compares its own ranks with its own cores; rank 0 says the worst.
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  struct {
    int excess, rank;
  } mine{cores > 0 ? local - cores : 0, rank}, worst{0, 0};
  MPI_Allreduce(&mine, &worst, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
  int busy[2] = {local, cores};  // the worst host's ranks and cores, from one of its ranks
  MPI_Bcast(busy, 2, MPI_INT, worst.rank, MPI_COMM_WORLD);
  if (rank == 0 && worst.excess > 0) {
    std::cerr << fmt::format("shardcast: warning: {} ranks on a host of {} cores: oversubscribed, the measured steps "
                             "include waiting for a core and will be slower and more uneven than predicted (run at "
                             "most one rank a core)\n",
                             busy[0], busy[1]);
  }
  if (!prof.machine) return;
  const int measured = prof.machine->devices_per_node;
  if (busiest <= measured || measured <= 0) return;
  const double before = cl->gpu.memory_bytes;
  cl->gpu.memory_bytes = before * measured / busiest;
  if (rank == 0) {
    std::cerr << fmt::format("shardcast: note: {} ranks on one host, whose profile was measured with {}: each rank's "
                             "memory is the host's share, {} (the profile's {} x {} / {})\n",
                             busiest, measured, FormatGiB(cl->gpu.memory_bytes), FormatGiB(before), measured, busiest);
  }
}

/// The command on this rank once MPI runs: loads and checks the inputs (every rank the same
/// checks, so bad input fails them all alike), executes the program, and rank 0 reports.
void ExecuteOnThisRank(const ExecuteArgs& a, int rank, int size) {
  const Model m = LoadModel(a.cfg.model, "--model");
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
  Cluster cl = a.cfg.cluster.empty() ? ClusterFromProfile(prof, a.cfg.profile) : LoadCluster(a.cfg.cluster, "--cluster");
  if (prof.gpu == "cpu" && cl.gpu.name != prof.gpu) {  // CPU ranks: the cluster's GPU memory would be theirs
    throw InputError(fmt::format("command line: --cluster {}: its GPU is {}, but {} measured \"{}\"; expected the "
                                 "machine that runs the program (leave --cluster out: the profile's machine)",
                                 a.cfg.cluster, cl.gpu.name, a.cfg.profile, prof.gpu));
  }
  ShareHostMemory(prof, rank, &cl);
  // The executor's own program: non-blocking pipeline transfers, scatter/gather messages
  // (Megatron-LM 2021-22's pipeline behaviour) unless --framework says otherwise.
  SimulateArgs cfg = a.cfg;
  if (cfg.framework.empty()) cfg.framework = "megatron-2022";
  // fp32/tf32 first: simulate's rule for them (unfused attention) is moot where they do not run.
  if (const std::string pr = ToLower(cfg.prec.precision); pr == "fp32" || pr == "tf32") {
    throw InputError(fmt::format("command line: --precision {}: not executed (execute runs its GEMMs in 16 bits on "
                                 "the cuda backend and fp32 on the cpu one); simulate and plan predict it", pr));
  }
  // The ranks are the GPUs (or CPU workers): a --gpus that disagrees would be ignored.
  if (a.cfg.gpus > 0 && a.cfg.gpus != size) {
    throw InputError(fmt::format("command line: --gpus: got {}, but {} this program; expected --gpus {} or no "
                                 "--gpus (mpirun -np N sets it)",
                                 a.cfg.gpus, size == 1 ? std::string("1 rank runs") : fmt::format("{} ranks run", size),
                                 size));
  }
  // The trace must not replace what this command reads.
  CheckOutputFiles({{"--trace", a.o.trace}}, {a.cfg.model, a.cfg.profile, a.cfg.cluster});
  const ParallelConfig c = BuildConfig(cfg, m, size);
  // Rank 0 writes the report and the trace: an output option given to another rank alone
  // would be dropped without a word.
  std::vector<std::string> settings = ProgramSettings(m, c, a.o);
  settings.push_back("trace=" + (a.o.trace.empty() ? std::string("(none)") : a.o.trace));
  settings.push_back(fmt::format("json={}", a.cfg.json));
  CheckRanksAgree(settings);
  RefuseWhatExecuteDoesNotRun(c, cfg);
  ExecuteReport r = Execute(m, c, cl, prof, a.o);
  if (rank != 0) return;
  if (a.cfg.json) {
    std::cout << WithIntegerBytes(ExecuteJson(r, m, cl, size)).dump(2) << "\n";
  } else {
    WriteExecuteReport(std::cout, r, m, size);
    if (!a.o.trace.empty()) std::cout << "\nTrace of the last step written to " << a.o.trace << "\n";
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
  // Used only to agree that every rank failed (EndAllRanks), so it cannot match the program's
  // own collectives on MPI_COMM_WORLD.
  MPI_Comm agree = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &agree);
  try {
    ExecuteOnThisRank(a, rank, size);
  } catch (const std::exception& e) {
    if (size > 1) EndAllRanks(e, rank, agree);
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
      "Example: mpirun -np 2 shardcast execute --model docs/examples/tiny.json --profile cpu.json --tp 2 --mbs 1 --gbs 4");
  cmd->add_option("--model", a->cfg.model, "model preset name or JSON / HF config.json path")->required();
  cmd->add_option("--profile", a->cfg.profile, "hardware profile of this machine (shardcast calibrate; required)");
  cmd->add_option("--cluster", a->cfg.cluster, "cluster (default: the machine the profile measured)");
  AddConfigOptions(cmd, &a->cfg);
  cmd->add_option("--backend", a->o.backend, "cpu (MPI + Eigen, any TP/PP/DP) or cuda (one GPU, one rank; docs/executor.md)")
      ->transform(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case));
  cmd->add_option("--steps", a->o.steps, "measured steps (median reported)")->check(IntegerRange(1, 1000));
  cmd->add_option("--warmup", a->o.warmup, "warm-up steps")->check(IntegerRange(0, 1000));
  cmd->add_option("--timeout", a->o.timeout_s, "seconds a step may take before all ranks abort")
      ->check(PositiveNumber());
  cmd->add_option("--trace", a->o.trace, "Chrome trace of the last measured step (all ranks)")->check(OutputFile());
  cmd->add_flag("--json", a->cfg.json, "print JSON");
  cmd->callback([a] { RunExecute(*a); });
}

}  // namespace shardcast::cli
