// Launch configurations (report/launch.h) read back with each framework's own semantics: the
// Megatron-LM command line token by token, the NeMo override line by line, the torchtitan file
// with a TOML parser (toml++). What is read back must be the configuration planned.

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "cli/config_args.h"
#include "models/loader.h"
#include "report/launch.h"
#include "report/megatron_args.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

struct Case {
  const char* model;
  const char* cluster;
  std::int64_t gpus;
  const char* flags;  // simulate's flags
};

// Configurations covering each kind of flag: interleaving, uneven and even-chunk splits, CP of
// each kind, experts with their dispatchers and overlap, MLA with MTP, ZeRO 1-3, the precisions.
const Case kCases[] = {
    {"gpt3-175b", "dgx-a100", 1024, "--tp 8 --pp 8 --vp 3 --mbs 1 --gbs 1536 --recompute selective --sequence-parallel --zero 1"},
    {"llama3-70b", "dgx-h100", 64, "--tp 8 --pp 2 --cp 2 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 1 "
                                   "--mbs 1 --gbs 32 --seq 16384 --sequence-parallel --decoder-first-pipeline-num-layers 39 "
                                   "--decoder-last-pipeline-num-layers 41 --tp-comm-overlap"},
    {"mixtral-8x7b", "dgx-h100", 64, "--tp 2 --pp 4 --vp 2 --ep 8 --mbs 1 --gbs 256 --sequence-parallel "
                                     "--recompute-modules moe_act --zero 1 --precision fp8 --fp8-recipe tensorwise "
                                     "--overlap-moe-expert-parallel-comm"},
    {"deepseek-v3", "dgx-h100", 1024, "--tp 2 --pp 8 --vp 4 --pipeline-layout-even --ep 64 --etp 1 --mbs 1 --gbs 8192 "
                                      "--recompute selective --recompute-modules mla_up_proj moe_act --zero 1 "
                                      "--moe-token-dispatcher-type flex --precision fp8 --fp8-recipe blockwise"},
    {"qwen3-30b-a3b", "dgx-b200", 16, "--tp 1 --ep 8 --mbs 2 --gbs 64 --zero 3 --precision mxfp8"},
    {"llama3-8b", "dgx-b200", 8, "--tp 2 --mbs 1 --gbs 32 --zero 2 --precision nvfp4 --no-flash-attention"},
    {"gpt3-13b", "dgx-a100", 64, "--tp 2 --pp 4 --mbs 2 --gbs 256 --fp16 --embedding-pipeline-slots --bf16-main-grads "
                                 "--no-overlap-grad-reduce --cp 2 --cp-comm-type allgather"},
    {"llama3-8b", "dgx-a100", 64, "--tp 2 --cp 2 --mbs 1 --gbs 64 --zero 3 --dp-shard 4 --recompute full"},
    {"llama3-8b", "dgx-h100", 32, "--tp 2 --pp 2 --mbs 1 --gbs 64 --zero 1 --num-distributed-optimizer-instances 2 "
                                  "--pipeline-flushes 2"},
    {"llama2-7b", "dgx-h100", 16, "--tp 1 --pp 4 --vp 2 --mbs 1 --gbs 64 --precision fp8 --fp8-format e4m3 "
                                  "--fp8-amax-history-len 16 --first-last-layers-bf16 --num-layers-at-start-in-bf16 2 "
                                  "--num-layers-at-end-in-bf16 1 --zero 1 --fp8-param-gather"},
};

struct Built {
  Model m;
  Cluster cl;
  ParallelConfig c;
};

Built Build(const Case& k) {
  Built b{LoadModel(k.model), LoadCluster(k.cluster), {}};
  CLI::App app;
  cli::SimulateArgs a;
  cli::AddConfigOptions(&app, &a);
  app.parse(fmt::format("--gpus {} {}", k.gpus, k.flags), false);
  b.c = cli::BuildConfig(a, b.m, k.gpus);
  return b;
}

/// The launch's shell words: comment lines dropped, continuation lines joined, '...' unquoted.
std::vector<std::string> ShellWords(const std::string& text) {
  std::istringstream in(text);
  std::string line, joined;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) continue;
    if (!line.empty() && line.back() == '\\') line.pop_back();
    joined += line + " ";
  }
  std::vector<std::string> words;
  std::string w;
  bool quoted = false;
  for (char ch : joined) {
    if (ch == '\'') {
      quoted = !quoted;
    } else if (ch == ' ' && !quoted) {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += ch;
    }
  }
  return words;
}

/// What a Megatron-LM command line sets, by Megatron-LM's semantics (flags absent: its defaults,
/// as megatron/training/arguments.py has them; the pipeline transfers are Megatron-Core's).
struct MegatronRead {
  Model m;
  ParallelConfig c;
  std::int64_t gpus = 0;
  std::vector<std::int64_t> layout_chunks;  // from --pipeline-model-parallel-layout
  std::string moe_layer_freq = "1";
  std::int64_t divisible_by = 128;
};

std::vector<std::int64_t> LayoutChunks(const std::string& s) {
  std::vector<std::int64_t> chunks(1, 0);
  for (char ch : s) {
    if (ch == '|') chunks.push_back(0);
    if (ch == 't') ++chunks.back();
  }
  return chunks;
}

MegatronRead ReadMegatron(const std::string& text) {
  MegatronRead r;
  r.m.normalization = Normalization::kLayerNorm;
  r.m.activation = Activation::kGelu;
  r.m.position_embedding = PositionEmbedding::kLearned;
  r.m.tie_embeddings = true;
  r.m.add_bias_linear = r.m.add_qkv_bias = r.m.dropout = true;
  r.c.overlap_grad_reduce = r.c.overlap_param_gather = r.c.flash_attention = false;
  r.c.precision = Precision::kFp32;
  const std::vector<std::string> w = ShellWords(text);
  std::size_t i = 0;
  std::int64_t nnodes = 0, nproc = 0, per_vstage = 0, vstages = 0, instances = 0;
  auto next = [&]() -> std::string {
    EXPECT_LT(i + 1, w.size()) << w[i] << " has no value";
    return i + 1 < w.size() ? w[++i] : "";
  };
  auto num = [&]() { return std::stoll(next()); };
  for (; i < w.size() && w[i] != "pretrain_gpt.py"; ++i) {
    if (w[i] == "--nnodes") nnodes = num();
    if (w[i] == "--nproc-per-node") nproc = num();
  }
  r.gpus = nnodes * nproc;
  std::vector<std::string> modules;
  bool deepep = false;
  for (++i; i < w.size(); ++i) {
    const std::string f = w[i];
    if (f == "--num-layers") r.m.num_layers = num();
    else if (f == "--hidden-size") r.m.hidden_size = num();
    else if (f == "--ffn-hidden-size") r.m.ffn_hidden_size = num();
    else if (f == "--num-attention-heads") r.m.num_attention_heads = num();
    else if (f == "--kv-channels") r.m.kv_channels = num();
    else if (f == "--num-query-groups") r.m.num_query_groups = num();
    else if (f == "--max-position-embeddings") r.m.max_position_embeddings = num();
    else if (f == "--normalization") r.m.normalization = next() == "RMSNorm" ? Normalization::kRMSNorm : Normalization::kLayerNorm;
    else if (f == "--swiglu") r.m.activation = Activation::kSwiglu;
    else if (f == "--position-embedding-type") {
      const std::string v = next();
      r.m.position_embedding = v == "rope" ? PositionEmbedding::kRope : v == "none" ? PositionEmbedding::kAlibi : PositionEmbedding::kLearned;
    } else if (f == "--rotary-base") r.m.rotary_base = std::stod(next());
    else if (f == "--rotary-percent") r.m.rotary_percent = std::stod(next());
    else if (f == "--use-rope-scaling") r.m.rope_scaling_factor = 8;  // Megatron-LM's default factor
    else if (f == "--rope-scaling-factor") r.m.rope_scaling_factor = std::stod(next());
    else if (f == "--untie-embeddings-and-output-weights") r.m.tie_embeddings = false;
    else if (f == "--disable-bias-linear") r.m.add_bias_linear = r.m.add_qkv_bias = false;
    else if (f == "--add-qkv-bias") r.m.add_qkv_bias = true;
    else if (f == "--qk-layernorm") r.m.qk_layernorm = true;
    else if (f == "--window-size") {
      const std::string v = next();
      r.m.attention_window = std::stoll(v.substr(0, v.find(',')));
      r.m.attention_window_modelled = true;
      EXPECT_EQ(v.substr(v.find(',')), ",0") << "a causal window: nothing to the right";
    } else if (f == "--window-attn-skip-freq") r.m.window_attn_skip_freq = num();
    else if (f == "--attention-dropout" || f == "--hidden-dropout") r.m.dropout = std::stod(next()) > 0;
    else if (f == "--num-experts") r.m.moe.num_experts = num();
    else if (f == "--moe-router-topk") r.m.moe.top_k = num();
    else if (f == "--moe-ffn-hidden-size") r.m.moe.ffn_hidden_size = num();
    else if (f == "--moe-shared-expert-intermediate-size") r.m.moe.shared_ffn_hidden_size = num();
    else if (f == "--moe-layer-freq") r.moe_layer_freq = next();
    else if (f == "--moe-router-score-function") r.m.moe.router_score = next();
    else if (f == "--moe-router-pre-softmax") r.m.moe.router_pre_softmax = true;
    else if (f == "--moe-router-topk-scaling-factor") r.m.moe.router_topk_scaling = std::stod(next());
    else if (f == "--moe-router-num-groups") r.m.moe.router_num_groups = num();
    else if (f == "--moe-router-group-topk") r.m.moe.router_group_topk = num();
    else if (f == "--moe-router-enable-expert-bias") r.m.moe.router_expert_bias = true;
    else if (f == "--moe-apply-probs-on-input") r.m.moe.probs_on_input = true;
    else if (f == "--q-lora-rank") r.m.mla.q_lora_rank = num();
    else if (f == "--kv-lora-rank") r.m.mla.kv_lora_rank = num();
    else if (f == "--qk-head-dim") r.m.mla.qk_head_dim = num();
    else if (f == "--qk-pos-emb-head-dim") r.m.mla.qk_pos_emb_head_dim = num();
    else if (f == "--v-head-dim") r.m.mla.v_head_dim = num();
    else if (f == "--mtp-num-layers") r.m.mtp_num_layers = num();
    else if (f == "--vocab-size") r.m.vocab_size = num() + 1;  // NullTokenizer adds its EOD token
    else if (f == "--make-vocab-size-divisible-by") r.divisible_by = num();
    else if (f == "--tensor-model-parallel-size") r.c.tp = num();
    else if (f == "--pipeline-model-parallel-size") r.c.pp = num();
    else if (f == "--context-parallel-size") r.c.cp = num();
    else if (f == "--cp-comm-type") r.c.cp_comm = ParseCpComm(next());
    else if (f == "--hierarchical-context-parallel-sizes") { r.c.cp_a2a = num(); next(); }
    else if (f == "--expert-model-parallel-size") r.c.ep = num();
    else if (f == "--expert-tensor-parallel-size") r.c.etp = num();
    else if (f == "--moe-token-dispatcher-type") {
      const std::string v = next();
      r.c.moe_dispatcher = v == "flex" ? MoeDispatcher::kFlex : v == "allgather" ? MoeDispatcher::kAllGather : MoeDispatcher::kAllToAll;
    } else if (f == "--moe-expert-capacity-factor") r.c.moe_capacity_factor = std::stod(next());
    else if (f == "--num-layers-per-virtual-pipeline-stage") per_vstage = num();
    else if (f == "--num-virtual-stages-per-pipeline-rank") vstages = num();
    else if (f == "--pipeline-model-parallel-layout") r.layout_chunks = LayoutChunks(next());
    else if (f == "--decoder-first-pipeline-num-layers") r.c.first_stage_layers = num();
    else if (f == "--decoder-last-pipeline-num-layers") r.c.last_stage_layers = num();
    else if (f == "--account-for-embedding-in-pipeline-split" || f == "--account-for-loss-in-pipeline-split") r.c.embedding_slots = true;
    else if (f == "--micro-batch-size") r.c.micro_batch_size = num();
    else if (f == "--global-batch-size") r.c.global_batch_size = num();
    else if (f == "--seq-length") r.c.seq_length = num();
    else if (f == "--sequence-parallel") r.c.sequence_parallel = true;
    else if (f == "--recompute-granularity") r.c.recompute = next() == "full" ? Recompute::kFull : Recompute::kSelective;
    else if (f == "--recompute-modules") {
      while (i + 1 < w.size() && w[i + 1].rfind("--", 0) != 0) modules.push_back(w[++i]);
    } else if (f == "--overlap-moe-expert-parallel-comm") r.c.moe_a2a_overlap = true;
    else if (f == "--use-distributed-optimizer") r.c.zero_stage = 1;
    else if (f == "--use-megatron-fsdp") r.c.zero_stage = std::max(r.c.zero_stage, 2);
    else if (f == "--data-parallel-sharding-strategy") {
      const std::string v = next();
      EXPECT_TRUE(v == "optim_grads" || v == "optim_grads_params") << v;
      r.c.zero_stage = v == "optim_grads" ? 2 : 3;
    } else if (f == "--use-torch-fsdp2") r.c.zero_stage = 3;
    else if (f == "--num-distributed-optimizer-instances") instances = num();
    else if (f == "--outer-dp-sharding-strategy") EXPECT_EQ(next(), "no_shard");
    else if (f == "--ckpt-format") EXPECT_EQ(next(), "fsdp_dtensor");
    else if (f == "--overlap-grad-reduce") r.c.overlap_grad_reduce = true;
    else if (f == "--overlap-param-gather") r.c.overlap_param_gather = true;
    else if (f == "--grad-reduce-in-bf16") r.c.fp32_main_grads = false;
    else if (f == "--use-flash-attn") r.c.flash_attention = true;
    else if (f == "--attention-backend") EXPECT_EQ(next(), "unfused");
    else if (f == "--tp-comm-overlap") r.c.tp_comm_overlap = true;
    else if (f == "--bf16") r.c.precision = Precision::kBf16;
    else if (f == "--fp16") r.c.precision = Precision::kFp16;
    else if (f == "--fp8-format") { r.c.fp8_format = next() == "e4m3" ? Fp8Format::kE4m3 : Fp8Format::kHybrid; r.c.precision = Precision::kFp8; }
    else if (f == "--fp8-recipe") {
      const std::string v = next();
      if (v == "mxfp8") r.c.precision = Precision::kMxfp8;
      r.c.fp8_recipe = v == "tensorwise" ? Fp8Recipe::kTensorwise : v == "blockwise" ? Fp8Recipe::kBlockwise : Fp8Recipe::kDelayed;
    } else if (f == "--fp8-amax-history-len") r.c.fp8_amax_history_len = num();
    else if (f == "--fp4-format") { EXPECT_EQ(next(), "e2m1"); r.c.precision = Precision::kNvfp4; }
    else if (f == "--fp4-recipe") EXPECT_EQ(next(), "nvfp4");
    else if (f == "--fp8-param-gather") r.c.fp8_param_gather = true;
    else if (f == "--num-layers-at-start-in-bf16") r.c.bf16_layers_start = num();
    else if (f == "--num-layers-at-end-in-bf16") r.c.bf16_layers_end = num();
    else if (f == "--train-iters" || f == "--lr" || f == "--min-lr" || f == "--lr-decay-style" || f == "--log-interval" ||
             f == "--eval-iters" || f == "--tokenizer-type" || f == "--fp8-amax-compute-algo" || f == "--transformer-impl" ||
             f == "--recompute-method" || f == "--recompute-num-layers") next();
    else if (f == "--use-mcore-models" || f == "--mock-data" || f == "--group-query-attention" || f == "--moe-grouped-gemm" ||
             f == "--multi-latent-attention" || f == "--delay-wgrad-compute" || f == "--first-last-layers-bf16") {}
    else if (f == "--moe-enable-deepep") deepep = true;
    else ADD_FAILURE() << "a flag the reader does not know: " << f;
  }
  // core_v0.15's flex dispatcher asserts --moe-enable-deepep; nothing else takes it.
  EXPECT_EQ(deepep, r.c.moe_dispatcher == MoeDispatcher::kFlex);
  if (!modules.empty()) r.c.recompute_modules = ParseRecomputeModules(modules, "--recompute-modules");
  if (r.m.num_query_groups == 0) r.m.num_query_groups = r.m.num_attention_heads;
  r.c.dp = r.gpus / (r.c.tp * r.c.pp * r.c.cp);
  if (instances > 1) r.c.dp_shard = r.c.dp_cp() / instances;
  if (per_vstage > 0) r.c.vp = r.m.num_layers / (r.c.pp * per_vstage);
  if (vstages > 0) r.c.vp = vstages;
  if (!r.layout_chunks.empty()) r.c.vp = static_cast<std::int64_t>(r.layout_chunks.size()) / r.c.pp;
  if (r.c.vp > 1) r.c.schedule = Schedule::kInterleaved;
  ApplyMegatronCoreDefaults(&r.c);  // by the schedule
  return r;
}

/// The fields every format expresses, compared one by one (the name says which).
void ExpectSameParallelism(const ParallelConfig& got, const ParallelConfig& want, const std::string& where) {
  EXPECT_EQ(got.tp, want.tp) << where;
  EXPECT_EQ(got.pp, want.pp) << where;
  EXPECT_EQ(got.dp, want.dp) << where;
  EXPECT_EQ(got.cp, want.cp) << where;
  EXPECT_EQ(got.ep, want.ep) << where;
  EXPECT_EQ(got.expert_tp(), want.expert_tp()) << where;
  EXPECT_EQ(got.vp, want.vp) << where;
  EXPECT_EQ(got.micro_batch_size, want.micro_batch_size) << where;
  EXPECT_EQ(got.global_batch_size, want.global_batch_size) << where;
  EXPECT_EQ(got.seq_length, want.seq_length) << where;
  EXPECT_EQ(got.recompute, want.recompute) << where;
}

TEST(Launch, MegatronCommandReadsBackAsThePlannedConfiguration) {
  for (const Case& k : kCases) {
    const Built b = Build(k);
    const std::string where = std::string(k.model) + " " + k.flags;
    const LaunchConfig l = EmitLaunch(LaunchFormat::kMegatron, b.m, b.c, b.cl, k.gpus);
    EXPECT_NE(l.text.find("core_v0.15"), std::string::npos);
    // validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for tp or cp above 1, and refuses it with FSDP.
    const bool one_connection = b.c.zero_stage < 2 && (b.c.tp > 1 || b.c.cp > 1);
    EXPECT_EQ(l.text.find("CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun") != std::string::npos, one_connection) << where;
    MegatronRead r = ReadMegatron(l.text);
    EXPECT_EQ(r.gpus, k.gpus) << where;
    // The model: every field of the shape, and the vocabulary Megatron pads to.
    const std::int64_t multiple = r.divisible_by * r.c.tp;
    EXPECT_EQ((r.m.vocab_size + multiple - 1) / multiple * multiple, b.m.vocab_size) << where;
    r.m.name = b.m.name;
    r.m.seq_length = b.m.seq_length;
    r.m.source = b.m.source;
    r.m.origin = b.m.origin;
    r.m.moe.first_k_dense = b.m.moe.first_k_dense;
    r.m.moe.layer_step = b.m.moe.layer_step;
    r.m.moe.step_from_layer0 = b.m.moe.step_from_layer0;
    r.m.moe.expert_bias = b.m.moe.expert_bias;
    r.m.moe.router_bias = b.m.moe.router_bias;
    r.m.moe.router_global_batch_balance = b.m.moe.router_global_batch_balance;  // how it was trained: no argument
    if (b.m.mla.enabled()) {
      // Megatron-Core builds MLA's q and kv norms, which the model counts, only with --qk-layernorm.
      EXPECT_TRUE(r.m.qk_layernorm) << where;
      r.m.qk_layernorm = b.m.qk_layernorm;
    }
    // A longer training sequence than the model's context gets a position table that long.
    const std::int64_t seq = b.c.seq_length > 0 ? b.c.seq_length : b.m.seq_length;
    EXPECT_EQ(r.m.max_position_embeddings, std::max(seq, b.m.max_position_embeddings)) << where;
    r.m.max_position_embeddings = b.m.max_position_embeddings;
    EXPECT_EQ(ModelToJson(r.m), ModelToJson(b.m)) << where;
    EXPECT_EQ(r.moe_layer_freq, MegatronMoeLayerFreq(b.m)) << where;
    // The configuration: the whole of it where the split is given by flags.
    ExpectSameParallelism(r.c, b.c, where);
    if (!r.layout_chunks.empty()) {
      EXPECT_EQ(r.layout_chunks, PipelineLayoutOf(b.m, b.c).chunk_layers) << where;
      r.c.even_chunks = b.c.even_chunks;
    }
    if (b.c.dp_cp() == 1) r.c.overlap_grad_reduce = b.c.overlap_grad_reduce;  // nothing to reduce
    if (b.c.zero_stage != 1) r.c.overlap_param_gather = b.c.overlap_param_gather;  // needs the distributed optimizer
    r.c.moe_load_imbalance = b.c.moe_load_imbalance;  // the routing's, not a setting
    // Megatron-LM runs one schedule a step: pipeline flushes are said, not written.
    std::vector<std::string> said;
    if (b.c.pipeline_flushes > 1) {
      said.push_back(fmt::format("{} pipeline flushes a step (Megatron-LM runs the step's micro-batches in one "
                                 "schedule): written as one schedule",
                                 b.c.pipeline_flushes));
      r.c.pipeline_flushes = b.c.pipeline_flushes;
    }
    EXPECT_EQ(ResultToJson(SimulationResult{}, b.m, r.c, b.cl, k.gpus)["config"],
              ResultToJson(SimulationResult{}, b.m, b.c, b.cl, k.gpus)["config"])
        << where << "\n" << l.text;
    EXPECT_EQ(l.unexpressed, said) << where;
  }
}

/// `recipe.PATH = VALUE` lines, run.Config(...) keyword arguments as PATH.KEY.
std::map<std::string, std::string> ReadNemo(const std::string& text) {
  std::map<std::string, std::string> v;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("recipe.", 0) != 0 || line.find(" = ") == std::string::npos) continue;
    const std::string key = line.substr(7, line.find(" = ") - 7), value = line.substr(line.find(" = ") + 3);
    v[key] = value;
    if (value.rfind("run.Config(", 0) == 0) {
      std::istringstream args(value.substr(11, value.size() - 12));
      std::string arg;
      while (std::getline(args, arg, ',')) {
        const auto eq = arg.find('=');
        if (eq == std::string::npos) continue;
        v[key + "." + arg.substr(arg.find_first_not_of(' '), eq - arg.find_first_not_of(' '))] = arg.substr(eq + 1);
      }
    }
  }
  return v;
}

TEST(Launch, NemoOverrideReadsBackAsThePlannedConfiguration) {
  for (const Case& k : kCases) {
    const Built b = Build(k);
    const std::string where = std::string(k.model) + " " + k.flags;
    const LaunchConfig l = EmitLaunch(LaunchFormat::kNemo, b.m, b.c, b.cl, k.gpus);
    auto v = ReadNemo(l.text);
    auto num = [&](const std::string& key) {
      EXPECT_TRUE(v.count(key)) << where << ": " << key;
      return v.count(key) && v[key] != "None" ? std::stoll(v[key]) : 1;
    };
    auto flag = [&](const std::string& key) {
      EXPECT_TRUE(v.count(key)) << where << ": " << key;
      return v[key] == "True";
    };
    const std::int64_t seq = b.c.seq_length > 0 ? b.c.seq_length : b.m.seq_length;
    EXPECT_EQ(num("trainer.num_nodes") * num("trainer.devices"), k.gpus) << where;
    EXPECT_EQ(num("model.config.num_layers"), b.m.num_layers) << where;
    EXPECT_EQ(num("model.config.hidden_size"), b.m.hidden_size) << where;
    EXPECT_EQ(num("model.config.ffn_hidden_size"), b.m.ffn_hidden_size) << where;
    EXPECT_EQ(num("model.config.num_query_groups"), b.m.num_query_groups) << where;
    EXPECT_EQ(num("model.config.kv_channels"), b.m.kv_channels) << where;
    EXPECT_EQ(num("model.config.vocab_size"), b.m.vocab_size) << where;
    EXPECT_EQ(flag("model.config.gated_linear_unit"), b.m.activation == Activation::kSwiglu) << where;
    EXPECT_EQ(flag("model.config.share_embeddings_and_output_weights"), b.m.tie_embeddings) << where;
    EXPECT_EQ(v.count("model.config.qk_layernorm") > 0 && v["model.config.qk_layernorm"] == "True",
              b.m.qk_layernorm || b.m.mla.enabled())
        << where;
    ParallelConfig got;
    got.tp = num("trainer.strategy.tensor_model_parallel_size");
    got.pp = num("trainer.strategy.pipeline_model_parallel_size");
    got.vp = num("trainer.strategy.virtual_pipeline_model_parallel_size");
    if (v.count("trainer.strategy.pipeline_model_parallel_layout")) {
      const std::string layout = v["trainer.strategy.pipeline_model_parallel_layout"];
      const auto chunks = LayoutChunks(layout.substr(1, layout.size() - 2));
      EXPECT_EQ(chunks, PipelineLayoutOf(b.m, b.c).chunk_layers) << where;
      got.vp = static_cast<std::int64_t>(chunks.size()) / got.pp;
    }
    got.cp = num("trainer.strategy.context_parallel_size");
    got.dp = k.gpus / (got.tp * got.pp * got.cp);
    got.ep = b.m.moe.enabled() ? num("trainer.strategy.expert_model_parallel_size") : 1;
    got.etp = b.m.moe.enabled() ? num("trainer.strategy.expert_tensor_parallel_size") : 0;
    got.micro_batch_size = num("data.micro_batch_size");
    got.global_batch_size = num("data.global_batch_size");
    got.seq_length = num("data.seq_length");
    EXPECT_EQ(num("model.config.seq_length"), seq) << where;
    const std::string rc = v["model.config.recompute_granularity"];
    got.recompute = rc == "\"full\"" ? Recompute::kFull : rc == "\"selective\"" ? Recompute::kSelective : Recompute::kNone;
    ExpectSameParallelism(got, b.c, where);
    EXPECT_EQ(flag("trainer.strategy.sequence_parallel"), b.c.sequence_parallel) << where;
    EXPECT_EQ(flag("optim.config.use_distributed_optimizer"), b.c.zero_stage >= 1) << where;
    EXPECT_EQ(flag("trainer.strategy.ddp.grad_reduce_in_fp32"), b.c.fp32_main_grads) << where;
    EXPECT_EQ(flag("trainer.strategy.ddp.overlap_grad_reduce"), b.c.overlap_grad_reduce && b.c.dp_cp() > 1) << where;
    const std::string shard = v["trainer.strategy.ddp.data_parallel_sharding_strategy"];
    EXPECT_EQ(shard, b.c.zero_stage == 3 ? "\"optim_grads_params\"" : b.c.zero_stage == 2 ? "\"optim_grads\"" : "") << where;
    const std::string instances = v["trainer.strategy.ddp.num_distributed_optimizer_instances"];
    EXPECT_EQ(instances, b.c.hybrid_shard() ? std::to_string(b.c.dp_replicas()) : "") << where;
    EXPECT_EQ(v["trainer.plugins"], b.c.precision == Precision::kFp16 ? "fp16_mixed()" : "bf16_mixed()") << where;
    if (b.c.precision == Precision::kFp8) {
      EXPECT_EQ(v["trainer.plugins.fp8_recipe"], "\"" + std::string(ToString(b.c.fp8_recipe)) + "\"") << where;
      EXPECT_EQ(flag("trainer.plugins.fp8_param_gather"), b.c.fp8_param_gather) << where;
    }
    if (b.c.precision == Precision::kMxfp8) {
      EXPECT_EQ(v["trainer.plugins.fp8_recipe"], "\"mxfp8\"") << where;
    }
    if (b.c.precision == Precision::kNvfp4) {
      EXPECT_EQ(v["trainer.plugins.fp4_recipe"], "\"nvfp4\"") << where;
    }
    if (b.c.bf16_layers_start > 0) {
      EXPECT_EQ(num("trainer.plugins.num_layers_at_start_in_bf16"), b.c.bf16_layers_start) << where;
    }
    if (b.m.moe.enabled()) {
      EXPECT_EQ(num("model.config.num_moe_experts"), b.m.moe.num_experts) << where;
      EXPECT_EQ(flag("model.config.overlap_moe_expert_parallel_comm"), b.c.moe_a2a_overlap) << where;
    }
    EXPECT_EQ(v.count("trainer.strategy.num_layers_in_first_pipeline_stage") > 0, b.c.first_stage_layers >= 0) << where;
    EXPECT_EQ(flag("trainer.strategy.account_for_embedding_in_pipeline_split"), b.c.embedding_slots && !b.c.even_chunks) << where;
  }
}

TEST(Launch, TorchtitanTomlParsesAndReadsBackAsThePlannedConfiguration) {
  for (const Case& k : kCases) {
    const Built b = Build(k);
    const std::string where = std::string(k.model) + " " + k.flags;
    const LaunchConfig l = EmitLaunch(LaunchFormat::kTorchtitan, b.m, b.c, b.cl, k.gpus);
    toml::table t;
    try {
      t = toml::parse(l.text);
    } catch (const toml::parse_error& e) {
      ADD_FAILURE() << where << ": not TOML: " << e.description() << "\n" << l.text;
      continue;
    }
    auto num = [&](const char* table, const char* key) {
      const auto v = t[table][key].value<std::int64_t>();
      EXPECT_TRUE(v.has_value()) << where << ": [" << table << "] " << key;
      return v.value_or(0);
    };
    ParallelConfig got;
    got.tp = num("parallelism", "tensor_parallel_degree");
    got.pp = num("parallelism", "pipeline_parallel_degree");
    got.cp = num("parallelism", "context_parallel_degree");
    const std::int64_t replicate = num("parallelism", "data_parallel_replicate_degree");
    const std::int64_t shard = num("parallelism", "data_parallel_shard_degree");
    got.dp = replicate * shard;
    // FSDP2 shards over data_parallel_shard_degree x cp; under a pipeline ZeRO-1 is FSDP2's
    // equivalent (kFsdp2PipelineEquivalent) and is written as FSDP2.
    const bool fsdp2 = b.c.zero_stage >= 2 || (b.c.zero_stage == 1 && b.c.pp > 1);
    if (fsdp2) {
      EXPECT_EQ(shard * got.cp, b.c.shard_dp()) << where;
    }
    EXPECT_EQ(shard > 1 || (fsdp2 && b.c.dp == 1), fsdp2) << where;
    got.ep = b.m.moe.enabled() ? num("parallelism", "expert_parallel_degree") : 1;
    got.etp = b.m.moe.enabled() ? num("parallelism", "expert_tensor_parallel_degree") : 0;
    got.micro_batch_size = num("parallelism", "pipeline_parallel_microbatch_size");
    got.global_batch_size = num("training", "global_batch_size");
    got.seq_length = num("training", "seq_len");
    const std::string schedule = t["parallelism"]["pipeline_parallel_schedule"].value_or("");
    if (got.pp > 1 && (schedule == "Interleaved1F1B" || schedule == "InterleavedZeroBubble")) {
      if (b.c.vp == 2 && !t["parallelism"]["pipeline_parallel_layers_per_stage"]) {
        got.vp = 2;  // torchtitan's default: two stages a rank
      } else if (auto per = t["parallelism"]["pipeline_parallel_layers_per_stage"].value<std::int64_t>()) {
        // torchtitan's ceil((L + first_less + last_less) / P) stages.
        const std::int64_t slots = b.m.num_layers + num("parallelism", "pipeline_parallel_first_stage_less_layers") +
                                   num("parallelism", "pipeline_parallel_last_stage_less_layers");
        got.vp = (slots + *per - 1) / *per / got.pp;
      } else {
        got.vp = b.c.vp;  // an uneven split: said in `unexpressed`
        EXPECT_FALSE(l.unexpressed.empty()) << where;
      }
    }
    const std::string mode = t["activation_checkpoint"]["mode"].value_or("");
    got.recompute = mode == "full" ? Recompute::kFull : mode == "selective" ? Recompute::kSelective : Recompute::kNone;
    // local_batch_size: a data-parallel rank's batch per pipeline schedule (all its micro-batches
    // of one flush with a pipeline; torchtitan's gradient accumulation makes the flushes).
    const std::int64_t local = num("training", "local_batch_size");
    EXPECT_EQ(local, got.pp > 1 ? b.c.global_batch_size / b.c.dp / b.c.pipeline_flushes : b.c.micro_batch_size) << where;
    if (got.pp > 1) {
      EXPECT_EQ(got.global_batch_size / (local * got.dp), b.c.pipeline_flushes) << where;
    }
    ExpectSameParallelism(got, b.c, where);
    const bool fp8 = b.c.precision == Precision::kFp8, mx = b.c.precision == Precision::kMxfp8;
    EXPECT_EQ(t["quantize"]["linear"]["float8"].is_table(), fp8) << where;
    // torchtitan's float8 converter asserts not (recipe_name and enable_fsdp_float8_all_gather).
    if (fp8) {
      EXPECT_FALSE(t["quantize"]["linear"]["float8"]["recipe_name"].is_string() &&
                   t["quantize"]["linear"]["float8"]["enable_fsdp_float8_all_gather"].value_or(false))
          << where << "\n" << l.text;
    }
    EXPECT_EQ(t["quantize"]["linear"]["mx"].is_table(), mx) << where;
    // torchtitan refuses async TP unless the model is compiled (maybe_enable_async_tp).
    const bool async_tp = t["parallelism"]["enable_async_tensor_parallel"].value_or(false);
    EXPECT_EQ(async_tp, b.c.tp_comm_overlap) << where;
    if (async_tp) {
      EXPECT_TRUE(t["compile"]["enable"].value_or(false)) << where;
      const toml::array* comps = t["compile"]["components"].as_array();
      ASSERT_NE(comps, nullptr) << where;
      bool model = false;
      for (const auto& e : *comps) model = model || e.value_or(std::string()) == "model";
      EXPECT_TRUE(model) << where;
    }
    // The compiled model runs beyond the simulation (eager kernels): a warning, not a setting
    // the file could not express.
    bool compile_warned = false;
    for (const auto& w : l.warnings) compile_warned = compile_warned || w.find("torch.compile") == 0;
    EXPECT_EQ(compile_warned, async_tp) << where;
    for (const auto& u : l.unexpressed) EXPECT_EQ(u.find("torch.compile"), std::string::npos) << where;
    // What torchtitan cannot run the way the plan does is said, in the list and as a comment.
    for (const auto& u : l.unexpressed) EXPECT_NE(l.text.find("# Not expressed: " + u), std::string::npos) << u;
    const bool zero1 = b.c.zero_stage == 1;
    EXPECT_EQ(l.text.find("ZeRO-1") != std::string::npos, zero1) << where;
  }
}

// The DeepSpeed config (a shell snippet writing ds_config.json) reads back with DeepSpeed's
// meaning: batch sizes that multiply out (train_batch_size = micro x accumulation x the ranks
// left by TP and PP), the ZeRO stage and its knobs as integers where the stage uses them, the
// 16-bit dtype; what it cannot say (model, TP/PP, recompute, Megatron's optimizer) is a comment.
TEST(Launch, DeepSpeedConfigReadsBackAsThePlannedConfiguration) {
  const Case cases[] = {
      {"llama2-7b", "dgx-a100", 64, "--mbs 4 --gbs 256 --zero 3 --zero3-impl deepspeed --stage3-max-live-parameters 2.5e8 "
                                    "--stage3-prefetch-bucket-size 1e6 --reduce-bucket-size 2e8"},
      {"gpt3-13b", "dgx-a100", 64, "--tp 2 --pp 4 --mbs 2 --gbs 256 --fp16 --zero 1 --optimizer deepspeed-zero "
                                   "--recompute full --framework megatron-2022 --p2p-blocking"},
      {"llama3-8b", "dgx-h100", 16, "--tp 2 --mbs 1 --gbs 64 --zero 2 --optimizer deepspeed-zero --no-overlap-grad-reduce"},
      {"bloom-176b", "jean-zay-a100", 384, "--tp 4 --pp 12 --mbs 2 --gbs 2048 --embedding-pipeline-slots --zero 1 "
                                           "--optimizer deepspeed-bf16 --recompute full"},
      {"gpt3-13b", "dgx-a100", 64, "--tp 2 --pp 2 --mbs 1 --gbs 256 --zero 1"},  // Megatron's distributed optimizer
      {"llama3-8b", "dgx-h100", 16, "--tp 2 --cp 2 --mbs 1 --gbs 64 --zero 2 --optimizer deepspeed-zero "
                                    "--no-contiguous-gradients"},  // the cp ranks count in DeepSpeed's data parallelism
  };
  for (const Case& k : cases) {
    const Built b = Build(k);
    const std::string where = std::string(k.model) + " " + k.flags;
    const LaunchConfig l = EmitLaunch(LaunchFormat::kDeepSpeed, b.m, b.c, b.cl, k.gpus);
    const auto open = l.text.find("<<'EOF'\n"), close = l.text.rfind("\nEOF\n");
    ASSERT_NE(open, std::string::npos) << l.text;
    ASSERT_NE(close, std::string::npos) << l.text;
    const Json j = Json::parse(l.text.substr(open + 8, close - open - 8));
    const std::int64_t dp = k.gpus / (b.c.tp * b.c.pp);
    EXPECT_EQ(j["train_batch_size"].get<std::int64_t>(), b.c.global_batch_size) << where;
    EXPECT_EQ(j["train_micro_batch_size_per_gpu"].get<std::int64_t>(), b.c.micro_batch_size) << where;
    EXPECT_EQ(j["train_micro_batch_size_per_gpu"].get<std::int64_t>() * j["gradient_accumulation_steps"].get<std::int64_t>() * dp,
              b.c.global_batch_size) << where;
    const Json& z = j["zero_optimization"];
    const bool bf16_optimizer = b.c.optimizer_impl == OptimizerImpl::kDeepSpeedBf16;
    EXPECT_EQ(z["stage"].get<int>(), bf16_optimizer ? 0 : b.c.zero_stage) << where;
    EXPECT_EQ(j.contains("fp16"), b.c.precision == Precision::kFp16) << where;
    EXPECT_EQ(j.contains("bf16"), b.c.precision == Precision::kBf16) << where;
    if (!bf16_optimizer && b.c.zero_stage >= 1) {
      EXPECT_EQ(z["reduce_bucket_size"].get<std::int64_t>(), std::llround(b.c.ds_reduce_bucket_elems)) << where;
    }
    // Written out from stage 1 on, as simulated (DeepSpeed's defaults depend on the stage).
    const bool zero = !bf16_optimizer && b.c.zero_stage >= 1;
    EXPECT_EQ(z.contains("overlap_comm"), zero) << where;
    if (zero) {
      EXPECT_EQ(z["overlap_comm"].get<bool>(), b.c.overlap_grad_reduce) << where;
      EXPECT_EQ(z["contiguous_gradients"].get<bool>(), b.c.zero_stage >= 3 || b.c.ds_contiguous_gradients) << where;
    }
    EXPECT_EQ(z.contains("stage3_max_live_parameters"), b.c.zero_stage == 3) << where;
    if (b.c.zero_stage == 3) {
      EXPECT_EQ(z["stage3_max_live_parameters"].get<std::int64_t>(), 250000000) << where;
      EXPECT_EQ(z["stage3_prefetch_bucket_size"].get<std::int64_t>(), 1000000) << where;
      EXPECT_EQ(z["stage3_max_reuse_distance"].get<std::int64_t>(), 1000000000) << where;
      EXPECT_EQ(z["stage3_param_persistence_threshold"].get<std::int64_t>(), 100000) << where;
    }
    for (const auto& u : l.unexpressed) EXPECT_NE(l.text.find("# Not expressed: " + u), std::string::npos) << u;
    auto said = [&](const std::string& what) {
      return std::any_of(l.unexpressed.begin(), l.unexpressed.end(),
                         [&](const std::string& u) { return u.find(what) != std::string::npos; });
    };
    EXPECT_TRUE(said("the model")) << where;
    EXPECT_EQ(said("--tensor-model-parallel-size"), b.c.tp > 1 || b.c.pp > 1) << where;
    EXPECT_EQ(said("activation recompute"), b.c.recompute != Recompute::kNone) << where;
    EXPECT_EQ(said("the plan's optimizer, Megatron-LM's"), b.c.optimizer_impl == OptimizerImpl::kMegatron) << where;
  }
}

TEST(Launch, LayoutAndMoeLayerPatterns) {
  const Model ds = LoadModel("deepseek-v3");  // 3 dense layers, then 58 MoE layers, one MTP layer
  EXPECT_EQ(MegatronMoeLayerFreq(ds), "([0]*3+[1]*58)");
  EXPECT_EQ(MegatronMoeLayerFreq(LoadModel("mixtral-8x7b")), "1");
  ParallelConfig c;
  c.pp = 4;
  c.vp = 2;
  c.schedule = Schedule::kInterleaved;
  c.even_chunks = true;
  // 61 layers over 8 chunks: 7 each, the remainder 5 to the first five chunks.
  EXPECT_EQ(MegatronPipelineLayout(ds, c), "Etttttttt|tttttttt|tttttttt|tttttttt|tttttttt|ttttttt|ttttttt|tttttttmL");
  // DeepSpeed's config has no pipeline split: BLOOM's embedding slots are named with the launcher's flag.
  const Built bloom = Build({"bloom-176b", "dgx-a100", 384, "--tp 4 --pp 12 --mbs 2 --gbs 2048 --embedding-pipeline-slots"});
  const LaunchConfig l = EmitLaunch(LaunchFormat::kDeepSpeed, bloom.m, bloom.c, bloom.cl, 384);
  EXPECT_TRUE(std::any_of(l.unexpressed.begin(), l.unexpressed.end(), [](const std::string& u) {
    return u.find("the pipeline split (emb+loss slots: the launcher's, Megatron-DeepSpeed's --pp-partition-method "
                  "'type:transformer|embedding')") != std::string::npos;
  }));
}

// torchtitan's MX converter gathers bf16 parameters and casts every tensor to E4M3: an MXFP8 plan's
// low-precision gathers and hybrid format are said, not dropped.
TEST(Launch, TorchtitanSaysWhatItsMxfp8RecipeCannot) {
  Built b = Build({"llama3-8b", "dgx-b200", 8, "--mbs 1 --gbs 8 --zero 1 --precision mxfp8 --fp8-param-gather"});
  auto has = [](const LaunchConfig& l, const std::string& what) {
    return std::any_of(l.unexpressed.begin(), l.unexpressed.end(),
                       [&](const std::string& u) { return u.find(what) != std::string::npos; });
  };
  LaunchConfig t = EmitLaunch(LaunchFormat::kTorchtitan, b.m, b.c, b.cl, 8);
  EXPECT_TRUE(has(t, "MXFP8 parameter all-gathers")) << t.text;
  EXPECT_FALSE(has(t, "E5M2 gradients")) << t.text;
  b.c.fp8_format = Fp8Format::kHybrid;
  t = EmitLaunch(LaunchFormat::kTorchtitan, b.m, b.c, b.cl, 8);
  EXPECT_TRUE(has(t, "E5M2 gradients")) << t.text;
}

// torchtitan keeps fp32 parameter shards as the optimizer's master: a launch of a simulation that
// counted another optimizer's state says so where the bytes differ (ZeRO-3: 18/8 against 16/8),
// and not where they agree (FSDP2 under a pipeline, ZeRO-1's reading) or with --optimizer fsdp.
TEST(Launch, TorchtitanSaysWhereTheSimulatedOptimizerStateDiffers) {
  const auto state_line = [](const LaunchConfig& l) {
    for (const std::string& u : l.unexpressed) {
      if (u.find("torchtitan keeps fp32 parameter shards") != std::string::npos) return u;
    }
    return std::string();
  };
  const Built z3 = Build({"llama3-8b", "dgx-h100", 8, "--mbs 1 --gbs 8 --zero 3"});
  EXPECT_EQ(state_line(EmitLaunch(LaunchFormat::kTorchtitan, z3.m, z3.c, z3.cl, 8)),
            fmt::format("the megatron optimizer's state, {:.3g} bytes a parameter: torchtitan keeps fp32 parameter "
                        "shards as the master, {:.3g} bytes (simulate with --optimizer fsdp)",
                        18.0 / 8, 16.0 / 8));
  const Built fsdp = Build({"llama3-8b", "dgx-h100", 8, "--mbs 1 --gbs 8 --zero 3 --optimizer fsdp"});
  EXPECT_EQ(state_line(EmitLaunch(LaunchFormat::kTorchtitan, fsdp.m, fsdp.c, fsdp.cl, 8)), "");
  const Built pp = Build({"llama3-8b", "dgx-h100", 16, "--pp 2 --mbs 1 --gbs 16 --zero 1 --no-overlap-grad-reduce"});
  EXPECT_EQ(state_line(EmitLaunch(LaunchFormat::kTorchtitan, pp.m, pp.c, pp.cl, 16)), "");
}

// --pipeline-layout-even without --vp: the stages are the chunks, and the launch carries the
// layout string (without it Megatron-LM refuses 126 layers over 16 stages); with first/last
// stage counts it exits 2, since Megatron-Core takes one or the other.
TEST(Launch, EvenLayoutWithoutVirtualStagesIsWritten) {
  const Built b = Build({"llama3.1-405b", "dgx-h100", 2048, "--tp 8 --pp 16 --mbs 1 --gbs 2048 --pipeline-layout-even"});
  const std::string even8(8, 't'), even7(7, 't');
  std::string expected = "E" + even8;
  for (int i = 1; i < 16; ++i) expected += "|" + (i < 14 ? even8 : even7);
  expected += "L";
  EXPECT_EQ(MegatronPipelineLayout(b.m, b.c), expected);
  const LaunchConfig mg = EmitLaunch(LaunchFormat::kMegatron, b.m, b.c, b.cl, 2048);
  EXPECT_NE(mg.text.find("--pipeline-model-parallel-layout '" + expected + "'"), std::string::npos) << mg.text;
  EXPECT_FALSE(MegatronCannotSplit(b.m, b.c));  // no "this launch fails at start-up" warning
  ParallelConfig plain = b.c;
  plain.even_chunks = false;
  EXPECT_TRUE(MegatronCannotSplit(b.m, plain));
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3.1-405b --cluster dgx-h100 --gpus 2048 --tp 8 --pp 16 "
                                    "--mbs 1 --gbs 2048 --pipeline-layout-even --decoder-last-pipeline-num-layers 6",
                                    "--pipeline-layout-even: given with --decoder-last-pipeline-num-layers"));
  // With the embedding slots the layout spreads the 128 slots: 8 a stage, the embedding and the
  // loss taking one of the first and the last stage's (torchtitan's split).
  ParallelConfig slots = b.c;
  slots.embedding_slots = true;
  std::string with_slots = "E" + even7;
  for (int i = 1; i < 15; ++i) with_slots += "|" + even8;
  with_slots += "|" + even7 + "L";
  EXPECT_EQ(MegatronPipelineLayout(b.m, slots), with_slots);
  // NeMo: the layout string alone (Megatron-Core refuses the account-for flags beside it).
  const LaunchConfig nemo = EmitLaunch(LaunchFormat::kNemo, b.m, slots, b.cl, 2048);
  EXPECT_NE(nemo.text.find("account_for_embedding_in_pipeline_split = False"), std::string::npos) << nemo.text;
  EXPECT_NE(nemo.text.find(with_slots), std::string::npos) << nemo.text;
  // torchtitan makes this split itself (1 + 1 slots spread evenly): no layers_per_stage without
  // --vp, and no split left unexpressed; first/last stage counts it cannot make are said.
  const LaunchConfig titan = EmitLaunch(LaunchFormat::kTorchtitan, b.m, slots, b.cl, 2048);
  const auto said = [](const LaunchConfig& l, const std::string& what) {
    return std::any_of(l.unexpressed.begin(), l.unexpressed.end(),
                       [&](const std::string& u) { return u.find(what) != std::string::npos; });
  };
  EXPECT_FALSE(said(titan, "the pipeline split")) << titan.text;
  EXPECT_NE(titan.text.find("pipeline_parallel_first_stage_less_layers = 1"), std::string::npos) << titan.text;
  const Built firstlast = Build({"llama3.1-405b", "dgx-h100", 2048, "--tp 8 --pp 16 --mbs 1 --gbs 2048 "
                                 "--decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 8"});
  EXPECT_TRUE(said(EmitLaunch(LaunchFormat::kTorchtitan, firstlast.m, firstlast.c, firstlast.cl, 2048), "the pipeline split"));
  EXPECT_EQ(testing::RunShardcast("simulate --model llama3.1-405b --cluster dgx-h100 --gpus 2048 --tp 8 --pp 16 --mbs 1 "
                         "--gbs 2048 --pipeline-layout-even --embedding-pipeline-slots").exit_code,
            0);
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --mbs 1 --gbs 8 "
                                    "--pipeline-layout-even",
                                    "--pipeline-layout-even: given with --pp 1, expected --pp 2 or more"));
}

// What a model has beside its shape reaches the launch: Llama 3.1's RoPE scaling (Hugging Face's
// rope_scaling of rope_type llama3) and Qwen3's per-head query/key norms as Megatron-LM flags, and
// what NeMo's GPTConfig overrides cannot say is listed.
TEST(Launch, RopeScalingAndQkNormsAreWritten) {
  const Built b = Build({"llama3.1-405b", "dgx-h100", 2048, "--tp 8 --pp 16 --mbs 1 --gbs 2048"});
  EXPECT_EQ(b.m.rope_scaling_factor, 8.0);
  const LaunchConfig mg = EmitLaunch(LaunchFormat::kMegatron, b.m, b.c, b.cl, 2048);
  EXPECT_EQ(ReadMegatron(mg.text).m.rope_scaling_factor, 8.0) << mg.text;
  EXPECT_EQ(mg.text.find("--qk-layernorm"), std::string::npos);
  const LaunchConfig nemo = EmitLaunch(LaunchFormat::kNemo, b.m, b.c, b.cl, 2048);
  EXPECT_TRUE(std::any_of(nemo.unexpressed.begin(), nemo.unexpressed.end(),
                          [](const std::string& u) { return u.find("RoPE scaling (factor 8)") != std::string::npos; }));
  // A scaling the model does not read (yarn) is named as not written, in every format with a model.
  Model yarn = b.m;
  yarn.rope_scaling_factor = 0;
  yarn.rope_scaling_unread = "yarn (factor 4)";
  for (const LaunchFormat f : {LaunchFormat::kMegatron, LaunchFormat::kNemo, LaunchFormat::kTorchtitan}) {
    const LaunchConfig l = EmitLaunch(f, yarn, b.c, b.cl, 2048);
    EXPECT_TRUE(std::any_of(l.unexpressed.begin(), l.unexpressed.end(), [](const std::string& u) {
      return u.find("RoPE scaling yarn (factor 4): not written") != std::string::npos;
    })) << ToString(f);
  }
  // A factor other than Megatron's default 8 is written too.
  Model scaled = b.m;
  scaled.rope_scaling_factor = 32;
  EXPECT_EQ(ReadMegatron(EmitLaunch(LaunchFormat::kMegatron, scaled, b.c, b.cl, 2048).text).m.rope_scaling_factor, 32.0);
  const Built q = Build({"qwen3-30b-a3b", "dgx-h100", 8, "--ep 8 --mbs 1 --gbs 8"});
  EXPECT_TRUE(ReadMegatron(EmitLaunch(LaunchFormat::kMegatron, q.m, q.c, q.cl, 8).text).m.qk_layernorm);
  // A sliding window (GPT-OSS's: 128 tokens, every 2nd layer full) as --window-size 128,0
  // --window-attn-skip-freq 2, NeMo's window_size / window_attn_skip_freq; torchtitan names it.
  Model oss = q.m;
  oss.attention_window = 128;
  oss.window_attn_skip_freq = 2;
  oss.attention_window_modelled = true;
  oss.attention_window_key = "sliding_window";
  const MegatronRead w = ReadMegatron(EmitLaunch(LaunchFormat::kMegatron, oss, q.c, q.cl, 8).text);
  EXPECT_EQ(w.m.attention_window, 128);
  EXPECT_EQ(w.m.window_attn_skip_freq, 2);
  const LaunchConfig wn = EmitLaunch(LaunchFormat::kNemo, oss, q.c, q.cl, 8);
  EXPECT_NE(wn.text.find("model.config.window_size = (128, 0)"), std::string::npos) << wn.text;
  EXPECT_NE(wn.text.find("model.config.window_attn_skip_freq = 2"), std::string::npos) << wn.text;
  const LaunchConfig wt = EmitLaunch(LaunchFormat::kTorchtitan, oss, q.c, q.cl, 8);
  EXPECT_TRUE(std::any_of(wt.unexpressed.begin(), wt.unexpressed.end(), [](const std::string& u) {
    return u.find("the attention window (sliding_window = 128 on 24 of 48 layers)") != std::string::npos;
  })) << wt.text;
  // A pattern no skip frequency gives: Megatron-LM's list expression (1 where a layer slides).
  Model listed = oss;
  listed.window_layer_pattern.assign(48, true);
  listed.window_layer_pattern[0] = false;
  listed.window_layer_pattern[47] = false;
  EXPECT_EQ(MegatronWindowPattern(listed), "([0]*1+[1]*46+[0]*1)");
  const LaunchConfig wl = EmitLaunch(LaunchFormat::kMegatron, listed, q.c, q.cl, 8);
  EXPECT_NE(wl.text.find("--window-size 128,0 --window-attn-skip-freq '([0]*1+[1]*46+[0]*1)'"), std::string::npos) << wl.text;
  // One the model does not model is named as not written.
  oss.attention_window_modelled = false;
  const LaunchConfig un = EmitLaunch(LaunchFormat::kMegatron, oss, q.c, q.cl, 8);
  EXPECT_EQ(un.text.find("--window-size"), std::string::npos);
  EXPECT_TRUE(std::any_of(un.unexpressed.begin(), un.unexpressed.end(), [](const std::string& u) {
    return u.find("sliding_window = 128 (not modelled): not written") != std::string::npos;
  }));
  EXPECT_EQ(ReadMegatron(EmitLaunch(LaunchFormat::kMegatron, q.m, q.c, q.cl, 8).text).m.rope_scaling_factor, 0.0);
  // Partial rotary (GLM-4.5's half of each head): --rotary-percent, NeMo's rotary_percent; torchtitan names it.
  Model half = q.m;
  half.rotary_percent = 0.5;
  EXPECT_DOUBLE_EQ(ReadMegatron(EmitLaunch(LaunchFormat::kMegatron, half, q.c, q.cl, 8).text).m.rotary_percent, 0.5);
  EXPECT_EQ(EmitLaunch(LaunchFormat::kMegatron, q.m, q.c, q.cl, 8).text.find("--rotary-percent"), std::string::npos);
  EXPECT_NE(EmitLaunch(LaunchFormat::kNemo, half, q.c, q.cl, 8).text.find("model.config.rotary_percent = 0.5"),
            std::string::npos);
  const LaunchConfig ht = EmitLaunch(LaunchFormat::kTorchtitan, half, q.c, q.cl, 8);
  EXPECT_TRUE(std::any_of(ht.unexpressed.begin(), ht.unexpressed.end(), [](const std::string& u) {
    return u.find("partial RoPE on 50% of each head's dims") != std::string::npos;
  })) << ht.text;
}

// Llama 4 Scout's attention: every 4th layer without RoPE (Llama4TextConfig's no_rope_layers
// default, interval 4), parameter-free q/k L2 norms (use_qk_norm), and Llama 3 RoPE scaling whose
// high_freq_factor (1) is not Llama 3.1's 4. Megatron-LM writes --no-rope-freq and --qk-l2-norm;
// NeMo and torchtitan name them; the bands are named everywhere; our format round-trips them.
TEST(Launch, Llama4NoPeLayersAndQkL2NormsAreWritten) {
  const std::string scout = R"({"model_type": "llama4", "text_config": {"hidden_size": 5120,
    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 1, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
    "head_dim": 128, "vocab_size": 202048, "max_position_embeddings": 10485760, "tie_word_embeddings": false,
    "rope_theta": 500000, "rope_scaling": {"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192, "rope_type": "llama3"}}})";
  const Model m = ModelFromJson(Json::parse(scout), "scout.json");
  ASSERT_EQ(m.no_rope_layers.size(), 48u);
  EXPECT_EQ(std::count(m.no_rope_layers.begin(), m.no_rope_layers.end(), true), 12);
  EXPECT_TRUE(m.no_rope_layers[3] && !m.no_rope_layers[2]);  // layers 4, 8, ... (1-based)
  EXPECT_EQ(m.NoRopeFreq(), 4);
  EXPECT_TRUE(m.qk_l2_norm);
  EXPECT_DOUBLE_EQ(m.rope_high_freq_factor, 1.0);
  EXPECT_FALSE(m.RopeBandsAreLlama31());
  const Built b = Build({"llama3-8b", "dgx-h100", 8, "--ep 8 --mbs 1 --gbs 8"});
  const Cluster& cl = b.cl;
  ParallelConfig c = b.c;
  const std::vector<std::string> words = ShellWords(EmitLaunch(LaunchFormat::kMegatron, m, c, cl, 8).text);
  auto after = [&](const std::string& flag) {
    const auto it = std::find(words.begin(), words.end(), flag);
    return it == words.end() ? std::string("absent") : it + 1 == words.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(after("--no-rope-freq"), "4");
  EXPECT_NE(after("--qk-l2-norm"), "absent");
  // The bands: Megatron's and NeMo's Llama 3.1 scaling fix high_freq_factor 4, torchtitan's llama4 (Scout's
  // family there) fixes 1, Llama 4's own.
  for (const LaunchFormat f : {LaunchFormat::kMegatron, LaunchFormat::kNemo, LaunchFormat::kTorchtitan}) {
    const LaunchConfig l = EmitLaunch(f, m, c, cl, 8);
    const auto has = [&](const std::string& s) {
      return std::any_of(l.unexpressed.begin(), l.unexpressed.end(),
                         [&](const std::string& u) { return u.find(s) != std::string::npos; });
    };
    EXPECT_EQ(has("RoPE scaling bands (low_freq_factor 1, high_freq_factor 1, original_max_position_embeddings 8192): "
                  "not written"),
              f != LaunchFormat::kTorchtitan)
        << ToString(f);
    EXPECT_EQ(has("NoPE layers (12 of 48 skip RoPE; Megatron-LM's --no-rope-freq 4)"), f == LaunchFormat::kTorchtitan)
        << ToString(f);
    EXPECT_EQ(has("Megatron-Core's --qk-l2-norm normalizes on every layer"), f == LaunchFormat::kMegatron) << ToString(f);
  }
  EXPECT_NE(EmitLaunch(LaunchFormat::kNemo, m, c, cl, 8).text.find("model.config.no_rope_freq = 4"), std::string::npos);
  // A frequency that does not divide the layers (Megatron-Core asserts it does) is written as the list.
  Model ten = m;
  ten.num_layers = 10;
  ten.no_rope_layers.assign(10, false);
  ten.no_rope_layers[3] = ten.no_rope_layers[7] = true;
  EXPECT_EQ(ten.NoRopeFreq(), 0);
  EXPECT_NE(EmitLaunch(LaunchFormat::kMegatron, ten, c, cl, 8).text.find("--no-rope-freq '([0]*3+[1]*1+[0]*3+[1]*1+[0]*2)'"),
            std::string::npos);
  // An irregular pattern is Megatron's list expression; our JSON keeps both forms.
  Model odd = m;
  odd.no_rope_layers.assign(48, false);
  odd.no_rope_layers[0] = odd.no_rope_layers[47] = true;
  EXPECT_EQ(odd.NoRopeFreq(), 0);
  EXPECT_NE(EmitLaunch(LaunchFormat::kMegatron, odd, c, cl, 8).text.find("--no-rope-freq '([1]*1+[0]*46+[1]*1)'"),
            std::string::npos);
  for (const Model& x : {m, odd}) {
    const Model back = ModelFromJson(ModelToJson(x), "back.json");
    EXPECT_EQ(back.no_rope_layers, x.no_rope_layers);
    EXPECT_TRUE(back.qk_l2_norm);
    EXPECT_DOUBLE_EQ(back.rope_high_freq_factor, 1.0);  // the bands round-trip
  }
  // Our format: N above the layers is no NoPE layer; 1 is every layer; the L2 norms refuse MLA and qk_layernorm.
  Json ours = ModelToJson(m);
  ours["no_rope_freq"] = 100;
  EXPECT_TRUE(ModelFromJson(ours, "n100.json").no_rope_layers.empty());
  ours["no_rope_freq"] = 1;
  EXPECT_EQ(ModelFromJson(ours, "n1.json").NoRopeFreq(), 1);
  ours["qk_layernorm"] = true;
  EXPECT_NE(testing::InputErrorOf([&] { ModelFromJson(ours, "both.json"); })
                .find("both.json: /qk_l2_norm: got true, expected false beside qk_layernorm true"),
            std::string::npos);
  EXPECT_EQ(ModelToJson(m)["no_rope_freq"], 4);
  // Maverick's use_qk_norm false and an explicit no_rope_layers (1 where a layer rotates).
  Json mav = Json::parse(scout);
  mav["text_config"]["use_qk_norm"] = false;
  mav["text_config"]["no_rope_layers"] = Json::array();
  for (int i = 0; i < 48; ++i) mav["text_config"]["no_rope_layers"].push_back(i % 2);
  const Model mv = ModelFromJson(mav, "mav.json");
  EXPECT_FALSE(mv.qk_l2_norm);
  EXPECT_EQ(mv.NoRopeFreq(), 0);
  EXPECT_TRUE(mv.no_rope_layers[0] && !mv.no_rope_layers[1]);
}

// GPT-OSS's attention sinks and clamped SwiGLU: named where Megatron-LM's and NeMo's launches do
// not write them; torchtitan's gpt_oss model has them.
TEST(Launch, GptOssSinksAndClampAreNamed) {
  const Built b = Build({"llama3-8b", "dgx-h100", 8, "--mbs 1 --gbs 8"});
  Model oss = ModelFromJson(Json::parse(R"({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
    "num_local_experts": 128, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088, "max_position_embeddings": 131072})"),
                            "oss.json");
  ParallelConfig c = b.c;
  c.ep = 8;
  for (const LaunchFormat f : {LaunchFormat::kMegatron, LaunchFormat::kNemo, LaunchFormat::kTorchtitan}) {
    const LaunchConfig l = EmitLaunch(f, oss, c, b.cl, 8);
    const auto has = [&](const std::string& s) {
      return std::any_of(l.unexpressed.begin(), l.unexpressed.end(),
                         [&](const std::string& u) { return u.find(s) != std::string::npos; });
    };
    EXPECT_EQ(has("attention sinks (a learned logit a head"), f == LaunchFormat::kNemo) << ToString(f);
    EXPECT_EQ(has("the SwiGLU clamped at 7 with alpha 1.702"), f == LaunchFormat::kNemo) << ToString(f);
  }
  // Megatron-LM core_v0.15 writes both: learned softmax offsets, and quick-GeGLU with the offset and clamp.
  const std::vector<std::string> w = ShellWords(EmitLaunch(LaunchFormat::kMegatron, oss, c, b.cl, 8).text);
  auto after = [&](const std::string& flag) {
    const auto it = std::find(w.begin(), w.end(), flag);
    return it == w.end() ? std::string("absent") : it + 1 == w.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(after("--softmax-type"), "learnable");
  EXPECT_EQ(after("--glu-linear-offset"), "1");
  EXPECT_EQ(after("--activation-func-clamp-value"), "7");
  EXPECT_NE(after("--quick-geglu"), "absent");
  EXPECT_EQ(after("--swiglu"), "absent");
  EXPECT_NE(EmitLaunch(LaunchFormat::kTorchtitan, oss, c, b.cl, 8).text.find("name = \"gpt_oss\""), std::string::npos);
}

// Megatron-LM asserts --overlap-param-gather only beside --overlap-grad-reduce (validate_args):
// with one data-parallel rank both are written; without the overlapped reduce neither, and a note.
TEST(Launch, ParamGatherOverlapComesWithTheReduceOverlap) {
  const Built one = Build({"gpt3-175b", "dgx-h100", 64, "--tp 8 --pp 8 --mbs 1 --gbs 64 --zero 1"});
  ASSERT_EQ(one.c.dp, 1);
  const std::string a = EmitLaunch(LaunchFormat::kMegatron, one.m, one.c, one.cl, 64).text;
  EXPECT_NE(a.find("--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"), std::string::npos) << a;
  const Built no = Build({"gpt3-175b", "dgx-h100", 128, "--tp 8 --pp 8 --mbs 1 --gbs 64 --zero 1 --no-overlap-grad-reduce"});
  ASSERT_TRUE(no.c.overlap_param_gather);
  const LaunchConfig b = EmitLaunch(LaunchFormat::kMegatron, no.m, no.c, no.cl, 128);
  const std::vector<std::string> words = ShellWords(b.text);  // the command, not the notes
  EXPECT_EQ(std::count(words.begin(), words.end(), "--overlap-param-gather"), 0) << b.text;
  EXPECT_EQ(std::count(words.begin(), words.end(), "--overlap-grad-reduce"), 0) << b.text;
  EXPECT_NE(b.text.find("allows --overlap-param-gather only with --overlap-grad-reduce"), std::string::npos) << b.text;
  const LaunchConfig n = EmitLaunch(LaunchFormat::kNemo, no.m, no.c, no.cl, 128);
  EXPECT_NE(n.text.find("overlap_grad_reduce=False, overlap_param_gather=False"), std::string::npos) << n.text;
  EXPECT_TRUE(std::any_of(n.unexpressed.begin(), n.unexpressed.end(), [](const std::string& u) {
    return u.find("without the overlapped gradient reduce: written as neither") != std::string::npos;
  }));
}

TEST(Launch, EmitOnTheCommandLine) {
  const auto r = testing::RunShardcast(
      "plan --model llama3-8b --cluster dgx-h100 --gpus 16 --gbs 64 --emit megatron --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["launch"]["format"], "megatron");
  const std::string text = j["launch"]["text"].get<std::string>();
  EXPECT_NE(text.find(fmt::format("--tensor-model-parallel-size {}", j["recommended"]["config"]["tp"].get<int>())),
            std::string::npos);
  const auto bad = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --gbs 8 --emit accelerate");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--emit"), std::string::npos) << bad.err;
  EXPECT_EQ(testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 8 --gbs 8 --emit-file x.toml").exit_code, 2);
  // A configuration that cannot run gets no launch file; one predicted not to fit says so in it.
  EXPECT_TRUE(testing::ExitsTwoWith("simulate --model gpt3-175b --cluster dgx-a100 --gpus 8 --tp 3 --gbs 8 --emit megatron",
                                    "--emit: got a configuration that cannot run (tp*pp = 3*1 = 3 does not divide 8 GPUs)"));
  const auto oom = testing::RunShardcast("simulate --model gpt3-175b --cluster dgx-a100 --gpus 8 --tp 8 --gbs 8 "
                                         "--emit torchtitan --json");
  ASSERT_EQ(oom.exit_code, 0) << oom.err;
  const Json o = Json::parse(oom.out);
  ASSERT_FALSE(o["fits"].get<bool>());
  EXPECT_EQ(o["launch"]["text"].get<std::string>().rfind(
                "# WARNING: shardcast predicts this configuration does not fit in GPU memory: ", 0),
            0u);
  EXPECT_EQ(o["launch"]["warnings"].size(), 1u);
  // 32 layers over pp 3 (no first/last counts): simulated as DeepSpeed splits them, but a
  // Megatron-LM launch of that layout fails at start-up, and the file says so; torchtitan's does not.
  const auto uneven = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 3 --pp 3 --gbs 6 "
                                            "--emit megatron --json");
  ASSERT_EQ(uneven.exit_code, 0) << uneven.err;
  const std::string warned = Json::parse(uneven.out)["launch"]["text"].get<std::string>();
  EXPECT_NE(warned.find("# WARNING: 32 layers do not divide pp = 3, and Megatron-LM asserts that they do unless first/last "
                      "stage layer counts are given: this launch fails at start-up"),
            std::string::npos)
      << warned;
  const auto even = testing::RunShardcast("simulate --model llama3-8b --cluster dgx-h100 --gpus 4 --pp 4 --gbs 8 "
                                          "--emit megatron --json");
  ASSERT_EQ(even.exit_code, 0) << even.err;
  EXPECT_EQ(Json::parse(even.out)["launch"]["text"].get<std::string>().find("layers do not divide"), std::string::npos);
}

// A GB200 NVL72 rack is one NVLink domain of 72 GPUs but 18 hosts of 4: launches start 4
// processes a host, as many as the plan's GPUs in all; a gpus_per_host that does not divide the
// domain is refused.
TEST(Launch, HostsOfAnNvl72Rack) {
  const Model m = LoadModel("llama3-8b");
  const Cluster cl = LoadCluster("gb200-nvl72");
  ASSERT_EQ(cl.gpus_per_node, 72);
  ASSERT_EQ(cl.GpusPerHost(), 4);
  ParallelConfig c;
  c.tp = 4;
  c.pp = 2;
  c.dp = 32;
  c.micro_batch_size = 1;
  c.global_batch_size = 256;
  const LaunchConfig mg = EmitLaunch(LaunchFormat::kMegatron, m, c, cl, 256);
  EXPECT_NE(mg.text.find("--nnodes 64 --nproc-per-node 4"), std::string::npos) << mg.text;
  EXPECT_EQ(ReadMegatron(mg.text).gpus, 256);
  const LaunchConfig nemo = EmitLaunch(LaunchFormat::kNemo, m, c, cl, 256);
  EXPECT_NE(nemo.text.find("trainer.devices = 4"), std::string::npos) << nemo.text;
  EXPECT_NE(nemo.text.find("trainer.num_nodes = 64"), std::string::npos) << nemo.text;
  EXPECT_EQ(LoadCluster("dgx-h100").GpusPerHost(), 8);
  // 18 GPUs are not whole hosts of 4: the launch says what torchrun would start.
  ParallelConfig small = c;
  small.tp = 1;
  small.pp = 1;
  small.dp = 18;
  small.global_batch_size = 36;
  const LaunchConfig odd = EmitLaunch(LaunchFormat::kTorchtitan, m, small, cl, 18);
  ASSERT_EQ(odd.warnings.size(), 1u);
  EXPECT_NE(odd.warnings[0].find("18 GPUs are not whole hosts of 4: as written, the launch starts 5 x 4 = 20 processes"),
            std::string::npos) << odd.warnings[0];
  EXPECT_EQ(odd.text.rfind("# WARNING: 18 GPUs are not whole hosts", 0), 0u);
  EXPECT_TRUE(EmitLaunch(LaunchFormat::kMegatron, m, c, cl, 256).warnings.empty());
  const std::string bad = testing::WriteTemp("nvl.json", R"({"gpu": "gb200", "gpus_per_node": 72, "gpus_per_host": 5,
    "intra_node": {"fabric": "nvswitch", "bandwidth_GBps_per_direction": 900},
    "inter_node": {"nics_per_node": 72, "nic_Gbps": 400, "fabric": "infiniband-ndr"}})");
  const std::string why = testing::InputErrorOf([&] { LoadCluster(bad); });
  EXPECT_NE(why.find("/gpus_per_host"), std::string::npos) << why;
  EXPECT_NE(why.find("a divisor of gpus_per_node = 72"), std::string::npos) << why;
}

}  // namespace
}  // namespace shardcast
