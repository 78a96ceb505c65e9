#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include <Eigen/Dense>
#include <gtest/gtest.h>

#include "executor/executor.h"
#include "models/loader.h"
#include "simulator/program.h"
#include "simulator/simulate.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

const char* kTinyJson = R"({"name": "tiny-gpt", "num_layers": 4, "hidden_size": 256,
    "ffn_hidden_size": 1024, "num_attention_heads": 4, "vocab_size": 2048, "seq_length": 128,
    "normalization": "layernorm", "activation": "gelu", "position_embedding": "learned",
    "tie_embeddings": true, "source": "test"})";

Model Tiny() { return ModelFromJson(Json::parse(kTinyJson), "tiny.json"); }

/// Tiny with routed experts in every layer: 4 experts of FFN 512, 2 a token.
Json TinyMoeJson() {
  Json j = Json::parse(kTinyJson);
  j["num_experts"] = 4;
  j["moe_router_topk"] = 2;
  j["moe_ffn_hidden_size"] = 512;
  return j;
}

// A quarter of tiny's width and half its sequence, for the runs under mpirun whose output is
// checked for structure only (the sanitizer build runs Eigen's GEMMs about ten times slower).
const char* kMiniJson = R"({"name": "mini-gpt", "num_layers": 4, "hidden_size": 128,
    "ffn_hidden_size": 512, "num_attention_heads": 4, "vocab_size": 1024, "seq_length": 64,
    "normalization": "layernorm", "activation": "gelu", "position_embedding": "learned",
    "tie_embeddings": true, "source": "test"})";

TEST(Program, FollowsTheSimulatorsScheduleOnEveryStage) {
  const Model m = Tiny();
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  for (Schedule s : {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
    ParallelConfig c;
    c.tp = 2;
    c.pp = 2;
    c.dp = 1;
    c.vp = s == Schedule::kInterleaved ? 2 : 1;
    c.schedule = s;
    c.micro_batch_size = 1;
    c.global_batch_size = 4;
    c.seq_length = 128;
    SimulateOptions o;
    o.keep_graph = true;
    const SimulationResult r = Simulate(m, c, cl, 4, prof, o);
    ASSERT_TRUE(r.feasible);
    const CostModel cm = BuildCostModel(m, c, cl, prof);
    const PipelineSchedule sched = MakeSchedule(s, 2, 4, static_cast<int>(c.vp));
    for (int stage = 0; stage < 2; ++stage) {
      const RankProgram prog = BuildRankProgram(m, c, cm, sched, prof, stage);
      // Items in the order the program runs their compute ops ...
      std::vector<std::tuple<int, int, int>> from_program;
      for (const auto& x : prog.ops) {
        if (x.kind != ProgKind::kCompute) continue;
        auto key = std::make_tuple(static_cast<int>(x.item), x.microbatch, x.chunk);
        if (from_program.empty() || from_program.back() != key) from_program.push_back(key);
      }
      // ... equal the compute-stream tasks the simulator scheduled on this stage.
      std::vector<std::tuple<int, int, int>> from_sim;
      const auto& tasks = r.graph.nodes();
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        const TaskNode& t = tasks[i];
        if (t.device != stage || t.stream != 0 || t.type == TaskType::kOptimizer) continue;
        const int kind = t.type == TaskType::kForward ? 0 : t.type == TaskType::kBackward ? 1 : 2;
        auto key = std::make_tuple(kind, t.microbatch, t.chunk);
        if (from_sim.empty() || from_sim.back() != key) from_sim.push_back(key);
      }
      EXPECT_EQ(from_program, from_sim) << ToString(s) << " stage " << stage;
      // Every forward chunk allocates what its backward frees.
      double held = 0;
      for (const auto& x : prog.ops) {
        if (x.kind == ProgKind::kAlloc) held += x.bytes;
        if (x.kind == ProgKind::kFree) held -= x.bytes;
      }
      EXPECT_NEAR(held, 0.0, 1e-6);
      // Tied embeddings: the first and the last stage all-reduce the embedding gradient once,
      // (V h / tp) x the gradient bytes per parameter, before the optimizer.
      int syncs = 0;
      for (std::size_t i = 0; i < prog.ops.size(); ++i) {
        const ProgOp& x = prog.ops[i];
        if (x.kind != ProgKind::kEmbeddingCollective) continue;
        ++syncs;
        EXPECT_DOUBLE_EQ(x.bytes, 2048.0 * 256 / 2 * GradReduceBytesPerParam(c));
        ASSERT_LT(i + 1, prog.ops.size());
        EXPECT_EQ(prog.ops[i + 1].kind, ProgKind::kOptimizer);
      }
      EXPECT_EQ(syncs, 1) << ToString(s) << " stage " << stage;
      // Scatter/gather: every received activation (gradient) is re-assembled by a TP all-gather,
      // as the simulator charges it: 4 micro-batches, forward receives on stage 1 only and
      // gradient receives on stage 0 only at PP 2 without interleaving.
      if (s != Schedule::kInterleaved) {
        int fwd_gathers = 0, grad_gathers = 0;
        for (const auto& x : prog.ops) {
          if (x.kind != ProgKind::kTpCollective) continue;
          fwd_gathers += x.op.name == "pp_recv_all_gather";
          grad_gathers += x.op.name == "pp_recv_grad_all_gather";
        }
        EXPECT_EQ(fwd_gathers, stage == 1 ? 4 : 0) << ToString(s);
        EXPECT_EQ(grad_gathers, stage == 0 ? 4 : 0) << ToString(s);
      }
    }
  }
}

// ZeRO-2 keeps a shard of the gradients: the program reduces the buckets after every
// micro-batch's backward, as the simulator schedules them (as many reduction tasks as the
// program's gradient collectives), overlapped or inline.
TEST(Program, ZeroTwoReducesAfterEveryMicroBatch) {
  const Model m = Tiny();
  const Cluster cl = LoadCluster("dgx-a100");
  const HardwareProfile prof = DefaultProfile(cl);
  for (const auto& [overlap, tp] : {std::pair{true, 1}, std::pair{false, 1}, std::pair{true, 2}, std::pair{false, 2}}) {
    ParallelConfig c;
    c.tp = tp;
    c.sequence_parallel = tp > 1;  // TP collectives inside the backward, between its compute ops
    c.dp = 2;
    c.zero_stage = 2;
    c.overlap_grad_reduce = overlap;
    c.micro_batch_size = 1;
    c.global_batch_size = 8;
    c.seq_length = 128;
    SimulateOptions o;
    o.keep_graph = true;
    const SimulationResult r = Simulate(m, c, cl, 2 * tp, prof, o);
    ASSERT_TRUE(r.feasible);
    const CostModel cm = BuildCostModel(m, c, cl, prof);
    const RankProgram prog = BuildRankProgram(m, c, cm, MakeSchedule(Schedule::k1F1B, 1, 4, 1), prof, 0);
    int grad_collectives = 0, reductions = 0;
    for (std::size_t i = 0; i < prog.ops.size(); ++i) {
      const ProgOp& x = prog.ops[i];
      if (x.kind != ProgKind::kDpCollective || x.op.name.rfind("dp_grad", 0) != 0) continue;
      ++grad_collectives;
      EXPECT_EQ(x.async, overlap);
      // A reduction starts right after a backward's last op (compute or its TP collective) and
      // none of that backward's ops follows it before the next forward.
      const ProgOp& prev = prog.ops[i - 1];
      if (prev.kind == ProgKind::kDpCollective) continue;
      ++reductions;
      EXPECT_EQ(prev.item, ItemKind::kBackward);
      for (std::size_t j = i + 1; j < prog.ops.size() && prog.ops[j].item == ItemKind::kBackward; ++j) {
        const bool same_pass = prog.ops[j].kind == ProgKind::kCompute || prog.ops[j].kind == ProgKind::kTpCollective;
        EXPECT_FALSE(same_pass && prog.ops[j].microbatch == prev.microbatch) << "tp " << tp << " op " << j;
      }
    }
    int sim_reduces = 0;
    for (const TaskNode& t : r.graph.nodes()) sim_reduces += t.device == 0 && t.type == TaskType::kDpReduce;
    EXPECT_EQ(reductions, 4) << overlap << " tp " << tp;  // one reduction per micro-batch
    EXPECT_EQ(grad_collectives, sim_reduces) << overlap << " tp " << tp;
  }
}

// A model whose chunks mix dense and MoE layers (one leading dense layer, then every other layer
// MoE) with a multi-token-prediction module: every item of the program runs the ops of its
// chunk's own layers, so the ops of a forward (backward, W) item add up to its ChunkCost pass
// time, and each MoE layer runs the router once a pass. With bf16 edge layers under FP8 (the
// simulator predicts it; execute refuses the precision) the sums hold as well.
TEST(Program, RunsEachLayersOwnOps) {
  Json j = TinyMoeJson();
  j["num_layers"] = 6;
  j["moe_shared_expert_intermediate_size"] = 256;
  j["moe_first_k_dense_layers"] = 1;
  j["moe_layer_step"] = 2;
  j["mtp_num_layers"] = 1;
  const Model m = ModelFromJson(j, "tiny-moe.json");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  for (const bool fp8 : {false, true}) {
    for (Schedule s : {Schedule::k1F1B, Schedule::kInterleaved, Schedule::kZbH1}) {
      ParallelConfig c;
      c.tp = 2;
      c.sequence_parallel = true;
      c.pp = 3;
      c.vp = s == Schedule::kInterleaved ? 2 : 1;
      c.schedule = s;
      c.recompute = Recompute::kFull;
      c.micro_batch_size = 1;
      c.global_batch_size = 3;
      c.seq_length = 128;
      if (fp8) {
        c.precision = Precision::kFp8;
        c.bf16_layers_start = c.bf16_layers_end = 1;
      }
      const CostModel cm = BuildCostModel(m, c, cl, prof);
      ASSERT_FALSE(cm.moe_layer_ops.empty());
      ASSERT_EQ(cm.moe_bf16_layer_ops.empty(), !fp8);
      const PipelineSchedule sched = MakeSchedule(s, 3, 3, static_cast<int>(c.vp));
      int routers = 0;
      for (int stage = 0; stage < 3; ++stage) {
        const RankProgram prog = BuildRankProgram(m, c, cm, sched, prof, stage);
        std::map<std::tuple<int, int, int>, double> item_s;  // (item, micro-batch, chunk) -> seconds
        for (const ProgOp& x : prog.ops) {
          if (x.kind != ProgKind::kCompute && x.kind != ProgKind::kTpCollective && x.kind != ProgKind::kEtpCollective) {
            continue;
          }
          item_s[{static_cast<int>(x.item), x.microbatch, x.chunk}] += x.op.duration_s;
          routers += x.op.name == "moe_router" && x.item == ItemKind::kForward;
        }
        for (const auto& [key, secs] : item_s) {
          const ChunkCost& cc = cm.chunks[static_cast<std::size_t>(stage)][static_cast<std::size_t>(std::get<2>(key))];
          const auto kind = static_cast<ItemKind>(std::get<0>(key));
          const double want = kind == ItemKind::kForward ? cc.fwd_s
                              : kind == ItemKind::kWeight
                                  ? cc.bwd_weight_s
                                  : cc.recompute_s + cc.bwd_input_s + (sched.split_weight ? 0.0 : cc.bwd_weight_s);
          EXPECT_NEAR(secs, want, 1e-12 + 1e-9 * want) << ToString(s) << " fp8 " << fp8 << " stage " << stage
                                                        << " item " << std::get<0>(key) << " chunk " << std::get<2>(key);
        }
      }
      // MoE layers 1, 3, 5 and the MTP module's layer, once per micro-batch.
      EXPECT_EQ(routers, 4 * 3) << ToString(s) << " fp8 " << fp8;
    }
  }
}

// Expert parallelism (ep 2 of 4 data-parallel ranks, etp 1): each MoE layer's dispatch and
// combine, forward and backward, are expert-parallel collectives; the gradients and the ZeRO-1
// parameter gather are split into the dense share over the data-parallel group and the routed
// experts' share over the expert-data-parallel group, as the simulator serializes them; each
// item's ops still add up to its chunk's pass times.
TEST(Program, ExpertParallelGroups) {
  const Model m = ModelFromJson(TinyMoeJson(), "tiny-moe.json");
  const Cluster cl = LoadCluster("dgx-h100");
  const HardwareProfile prof = DefaultProfile(cl);
  ParallelConfig c;
  c.dp = 4;
  c.ep = 2;
  c.zero_stage = 1;
  c.micro_batch_size = 1;
  c.global_batch_size = 8;
  c.seq_length = 128;
  const CostModel cm = BuildCostModel(m, c, cl, prof);
  const RankProgram prog = BuildRankProgram(m, c, cm, MakeSchedule(Schedule::k1F1B, 1, 2, 1), prof, 0);
  const ChunkCost& cc = cm.chunks[0][0];
  ASSERT_GT(cc.expert_params_per_gpu, 0.0);
  int exchanges = 0;
  double dense_grads = 0, expert_grads = 0, dense_gather = 0, expert_gather = 0;
  std::map<std::pair<int, int>, double> item_s;  // (item, micro-batch) -> seconds
  for (const ProgOp& x : prog.ops) {
    if (x.kind == ProgKind::kEpCollective) {
      ++exchanges;
      EXPECT_TRUE(x.op.name.rfind("moe_dispatch", 0) == 0 || x.op.name.rfind("moe_combine", 0) == 0) << x.op.name;
    }
    if (x.kind == ProgKind::kCompute || x.kind == ProgKind::kTpCollective || x.kind == ProgKind::kEpCollective) {
      item_s[{static_cast<int>(x.item), x.microbatch}] += x.op.duration_s;
    }
    if (x.kind != ProgKind::kDpCollective) continue;
    const bool gather = x.op.collective == CollectiveOp::kAllGather;
    (gather ? (x.experts ? expert_gather : dense_gather) : (x.experts ? expert_grads : dense_grads)) += x.bytes;
  }
  EXPECT_EQ(exchanges, 4 * 2 * 4);  // 4 MoE layers, 2 micro-batches, dispatch and combine both ways
  const double dense = cc.params_per_gpu - cc.expert_params_per_gpu;
  EXPECT_NEAR(dense_grads, dense * GradReduceBytesPerParam(c), 1e-6 * dense_grads);
  EXPECT_NEAR(expert_grads, cc.expert_params_per_gpu * GradReduceBytesPerParam(c), 1e-6 * expert_grads);
  EXPECT_NEAR(dense_gather, dense * c.param_gather_bytes, 1e-6 * dense_gather);
  EXPECT_NEAR(expert_gather, cc.expert_params_per_gpu * c.param_gather_bytes, 1e-6 * expert_gather);
  // The optimizer shards the experts' state over the expert-data-parallel ranks (2 here, dp 4),
  // as the simulator's optimizer step does.
  ASSERT_NE(OptimizerTime(prof, c, cc.params_per_gpu, cc.expert_params_per_gpu), OptimizerTime(prof, c, cc.params_per_gpu));
  for (const ProgOp& x : prog.ops) {
    if (x.kind != ProgKind::kOptimizer) continue;
    EXPECT_DOUBLE_EQ(x.op.duration_s, OptimizerTime(prof, c, cc.params_per_gpu, cc.expert_params_per_gpu));
    EXPECT_DOUBLE_EQ(x.bytes, OptimizerBytes(c, cc.params_per_gpu, cc.expert_params_per_gpu));
  }
  for (const auto& [key, secs] : item_s) {
    const double want = key.first == static_cast<int>(ItemKind::kForward) ? cc.fwd_s
                                                                          : cc.recompute_s + cc.bwd_input_s + cc.bwd_weight_s;
    EXPECT_NEAR(secs, want, 1e-12 + 1e-9 * want) << key.first << " mb " << key.second;
  }
}

TEST(ShardedMath, TensorParallelMlpEqualsUnsharded) {
  // Megatron-LM's MLP: Y = GeLU(X A) B with A split by columns and B by rows over t ranks; the
  // partial outputs summed (the all-reduce) equal the unsharded result.
  const int tokens = 8, h = 16, f = 64, t = 4;
  Eigen::MatrixXd x = Eigen::MatrixXd::Random(tokens, h), a = Eigen::MatrixXd::Random(h, f),
                  b = Eigen::MatrixXd::Random(f, h);
  auto gelu = [](Eigen::MatrixXd z) {
    return z.unaryExpr([](double v) { return 0.5 * v * (1 + std::tanh(0.7978845608 * (v + 0.044715 * v * v * v))); });
  };
  const Eigen::MatrixXd full = gelu(x * a) * b;
  Eigen::MatrixXd sum = Eigen::MatrixXd::Zero(tokens, h);
  for (int r = 0; r < t; ++r) {
    const Eigen::MatrixXd ar = a.middleCols(r * f / t, f / t);
    const Eigen::MatrixXd br = b.middleRows(r * f / t, f / t);
    sum += gelu(x * ar) * br;  // each rank's partial output; the all-reduce sums them
  }
  EXPECT_LT((sum - full).cwiseAbs().maxCoeff(), 1e-12);
}

TEST(ShardedMath, DataParallelReductionSumsGradients) {
  // Linear layer Y = X W, loss gradient dY: dW = X^T dY over the batch. Split the batch over d
  // replicas; the sum of the replicas' dW (the data-parallel all-reduce) equals the full dW.
  const int batch = 12, h = 5, d = 3;
  Eigen::MatrixXd x = Eigen::MatrixXd::Random(batch, h), dy = Eigen::MatrixXd::Random(batch, h);
  const Eigen::MatrixXd full = x.transpose() * dy;
  Eigen::MatrixXd sum = Eigen::MatrixXd::Zero(h, h);
  for (int r = 0; r < d; ++r) sum += x.middleRows(r * batch / d, batch / d).transpose() * dy.middleRows(r * batch / d, batch / d);
  EXPECT_LT((sum - full).cwiseAbs().maxCoeff(), 1e-12);
}

/// Runs `cmd` with stdout to `out` (or discarded) and stderr discarded; returns the exit code.
int Shell(const std::string& cmd, const std::string& out = "/dev/null") {
  const int st = std::system((cmd + " > " + out + " 2>/dev/null").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(ExecuteCpu, CalibrateThenExecuteTpPpDpOnTwoRanks) {
  const auto dir = shardcast::testing::TestTempDir();
  std::filesystem::create_directories(dir);
  const std::string prof = (dir / "exec_profile.json").string(), model = (dir / "tiny.json").string();
  const std::string mpirun = "timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 " + std::string(SHARDCAST_BINARY);
  testing::WriteTemp("tiny.json", kTinyJson);
  const std::string mini = testing::WriteTemp("mini.json", kMiniJson);
  ASSERT_EQ(Shell(mpirun + " calibrate --backend cpu --quick --model " + model + " --tp-values 1,2 --out " + prof), 0);
  for (const std::string cfg : {"--tp 2", "--pp 2", ""}) {
    const std::string out = (dir / "exec.json").string();
    const int rc = Shell(mpirun + " execute --model " + mini + " --profile " + prof + " " + cfg +
                             " --mbs 1 --gbs 8 --steps 2 --warmup 1 --json",
                         out);
    ASSERT_EQ(rc, 0) << cfg;
    const Json j = ReadJsonFile(out);
    const double pred = j["predicted"]["step_time_s"].get<double>();
    const double meas = j["measured"]["step_time_s"].get<double>();
    // Structure only: how close the prediction comes depends on what else the machine runs, so
    // the accuracy is measured by bench/execute_loop.sh and reported in docs/accuracy.md.
    EXPECT_GT(pred, 0);
    EXPECT_GT(meas, 0);
    EXPECT_TRUE(std::isfinite(pred) && std::isfinite(meas));
    EXPECT_EQ(j["predicted"]["config"]["tp"].get<int>() * j["predicted"]["config"]["pp"].get<int>() *
                  j["predicted"]["config"]["dp"].get<int>(),
              2)
        << cfg;
    EXPECT_GT(j["executed_rank0"].size(), 100u);
    EXPECT_FALSE(j["ops"].empty());
    // --steps 2: the median of two is their mean.
    const auto& steps = j["measured"]["step_times_s"];
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_DOUBLE_EQ(meas, 0.5 * (steps[0].get<double>() + steps[1].get<double>()));
    // Pipeline receives are waits (listed apart); the GEMMs are not.
    for (const auto& o : j["ops"]) {
      const std::string name = o["name"];
      EXPECT_EQ(o["wait"].get<bool>(), name == "pp_recv" || name == "dp_wait" || name == "embedding_grad_all_reduce")
          << name;
    }
    // The tied embedding's gradient all-reduce between the two stages runs where pp > 1.
    bool embedding_sync = false;
    for (const auto& o : j["ops"]) embedding_sync = embedding_sync || o["name"] == "embedding_grad_all_reduce";
    EXPECT_EQ(embedding_sync, cfg == "--pp 2") << cfg;
  }
  // The mini model with routed experts: expert parallelism over the two ranks exchanges the
  // tokens with MPI all-to-alls (moe_dispatch, moe_combine); expert tensor parallelism (etp = tp
  // = 2) gathers an expert's tokens over its group (moe_etp_all_gather).
  Json moe = Json::parse(kMiniJson);
  moe["num_experts"] = 4;
  moe["moe_router_topk"] = 2;
  moe["moe_ffn_hidden_size"] = 256;
  const std::string mini_moe = testing::WriteTemp("mini_moe.json", moe.dump());
  for (const auto& [cfg, exchange] : {std::pair<std::string, std::string>{"--ep 2", "moe_dispatch"},
                                      {"--tp 2 --sequence-parallel", "moe_etp_all_gather"}}) {
    const std::string out = (dir / "exec_moe.json").string();
    ASSERT_EQ(Shell(mpirun + " execute --model " + mini_moe + " --profile " + prof + " " + cfg +
                        " --mbs 1 --gbs 8 --steps 1 --warmup 0 --json",
                    out),
              0)
        << cfg;
    const Json j = ReadJsonFile(out);
    std::set<std::string> names;
    for (const auto& o : j["ops"]) names.insert(o["name"].get<std::string>());
    EXPECT_TRUE(names.count("moe_router")) << cfg;
    EXPECT_TRUE(names.count("moe_expert_up")) << cfg;
    EXPECT_TRUE(names.count(exchange)) << cfg;
  }
}

// A CPU profile for the tests that exit before any op runs: the quick sweep with the fake timer
// (deterministic, no timing), written once per test process (ctest runs each test in its own).
std::string FakeTimerCpuProfile() {
  const std::string prof = (shardcast::testing::TestTempDir() / "fake_timer_cpu_profile.json").string();
  if (!std::filesystem::exists(prof)) {
    const int rc = Shell("timeout 300 mpirun --allow-run-as-root --oversubscribe -np 1 " + std::string(SHARDCAST_BINARY) +
                             " calibrate --backend cpu --quick --fake-timer --out " + prof,
                         (shardcast::testing::TestTempDir() / "fake_timer_calibrate.txt").string());
    EXPECT_EQ(rc, 0) << "calibrate --backend cpu --quick --fake-timer";
  }
  return prof;
}

TEST(ExecuteCpu, WrongRankCountFailsFastWithAMessage) {
  const std::string prof = FakeTimerCpuProfile();
  const auto r = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                                     std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " + prof +
                                     " --tp 4 --mbs 1 --gbs 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "timed out: hung";
  EXPECT_NE(r.out.find("mpirun -np: got 2 ranks, expected a multiple of tp*pp = 4*1 = 4"), std::string::npos) << r.out;
}

// Issue 14 (7): an MPMD launch with other flags per rank crashed in Open MPI's allreduce or hung
// until the watchdog. The ranks compare their settings first and all exit 2 saying how they differ.
TEST(ExecuteCpu, RanksWithDifferentFlagsExitTwoSayingHow) {
  const std::string prof = FakeTimerCpuProfile();
  const std::string model = testing::WriteTemp("tiny.json", kTinyJson);
  const std::string bin = std::string(SHARDCAST_BINARY) + " execute --model " + model + " --profile " + prof +
                          " --mbs 1 --steps 1 --warmup 0 ";
  const std::string mpmd = "timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 " + bin + "--tp 2 --gbs 4 : -np 1 " +
                           bin + "--pp 2 --gbs 4";
  const auto r = testing::RunCommand(mpmd);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("ranks disagree on the configuration: rank 1 differs from rank 0: tp=1 (rank 0: tp=2); "
                       "pp=2 (rank 0: pp=1)"),
            std::string::npos)
      << r.out;
  // Output options too: rank 0 writes, so a --trace given to rank 1 alone would be dropped.
  const std::string trace = (testing::TestTempDir() / "rank1_trace.json").string();
  const auto g = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 " + bin +
                                     "--gbs 4 : -np 1 " + bin + "--gbs 8 --trace " + trace);
  EXPECT_EQ(g.exit_code, 2) << g.out;
  EXPECT_NE(g.out.find("global_batch_size=8 (rank 0: global_batch_size=4); trace=" + trace + " (rank 0: trace=(none))"),
            std::string::npos)
      << g.out;
}

TEST(Execute, SettingsDifferenceNamesEachField) {
  const Model m = Tiny();
  ParallelConfig a;
  a.dp = 2;
  a.global_batch_size = 4;
  ParallelConfig b = a;
  ExecuteOptions o;
  EXPECT_EQ(DescribeSettingsDifference(ProgramSettings(m, a, o), ProgramSettings(m, b, o), 1), "");
  b.recompute = Recompute::kFull;
  EXPECT_EQ(DescribeSettingsDifference(ProgramSettings(m, a, o), ProgramSettings(m, b, o), 3),
            "rank 3 differs from rank 0: recompute=full (rank 0: recompute=none)");
  ParallelConfig z = a;
  z.zero3_impl = Zero3Impl::kDeepSpeed2021;
  EXPECT_EQ(DescribeSettingsDifference(ProgramSettings(m, a, o), ProgramSettings(m, z, o), 1),
            "rank 1 differs from rank 0: zero3_impl=deepspeed-2021 (rank 0: zero3_impl=per-layer)");
}

// execute's program gathers no parameters layer by layer: ZeRO-3 (FSDP's, DeepSpeed's) is
// refused, not run as ZeRO-2; so are fp32, the overlapped MoE token exchange and a gradient
// reduce after every pipeline flush.
TEST(ExecuteCpu, DeepSpeedZero3IsRefused) {
  const std::string prof = FakeTimerCpuProfile();
  for (const std::string impl : {"deepspeed-2021", "deepspeed"}) {
    const auto r = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                                       std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " + prof +
                                       " --mbs 1 --gbs 2 --zero 3 --zero3-impl " + impl);
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("--zero 3: not executed (execute's program gathers no parameters layer by layer: ZeRO-1/2 "
                         "only); simulate and plan model ZeRO-3 (--zero3-impl " + impl + ")"),
              std::string::npos)
        << r.out;
  }
  // FSDP's per-layer ZeRO-3 too: the program has no parameter gathers to run.
  const auto fsdp = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                                        std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " + prof +
                                        " --mbs 1 --gbs 2 --zero 3");
  EXPECT_EQ(fsdp.exit_code, 2) << fsdp.out;
  EXPECT_NE(fsdp.out.find("--zero 3: not executed"), std::string::npos) << fsdp.out;
  EXPECT_NE(fsdp.out.find("(FSDP's per-layer gathers)"), std::string::npos) << fsdp.out;
  // fp32 is refused as not executed, before simulate's flash-attention rule for it could apply.
  const auto fp32 = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 " +
                                        std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " + prof +
                                        " --mbs 1 --gbs 1 --precision fp32");
  EXPECT_EQ(fp32.exit_code, 2) << fp32.out;
  EXPECT_NE(fp32.out.find("--precision fp32: not executed"), std::string::npos) << fp32.out;
  // The token exchange overlapped with another micro-batch's pass: execute runs it in its layer.
  const auto ep = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                                      std::string(SHARDCAST_BINARY) + " execute --model mixtral-8x7b --profile " +
                                      prof + " --mbs 1 --gbs 2 --ep 2 --overlap-moe-expert-parallel-comm");
  EXPECT_EQ(ep.exit_code, 2) << ep.out;
  EXPECT_NE(ep.out.find("--overlap-moe-expert-parallel-comm: not executed"), std::string::npos) << ep.out;
  // Megatron-Core's 1F1B waits on each send and receive: the refusal names the flag given.
  const auto mcore = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 " +
                                         std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " + prof +
                                         " --pp 2 --mbs 1 --gbs 2 --framework megatron-core");
  EXPECT_EQ(mcore.exit_code, 2) << mcore.out;
  EXPECT_NE(mcore.out.find("command line: --framework megatron-core: not supported by execute"), std::string::npos)
      << mcore.out;
  // A reduce after every pipeline flush (simulate's default) is not what execute's program runs.
  const auto flushes = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 4 " +
                                           std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " +
                                           prof + " --pp 2 --mbs 1 --gbs 4 --pipeline-flushes 2");
  EXPECT_EQ(flushes.exit_code, 2) << flushes.out;
  EXPECT_NE(flushes.out.find("--pipeline-flushes 2 with --flush-grad-reduce every (the default): not executed"),
            std::string::npos)
      << flushes.out;
  // Four ranks on a host whose profile was measured with one share its memory: a quarter each.
  EXPECT_NE(flushes.out.find("note: 4 ranks on one host, whose profile was measured with 1: each rank's memory is the "
                             "host's share"),
            std::string::npos)
      << flushes.out;
}

// --gpus must be the rank count (it used to be ignored), and --trace may not replace an input.
TEST(ExecuteCpu, GpusAndTraceAreChecked) {
  const std::string prof = FakeTimerCpuProfile();
  const std::string model = testing::WriteTemp("tiny.json", kTinyJson);
  const std::string run = "timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 " + std::string(SHARDCAST_BINARY) +
                          " execute --model " + model + " --profile " + prof + " --mbs 1 --gbs 1 --steps 1 --warmup 0";
  const auto gpus = testing::RunCommand(run + " --gpus 4");
  EXPECT_EQ(gpus.exit_code, 2) << gpus.out;
  EXPECT_NE(gpus.out.find("--gpus: got 4, but 1 rank runs this program; expected --gpus 1 or no --gpus"),
            std::string::npos)
      << gpus.out;
  // The profile here; the model and --cluster are checked by the same call (CheckOutputFiles).
  const std::string before = ReadTextFile(prof);
  const auto trace = testing::RunCommand(run + " --trace " + prof);
  EXPECT_EQ(trace.exit_code, 2) << trace.out;
  EXPECT_NE(trace.out.find("--trace: got " + prof + ", which is an input of this command"), std::string::npos)
      << trace.out;
  EXPECT_EQ(ReadTextFile(prof), before);
  // The documented example model is the tests' tiny GPT.
  const Model example = LoadModel(testing::FixturesDir() + "/../../docs/examples/tiny.json");
  const Model tiny = Tiny();
  EXPECT_EQ(example.Parameters().total, tiny.Parameters().total);
  EXPECT_EQ(example.seq_length, tiny.seq_length);
}

// A GPU's profile cannot predict a run on CPU ranks: refused before anything runs.
TEST(ExecuteCpu, GpuProfileOnCpuRanksIsRefused) {
  const std::string gpu_prof = testing::WriteTemp("h100_profile.json", ProfileToJson(DefaultProfile(LoadCluster("dgx-h100"))).dump());
  const auto r = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 " +
                                     std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " + gpu_prof +
                                     " --mbs 1 --gbs 1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(gpu_prof + ": /gpu: got \"h100-sxm\", expected \"cpu\""), std::string::npos) << r.out;
  // A GPU cluster beside a CPU profile would give the CPU ranks an H100's memory.
  const std::string cpu_prof = FakeTimerCpuProfile();
  const auto c = testing::RunCommand("timeout 60 mpirun --allow-run-as-root --oversubscribe -np 1 " +
                                     std::string(SHARDCAST_BINARY) + " execute --model gpt3-125m --profile " + cpu_prof +
                                     " --cluster dgx-h100 --mbs 1 --gbs 1");
  EXPECT_EQ(c.exit_code, 2) << c.out;
  EXPECT_NE(c.out.find("command line: --cluster dgx-h100: its GPU is h100-sxm, but " + cpu_prof + " measured \"cpu\""),
            std::string::npos)
      << c.out;
}

}  // namespace
}  // namespace shardcast
