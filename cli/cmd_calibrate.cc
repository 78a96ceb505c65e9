#include <iostream>

#include <filesystem>
#include <algorithm>
#include <fmt/format.h>
#include <mpi.h>

#include "calibrate/calibrate.h"
#include "cli/commands.h"
#include "cli/mpi_ranks.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/text.h"
#include "models/loader.h"

namespace shardcast::cli {
namespace {

struct CalibrateArgs {
  CalibrateOptions o;
  std::vector<std::string> logs;
  std::string import_out = "profile.json", cluster = "dgx-h100", profile_file, model, tps = "1,2,4,8";
  CLI::Option* tps_opt = nullptr;  ///< --tp-values, given when count() > 0
};

void RunCalibrate(const CalibrateArgs& a) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) MPI_Init(nullptr, nullptr);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Used only to agree that every rank failed (EndAllRanks): one message, no abort, where bad
  // input fails them all at the same check.
  MPI_Comm agree = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &agree);
  try {
    CalibrateOptions o = a.o;
    if (!a.model.empty()) {
      std::vector<int> tps;
      for (const auto& t : Split(a.tps, ',')) {
        try {
          tps.push_back(std::stoi(t));
        } catch (const std::exception&) {
          throw InputError("command line: --tp-values: got \"" + t + "\", expected a comma list of positive integers");
        }
        if (tps.back() < 1) throw InputError("command line: --tp-values: got \"" + t + "\", expected positive integers");
      }
      const Model model = LoadModel(a.model, "--model");
      // Megatron-LM's rule: tp divides the attention heads and the query groups; other sizes'
      // shapes do not exist (given ones exit 2, default ones are left out).
      const auto divides = [&model](int tp) {
        return model.num_attention_heads % tp == 0 && model.num_query_groups % tp == 0;
      };
      if (a.tps_opt->count() == 0) std::erase_if(tps, [&](int tp) { return !divides(tp); });
      for (const int tp : tps) {
        if (!divides(tp)) {
          throw InputError(fmt::format("command line: --tp-values: got {}, expected sizes that divide {}'s "
                                       "num_attention_heads = {} and num_query_groups = {}",
                                       tp, model.name, model.num_attention_heads, model.num_query_groups));
        }
      }
      o.model_shapes = ModelGemmShapes(model, tps);
      o.attention_heads = {static_cast<int>(model.num_attention_heads), static_cast<int>(model.num_query_groups),
                           static_cast<int>(model.kv_channels)};
    }
    HardwareProfile p = RunCalibration(o);
    if (rank == 0 && a.o.stop_after.empty()) {
      std::cout << fmt::format("Wrote {} ({} backend, {} rank(s)); `shardcast profile show {}` prints it.\n", a.o.out,
                               a.o.backend, size, a.o.out);
    } else if (rank == 0) {
      std::cout << "Stopped after " << a.o.stop_after << "; partial results in " << a.o.out
                << ".partial.json (continue with --resume).\n";
    }
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

void RegisterCalibrate(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMMs, memory-bound kernels, attention, collectives, overlap) and write a\n"
      "hardware profile. Run one MPI rank per GPU (or per CPU core with --backend cpu).\n"
      "Example: mpirun -np 2 shardcast calibrate --backend cpu --quick --out cpu.json\n"
      "         shardcast calibrate import all_reduce_perf.log --cluster dgx-h100 --out h100.json");
  cmd->add_option("--backend", a->o.backend, "cpu (Eigen + MPI) or cuda (cuBLASLt + NCCL)")
      ->transform(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case));
  cmd->add_flag("--quick", a->o.quick, "reduced sweep, under a minute");
  cmd->add_flag("--resume", a->o.resume, "continue an interrupted sweep from OUT.partial.json");
  cmd->add_option("--out", a->o.out, "profile to write (atomically; required)")->check(OutputFile());
  cmd->add_option("--model", a->model, "also time this model's GEMM shapes (preset name or JSON path)");
  a->tps_opt = cmd->add_option("--tp-values", a->tps,
                               "tensor-parallel sizes for --model's shapes (default: those of 1,2,4,8 that divide the "
                               "model's heads and query groups)");
  cmd->add_flag("--fake-timer", a->o.fake_timer, "deterministic timings from formulas (for tests)")->group("");
  cmd->add_option("--stop-after", a->o.stop_after, "stop after a measurement group (for tests)")->group("");
  cmd->callback([a, cmd] {
    if (!cmd->get_subcommands().empty()) return;
    // No default file: a sweep that silently replaced ./profile.json would lose a profile.
    if (cmd->count("--out") == 0) {
      throw InputError("command line: --out: missing, expected the profile file to write (e.g. --out cpu.json)");
    }
    RunCalibrate(*a);
  });
  auto* imp = cmd->add_subcommand("import", "Build a profile from nccl-tests logs (text or -J JSON).\n"
                                            "Example: shardcast calibrate import ar.log ag.log --cluster dgx-h100 --out h100.json");
  imp->add_option("logs", a->logs, "nccl-tests log files")->required()->expected(1, -1);
  imp->add_option("--cluster", a->cluster,
                  "cluster the logs were measured on; its default profile supplies everything but the collectives")
      ->required();
  imp->add_option("--out", a->import_out, "profile to write (atomically)")->required()->check(OutputFile());
  imp->callback([a] {
    const Cluster cl = LoadCluster(a->cluster, "--cluster");
    std::vector<std::string> warnings;
    std::vector<std::string> inputs = a->logs;
    inputs.push_back(a->cluster);  // a cluster JSON file (a preset name matches no file)
    RefuseOverwritingInput("--out", a->import_out, inputs);
    HardwareProfile p = ImportNcclTests(a->logs, DefaultProfile(cl), cl.gpu.display_name, &warnings);
    for (const auto& w : warnings) std::cerr << "shardcast: warning: " << w << "\n";
    WriteFileAtomic(a->import_out, ProfileToJson(p).dump(2) + "\n");
    std::cout << fmt::format("Wrote {} with {} collective table(s) from {} log(s)\n", a->import_out,
                             p.collective_tables.size(), a->logs.size());
    for (const auto& t : p.collective_tables) {
      const auto& last = t.bytes_to_seconds.back();
      std::cout << fmt::format("  {} over {} ranks on {} node(s): {} sizes, busbw {:.4g} GB/s at {:.4g} B\n", ToString(t.op),
                               t.ranks, t.nodes, t.bytes_to_seconds.size(),
                               last.x / last.y * BusBwFactor(t.op, t.ranks) / 1e9, last.x);
    }
  });
}

void RegisterProfile(CLI::App& app) {
  auto file = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("profile", "Work with hardware profiles.\nExample: shardcast profile show cpu.json");
  cmd->require_subcommand(1);
  auto* show = cmd->add_subcommand("show", "Print a profile readably: peaks vs achieved, curves as tables.\n"
                                           "Example: shardcast profile show cpu.json   (or a cluster preset: "
                                           "shardcast profile show dgx-h100, its built-in default)");
  show->add_option("file", *file, "profile JSON, or a cluster preset name for its built-in default profile")->required();
  show->callback([file] {
    // A name that is no file but a cluster preset shows the default profile simulate would use.
    const auto names = PresetNames(PresetKind::kCluster);
    const bool preset = !std::filesystem::exists(*file) && std::find(names.begin(), names.end(), *file) != names.end();
    std::cout << DescribeProfile(preset ? DefaultProfile(LoadCluster(*file)) : LoadProfile(*file));
  });
}

}  // namespace shardcast::cli
