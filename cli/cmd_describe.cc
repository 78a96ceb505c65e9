#include <iostream>
#include <optional>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "cli/options.h"
#include "common/json_reader.h"
#include "models/loader.h"
#include "planner/describe.h"
#include "report/describe_report.h"

namespace shardcast::cli {
namespace {

struct DescribeArgs {
  std::string model;
  std::string cluster;
  DescribeRequest r;  ///< the sizes, as DescribeModel takes them
  std::string optimizer;
  bool json = false;
};

void RunDescribe(const DescribeArgs& a) {
  const Model m = LoadModel(a.model, "--model");
  std::optional<Cluster> cluster;
  if (!a.cluster.empty()) cluster = LoadCluster(a.cluster, "--cluster");
  DescribeRequest r = a.r;
  r.optimizer = ParseOptimizerImpl(a.optimizer);
  const ModelDescription d = DescribeModel(m, r, cluster ? &*cluster : nullptr);
  if (a.json) {
    std::cout << WithIntegerBytes(DescribeJson(d)).dump(2) << "\n";
  } else {
    WriteDescription(std::cout, d);
  }
}

}  // namespace

void RegisterDescribe(CLI::App& app) {
  auto args = std::make_shared<DescribeArgs>();
  auto* cmd = app.add_subcommand(
      "describe",
      "Describe a model: parameters, FLOPs per token, bytes of training state per parameter, and\n"
      "whether weights, gradients and optimizer state fit per GPU at a TP/PP.\n"
      "Example: shardcast describe --model gpt3-175b --cluster dgx-a100 --gpus 1024 --tp 8 --pp 8");
  cmd->add_option("--model", args->model, "model preset name or JSON / HF config.json path")
      ->required();
  cmd->add_option("--cluster", args->cluster, "cluster preset name or JSON path");
  AddPositive(cmd, "--gpus", args->r.gpus, "number of GPUs (default: the cluster's, else one node)", kMaxGpus);
  AddPositive(cmd, "--tp,--tensor-model-parallel-size", args->r.tp, "tensor-parallel size", kMaxParallelSize);
  AddPositive(cmd, "--pp,--pipeline-model-parallel-size", args->r.pp, "pipeline-parallel size", kMaxParallelSize);
  AddPositive(cmd, "--cp,--context-parallel-size", args->r.cp,
              "context-parallel size (ZeRO shards over the dp x cp ranks)", kMaxParallelSize);
  AddPositive(cmd, "--ep,--expert-model-parallel-size", args->r.ep,
              "MoE: expert-parallel size (the routed experts split over ep ranks)", kMaxParallelSize);
  AddPositive(cmd, "--etp,--expert-tensor-parallel-size", args->r.etp,
              "MoE: expert-tensor-parallel size (default: tp, as Megatron-Core)", kMaxParallelSize);
  AddPositive(cmd, "--seq,--seq-length", args->r.seq, "sequence length (default: the model's)", kMaxSeq);
  AddPositive(cmd, "--gbs,--global-batch-size", args->r.gbs, "global batch, for FLOPs per step", kMaxGlobalBatchSize);
  cmd->add_option("--optimizer", args->optimizer,
                  "whose optimizer keeps the state, as simulate takes it: megatron (default) | deepspeed-zero | "
                  "deepspeed-bf16 (ZeRO-1 only) | fsdp (PyTorch FSDP/FSDP2 as torchtitan runs it; ZeRO-0 is DDP)")
      ->transform(CLI::IsMember({"megatron", "deepspeed-zero", "deepspeed-bf16", "fsdp"}, CLI::ignore_case));
  cmd->add_flag("--json", args->json, "print JSON instead of text");
  cmd->callback([args] { RunDescribe(*args); });
}

}  // namespace shardcast::cli
