#include <cmath>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/json_reader.h"
#include "models/loader.h"
#include "models/parallel.h"
#include "tests/test_util.h"

namespace shardcast {
namespace {

using testing::WriteTemp;

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Presets, EveryPresetLoadsWithASource) {
  for (const auto& n : PresetNames(PresetKind::kModel)) {
    Model m = LoadModel(n);
    EXPECT_EQ(m.name, n);
    EXPECT_FALSE(m.source.empty()) << n;
    EXPECT_GT(m.Parameters().total, 0) << n;
  }
  for (const auto& n : PresetNames(PresetKind::kGpu)) {
    Gpu g = LoadGpu(n);
    EXPECT_EQ(g.name, n);
    EXPECT_FALSE(g.source.empty()) << n;
    EXPECT_GT(g.memory_bytes, 0) << n;
  }
  for (const auto& n : PresetNames(PresetKind::kCluster)) {
    Cluster c = LoadCluster(n);
    EXPECT_EQ(c.name, n);
    EXPECT_FALSE(c.source.empty()) << n;
  }
  EXPECT_GE(PresetNames(PresetKind::kModel).size(), 30u);
  EXPECT_GE(PresetNames(PresetKind::kGpu).size(), 17u);
  EXPECT_GE(PresetNames(PresetKind::kCluster).size(), 7u);
}

TEST(Presets, NamesAreCaseInsensitive) {
  EXPECT_EQ(LoadModel("GPT3-175B").name, "gpt3-175b");
  EXPECT_EQ(LoadCluster("DGX-A100").gpu.name, "a100-sxm4-80gb");
}

// Published parameter counts (within 0.5%).
struct Published {
  const char* preset;
  double params;
  const char* source;
};

void PrintTo(const Published& p, std::ostream* os) { *os << p.preset; }

class PublishedParameters : public ::testing::TestWithParam<Published> {};

TEST_P(PublishedParameters, WithinHalfPercent) {
  const auto& p = GetParam();
  double got = static_cast<double>(LoadModel(p.preset).Parameters().total);
  EXPECT_NEAR(got / p.params, 1.0, 0.005) << p.preset << " computed " << got << " vs " << p.params
                                          << " (" << p.source << ")";
}

INSTANTIATE_TEST_SUITE_P(
    Models, PublishedParameters,
    ::testing::Values(Published{"gpt3-175b", 174.6e9, "Narayanan et al. 2021 Table 1 (V=51200)"},
                      Published{"bloom-176b", 176.2e9, "BigScience BLOOM model card"},
                      Published{"llama3-70b", 70.55e9, "Meta Llama 3 model card"},
                      Published{"llama3.1-405b", 405.85e9, "Meta Llama 3.1 model card"},
                      Published{"llama3-8b", 8.03e9, "Meta Llama 3 model card"},
                      Published{"llama2-7b", 6.74e9, "Touvron et al. 2023"},
                      Published{"llama2-70b", 68.98e9, "Touvron et al. 2023"},
                      Published{"mpt-70b", 64.86e9, "llm-foundry benchmark table"},
                      Published{"gpt3-13b", 13.0e9, "Brown et al. 2020 Table 2.1"},
                      Published{"sc21-gpt-1t", 1008.0e9, "Narayanan et al. 2021 Table 1"},
                      Published{"sc21-gpt-18.4b", 18.4e9, "Narayanan et al. 2021 Table 1"},
                      Published{"megatron-22b", 22.0e9, "Korthikanti et al. 2022 Table 3"}),
    [](const auto& param_info) {
      std::string n = param_info.param.preset;
      for (char& c : n) if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

TEST(Model, Gpt3ParameterFormulaTermByTerm) {
  // 12h^2 + 13h per layer (QKV 3h^2+3h, proj h^2+h, MLP 8h^2+5h, two layernorms 4h), tied V*h
  // embedding, learned positions s*h, final layernorm 2h.
  Model m = LoadModel("gpt3-175b");
  const std::int64_t h = 12288;
  ParameterCounts c = m.Parameters();
  EXPECT_EQ(c.per_layer.total(), 12 * h * h + 13 * h);
  EXPECT_EQ(c.total, 96 * (12 * h * h + 13 * h) + 51200 * h + 2048 * h + 2 * h);
}

TEST(Model, FlopsPerTokenIsSixNPlusAttention) {
  Model m = LoadModel("gpt3-175b");
  const double h = 12288, L = 96, s = 2048, V = 51200;
  FlopCounts f = m.Flops(2048);
  // GEMM weights: 12h^2 per layer plus the V*h output projection.
  EXPECT_DOUBLE_EQ(f.per_token_dense, 6.0 * (L * 12 * h * h + V * h));
  EXPECT_DOUBLE_EQ(f.per_token_attention, 12.0 * L * s * h);
  // Matches SC21 eq. 3 without the recompute pass: 72 L h^2 (1 + s/6h + V/12Lh).
  EXPECT_NEAR(f.per_token / (72 * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))), 1.0, 1e-12);
}

TEST(Model, HuggingFaceLlama3_8bMatchesPreset) {
  Model hf = LoadModel(testing::FixturesDir() + "/hf/llama3-8b.json");
  Model preset = LoadModel("llama3-8b");
  EXPECT_EQ(hf.Parameters().total, preset.Parameters().total);
  EXPECT_NEAR(static_cast<double>(hf.Parameters().total) / 8.03e9, 1.0, 0.005);
  EXPECT_EQ(hf.num_query_groups, 8);
  EXPECT_EQ(hf.activation, Activation::kSwiglu);
  EXPECT_EQ(hf.normalization, Normalization::kRMSNorm);
  EXPECT_FALSE(hf.tie_embeddings);
  // RoPE's base: rope_theta of the config, as the preset has it; 10000 where a family has none.
  EXPECT_EQ(hf.rotary_base, 500000.0);
  EXPECT_EQ(preset.rotary_base, 500000.0);
  EXPECT_EQ(LoadModel(testing::FixturesDir() + "/hf/qwen2-7b.json").rotary_base, 1e6);
  EXPECT_EQ(LoadModel("gpt3-175b").rotary_base, 10000.0);
  // Partial rotary: GPT-NeoX's rotary_pct (GPTNeoXConfig's 0.25 when absent), Phi's
  // partial_rotary_factor (1 when absent); our format's rotary_percent round-trips, and needs rope.
  const std::string neox = R"({"model_type": "gpt_neox", "num_hidden_layers": 44, "hidden_size": 6144,
    "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432, "max_position_embeddings": 2048)";
  EXPECT_DOUBLE_EQ(ModelFromJson(Json::parse(neox + "}"), "neox.json").rotary_percent, 0.25);
  EXPECT_DOUBLE_EQ(ModelFromJson(Json::parse(neox + R"(, "rotary_pct": 1})"), "neox1.json").rotary_percent, 1.0);
  const std::string phi = R"({"model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
    "num_attention_heads": 24, "num_key_value_heads": 8, "intermediate_size": 8192, "vocab_size": 200064,
    "max_position_embeddings": 131072)";
  EXPECT_DOUBLE_EQ(ModelFromJson(Json::parse(phi + "}"), "phi.json").rotary_percent, 1.0);
  EXPECT_DOUBLE_EQ(ModelFromJson(Json::parse(phi + R"(, "partial_rotary_factor": 0.75})"), "phi75.json").rotary_percent,
                   0.75);
  Json ours = ModelToJson(ModelFromJson(Json::parse(neox + "}"), "neox.json"));
  EXPECT_DOUBLE_EQ(ours["rotary_percent"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(ModelFromJson(ours, "ours.json").rotary_percent, 0.25);
  EXPECT_FALSE(ModelToJson(LoadModel("llama3-8b")).contains("rotary_percent"));
  ours["position_embedding"] = "learned";
  ours.erase("rotary_base");
  EXPECT_NE(testing::InputErrorOf([&] { ModelFromJson(ours, "learned.json"); })
                .find("learned.json: /rotary_percent: got 0.25, expected no such key without rotary positions"),
            std::string::npos);
}

TEST(Model, HuggingFaceFamiliesMap) {
  const std::string dir = testing::FixturesDir() + "/hf/";
  // GPT-2 small: 124,439,808 parameters (the well-known count of the HF checkpoint).
  EXPECT_EQ(LoadModel(dir + "gpt2.json").Parameters().total, 124439808);
  // Mistral 7B: 7,241,732,096.
  EXPECT_EQ(LoadModel(dir + "mistral-7b.json").Parameters().total, 7241732096);
  // Phi-3-mini: 3,821,079,552 (fused qkv_proj and gate_up_proj hold the same weights as separate
  // ones), its 2047-token sliding window on every layer, no dropout.
  const Model phi3 = LoadModel(dir + "phi-3-mini-4k.json");
  EXPECT_EQ(phi3.Parameters().total, 3821079552);
  EXPECT_EQ(phi3.attention_window, 2047);
  EXPECT_EQ(phi3.WindowedLayers(), phi3.num_layers);
  EXPECT_FALSE(phi3.dropout);
  // Qwen2-7B has QKV biases only: 7,615,616,512.
  EXPECT_EQ(LoadModel(dir + "qwen2-7b.json").Parameters().total, 7615616512);
  // MPT-7B: 6,649,286,656 (no biases; layernorm counted with bias here: +2*h per norm).
  Model mpt = LoadModel(dir + "mpt-7b.json");
  EXPECT_EQ(mpt.position_embedding, PositionEmbedding::kAlibi);
  EXPECT_FALSE(mpt.add_bias_linear);
  EXPECT_NEAR(static_cast<double>(mpt.Parameters().total) / 6.649e9, 1.0, 0.005);
  // GPT-NeoX-20B: 20,554,567,680.
  EXPECT_NEAR(static_cast<double>(LoadModel(dir + "gpt-neox-20b.json").Parameters().total) /
                  20.5546e9, 1.0, 0.005);
  // BLOOM-560m: 559,214,592 (we omit the 2h embedding layernorm: 2,048 fewer).
  EXPECT_NEAR(static_cast<double>(LoadModel(dir + "bloom-560m.json").Parameters().total) /
                  559214592.0, 1.0, 0.005);
}

// Dropout follows each family's keys with the transformers library's defaults when they are
// absent: GPT-2's resid_pdrop/attn_pdrop 0.1; GPT-NeoX's and BLOOM's attention_dropout and
// hidden_dropout 0.0; MPT's attn_config.attn_pdrop and resid_pdrop 0.0; Llama's attention_dropout
// 0.0. Either probability above 0 turns Model::dropout on; a value outside [0, 1] is an error.
TEST(Model, HuggingFaceDropoutFollowsTheFamilysDefaults) {
  const std::string dir = testing::FixturesDir() + "/hf/";
  EXPECT_TRUE(LoadModel(dir + "gpt2.json").dropout);
  EXPECT_FALSE(LoadModel(dir + "gpt-neox-20b.json").dropout);  // no dropout keys: 0.0
  EXPECT_FALSE(LoadModel(dir + "bloom-560m.json").dropout);
  EXPECT_FALSE(LoadModel(dir + "mpt-7b.json").dropout);
  EXPECT_FALSE(LoadModel(dir + "llama3-8b.json").dropout);
  auto with = [&](const std::string& fixture, const std::function<void(Json&)>& edit) {
    Json j = ReadJsonFile(dir + fixture);
    edit(j);
    return ModelFromHuggingFace(j, fixture).dropout;
  };
  EXPECT_TRUE(with("gpt-neox-20b.json", [](Json& j) { j["hidden_dropout"] = 0.1; }));
  EXPECT_TRUE(with("bloom-560m.json", [](Json& j) { j["attention_dropout"] = 0.1; }));
  EXPECT_TRUE(with("mpt-7b.json", [](Json& j) { j["attn_config"]["attn_pdrop"] = 0.1; }));
  EXPECT_TRUE(with("mpt-7b.json", [](Json& j) { j["resid_pdrop"] = 0.1; }));
  EXPECT_FALSE(with("gpt2.json", [](Json& j) { j["resid_pdrop"] = 0.0; j["attn_pdrop"] = 0.0; }));
  // null reads as the default, GPT-2's 0.1: on.
  EXPECT_TRUE(with("gpt2.json", [](Json& j) { j["resid_pdrop"] = nullptr; j["attn_pdrop"] = 0.0; }));
  EXPECT_THROW(with("gpt-neox-20b.json", [](Json& j) { j["hidden_dropout"] = 1.5; }), InputError);
}

// Llama 3.1's RoPE scaling is read from rope_scaling where its rope_type (or legacy type) is
// "llama3"; other kinds (yarn, linear, dynamic) change no count or time and are left; a llama3
// scaling without a factor of at least 1 exits 2. Qwen3's q_norm/k_norm are qk_layernorm.
TEST(Model, HuggingFaceRopeScalingAndQkNorms) {
  const std::string dir = testing::FixturesDir() + "/hf/";
  auto read = [&](const std::function<void(Json&)>& edit) {
    Json j = ReadJsonFile(dir + "llama3-8b.json");
    edit(j);
    return ModelFromHuggingFace(j, "llama.json");
  };
  EXPECT_EQ(read([](Json&) {}).rope_scaling_factor, 0.0);
  EXPECT_EQ(read([](Json& j) { j["rope_scaling"] = Json::parse(R"({"rope_type": "llama3", "factor": 8.0})"); })
                .rope_scaling_factor,
            8.0);
  EXPECT_EQ(read([](Json& j) { j["rope_scaling"] = Json::parse(R"({"type": "llama3", "factor": 32})"); })
                .rope_scaling_factor,
            32.0);
  const Model yarn = read([](Json& j) { j["rope_scaling"] = Json::parse(R"({"rope_type": "yarn", "factor": 4})"); });
  EXPECT_EQ(yarn.rope_scaling_factor, 0.0);
  EXPECT_EQ(yarn.rope_scaling_unread, "yarn (factor 4)");  // not read, but named for describe and the launches
  EXPECT_EQ(read([](Json& j) { j["rope_scaling"] = nullptr; }).rope_scaling_unread, "");
  EXPECT_EQ(testing::InputErrorOf([&] { read([](Json& j) { j["rope_scaling"] = "llama3"; }); }),
            "llama.json: /rope_scaling: got \"llama3\", expected an object with rope_type and factor, or null");
  EXPECT_EQ(testing::InputErrorOf([&] {
              read([](Json& j) { j["rope_scaling"] = Json::parse(R"({"rope_type": "llama3", "factor": 0.5})"); });
            }),
            "llama.json: /rope_scaling/factor: got 0.5, expected a number of at least 1 (Llama 3.1's RoPE scaling factor)");
  EXPECT_FALSE(read([](Json&) {}).qk_layernorm);
  EXPECT_TRUE(read([](Json& j) { j["model_type"] = "qwen3"; }).qk_layernorm);
  // Our JSON: the key round-trips, and needs rotary positions.
  Model m = read([](Json& j) { j["rope_scaling"] = Json::parse(R"({"rope_type": "llama3", "factor": 8})"); });
  EXPECT_EQ(ModelFromJson(ModelToJson(m), "m.json").rope_scaling_factor, 8.0);
  // Multi-latent attention's own q/kv norms are always counted: the switch adds nothing there,
  // and its JSON is the preset's (a Megatron log of DeepSeek-V3 with --qk-layernorm still
  // matches the preset).
  Model ds = LoadModel("deepseek-v3");
  ds.qk_layernorm = true;
  EXPECT_EQ(ModelToJson(ds), ModelToJson(LoadModel("deepseek-v3")));
  EXPECT_EQ(ds.Parameters().total, LoadModel("deepseek-v3").Parameters().total);
}

// Sliding attention windows: Megatron-LM's --window-size W,0 and --window-attn-skip-freq N in our
// JSON; Mistral's sliding_window on every layer and GPT-OSS's on its sliding layer_types
// (GptOssConfig's default alternation: N = 2) and Qwen's from max_window_layers on (the list
// form), modelled. A query attends to min(position, W) keys: (2sW - W^2) / s^2 of the causal FLOPs.
TEST(Model, AttentionWindowsAsMegatronExpressesThem) {
  Json j = ModelToJson(LoadModel("llama3-8b"));
  j["window_size"] = 1024;
  j["window_attn_skip_freq"] = 4;
  const Model w = ModelFromJson(j, "w.json");
  EXPECT_TRUE(w.attention_window_modelled);
  EXPECT_EQ(w.WindowedLayers(), 32 - 32 / 4);
  EXPECT_DOUBLE_EQ(w.WindowFlopRatio(8192), (2.0 * 8192 * 1024 - 1024.0 * 1024) / (8192.0 * 8192));
  EXPECT_DOUBLE_EQ(w.WindowFlopRatio(1024), 1.0);  // the window covers the sequence
  EXPECT_EQ(ModelToJson(ModelFromJson(ModelToJson(w), "w2.json")), ModelToJson(w));
  EXPECT_EQ(LoadModel("llama3-8b").WindowedLayers(), 0);
  j.erase("window_size");
  EXPECT_EQ(testing::InputErrorOf([&] { ModelFromJson(j, "w.json"); }),
            "w.json: /window_attn_skip_freq: got 4, expected no such key without window_size (the window the other "
            "layers attend within)");
  Json ds = ModelToJson(LoadModel("deepseek-v3"));
  ds["window_size"] = 4096;
  EXPECT_NE(testing::InputErrorOf([&] { ModelFromJson(ds, "ds.json"); }).find("no window with multi-latent attention"),
            std::string::npos);
  // Hugging Face configs.
  const std::string dir = testing::FixturesDir() + "/hf/";
  auto hf = [&](const std::function<void(Json&)>& edit) {
    Json h = ReadJsonFile(dir + "llama3-8b.json");
    edit(h);
    return ModelFromHuggingFace(h, "hf.json");
  };
  const Model mistral = hf([](Json& h) { h["model_type"] = "mistral"; h["sliding_window"] = 4096; });
  EXPECT_EQ(mistral.WindowedLayers(), 32);
  EXPECT_EQ(mistral.window_attn_skip_freq, 0);
  EXPECT_EQ(hf([](Json& h) { h["model_type"] = "mistral"; h["sliding_window"] = nullptr; }).WindowedLayers(), 0);
  auto oss_hf = [&](const std::function<void(Json&)>& edit) {
    Json h = Json::parse(R"({"model_type": "gpt_oss", "hidden_size": 2880, "intermediate_size": 2880,
      "num_local_experts": 128, "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
      "head_dim": 64, "vocab_size": 201088, "max_position_embeddings": 131072})");
    edit(h);
    return ModelFromHuggingFace(h, "oss.json");
  };
  const Model oss = oss_hf([](Json&) {});
  EXPECT_EQ(oss.attention_window, 128);  // GptOssConfig's defaults: sliding_window 128, alternating layers
  EXPECT_EQ(oss.window_attn_skip_freq, 2);
  EXPECT_EQ(oss.WindowedLayers(), 18);
  auto types = [](int n, int every) {
    Json t = Json::array();
    for (int i = 0; i < n; ++i) t.push_back((i + 1) % every == 0 ? "full_attention" : "sliding_attention");
    return t;
  };
  const Model every3 = oss_hf([&](Json& h) { h["layer_types"] = types(36, 3); });
  EXPECT_EQ(every3.window_attn_skip_freq, 3);
  EXPECT_EQ(every3.WindowedLayers(), 36 - 12);
  Json odd = types(36, 2);
  odd[0] = "full_attention";  // no skip frequency gives this pattern: Megatron-LM's list form
  const Model irregular = oss_hf([&](Json& h) { h["layer_types"] = odd; });
  EXPECT_EQ(irregular.attention_window, 128);
  EXPECT_TRUE(irregular.attention_window_modelled);
  EXPECT_EQ(irregular.window_layer_pattern.size(), 36u);
  EXPECT_EQ(irregular.WindowedLayers(), 17);
  EXPECT_EQ(ModelToJson(ModelFromJson(ModelToJson(irregular), "i.json")), ModelToJson(irregular));  // the list round-trips
  Json all_full = Json::array();
  for (int i = 0; i < 36; ++i) all_full.push_back("full_attention");
  const Model none = oss_hf([&](Json& h) { h["layer_types"] = all_full; });
  EXPECT_EQ(none.window_attn_skip_freq, 1);  // every layer full: nothing windowed
  EXPECT_EQ(none.WindowedLayers(), 0);
  EXPECT_EQ(testing::InputErrorOf([&] { oss_hf([&](Json& h) { h["layer_types"] = types(35, 2); }); }),
            "oss.json: /layer_types: got an array of 35 entries, expected an array of num_hidden_layers = 36 strings, "
            "\"sliding_attention\" or \"full_attention\"");
  // Our JSON's list form of window_attn_skip_freq (1: the layer slides).
  Json listed = ModelToJson(LoadModel("llama3-8b"));
  listed["window_size"] = 512;
  listed["window_attn_skip_freq"] = Json::array();
  for (int i = 0; i < 32; ++i) listed["window_attn_skip_freq"].push_back(i < 30 ? 1 : 0);
  EXPECT_EQ(ModelFromJson(listed, "l.json").WindowedLayers(), 30);
  listed["window_attn_skip_freq"][3] = 2;
  EXPECT_EQ(testing::InputErrorOf([&] { ModelFromJson(listed, "l.json"); }),
            "l.json: /window_attn_skip_freq/3: got 2, expected 0 (the layer attends to the whole sequence) or 1 (within "
            "the window)");
  listed["window_attn_skip_freq"] = Json::array({1, 0});
  EXPECT_EQ(testing::InputErrorOf([&] { ModelFromJson(listed, "l.json"); }),
            "l.json: /window_attn_skip_freq: got a list of 2 entries, expected an integer N or a list of num_layers = 32 "
            "entries");
  const Model qwen = hf([](Json& h) {
    h["model_type"] = "qwen2";
    h["use_sliding_window"] = true;
    h["sliding_window"] = 4096;
    h["max_window_layers"] = 8;
  });
  EXPECT_EQ(qwen.attention_window, 4096);
  EXPECT_EQ(qwen.WindowedLayers(), 24);  // layers 8-31 slide: Megatron-LM's list form
  EXPECT_FALSE(qwen.window_layer_pattern[7]);
  EXPECT_TRUE(qwen.window_layer_pattern[8]);
}

// ---- the bad-input catalogue: each message checked exactly ---------------------------------

const char* kGoodModel = R"({
  "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024, "num_attention_heads": 8,
  "vocab_size": 1000, "seq_length": 128, "normalization": "layernorm", "activation": "gelu",
  "position_embedding": "learned", "tie_embeddings": true
})";

std::string ModelWith(const std::string& key, const std::string& value_json) {
  Json j = Json::parse(kGoodModel);
  if (value_json.empty()) {
    j.erase(key);
  } else {
    j[key] = Json::parse(value_json);
  }
  return j.dump();
}

std::string LoadError(const std::string& name, const std::string& text) {
  std::string path = WriteTemp(name, text);
  std::string msg = ErrorOf([&] { LoadModel(path); });
  // Messages begin with the path; strip the temp dir to compare the rest.
  auto pos = msg.find(name);
  return pos == std::string::npos ? msg : msg.substr(pos);
}

TEST(BadInput, GoodModelLoads) { EXPECT_EQ(LoadError("good.json", kGoodModel), "no error"); }

TEST(BadInput, MalformedJson) {
  EXPECT_EQ(LoadError("bad1.json", "{\"num_layers\": 4,,}"),
            "bad1.json:1:18: malformed JSON (syntax error while parsing object key - unexpected ','; expected "
            "string literal)");
}

TEST(BadInput, MissingField) {
  EXPECT_EQ(LoadError("bad2.json", ModelWith("hidden_size", "")),
            "bad2.json: /hidden_size: missing required field");
}

TEST(BadInput, WrongType) {
  EXPECT_EQ(LoadError("bad3.json", ModelWith("num_layers", "\"four\"")),
            "bad3.json: /num_layers: got \"four\", expected an integer in [1, 65536]");
  EXPECT_EQ(LoadError("bad3b.json", ModelWith("tie_embeddings", "1")),
            "bad3b.json: /tie_embeddings: got 1, expected true or false");
  EXPECT_EQ(LoadError("bad3c.json", ModelWith("activation", "\"relu\"")),
            "bad3c.json: /activation: got \"relu\", expected one of gelu|swiglu");
}

TEST(BadInput, ZeroNegativeAndAbsurd) {
  EXPECT_EQ(LoadError("bad4.json", ModelWith("num_layers", "0")),
            "bad4.json: /num_layers: got 0, expected an integer in [1, 65536]");
  EXPECT_EQ(LoadError("bad5.json", ModelWith("vocab_size", "-50257")),
            "bad5.json: /vocab_size: got -50257, expected an integer in [1, 16777216]");
  EXPECT_EQ(LoadError("bad6.json", ModelWith("hidden_size", "99999999999999999999")),
            "bad6.json: /hidden_size: got 1e+20, expected an integer in [1, 1048576]");
  EXPECT_EQ(LoadError("bad6b.json", ModelWith("hidden_size", "18446744073709551615")),
            "bad6b.json: /hidden_size: got 18446744073709551615, expected an integer in [1, "
            "1048576]");
}

TEST(BadInput, HeadsMustDivideHidden) {
  EXPECT_EQ(LoadError("bad7.json", ModelWith("num_attention_heads", "7")),
            "bad7.json: /num_attention_heads: got 7, expected a divisor of hidden_size = 256 (or "
            "give kv_channels explicitly)");
}

TEST(BadInput, QueryGroupsMustDivideHeads) {
  EXPECT_EQ(LoadError("bad8.json", ModelWith("num_query_groups", "3")),
            "bad8.json: /num_query_groups: got 3, expected a divisor of num_attention_heads = 8");
}

TEST(BadInput, UnknownKeyIsAnError) {
  EXPECT_EQ(LoadError("bad9.json", ModelWith("num_layer", "4")),
            "bad9.json: /num_layer: unknown key 'num_layer', expected one of activation, "
            "add_bias_linear, add_qkv_bias, attention_sinks, dropout, ffn_hidden_size, hidden_size, kv_channels, kv_lora_rank, "
            "max_position_embeddings, moe_apply_probs_on_input, moe_expert_bias, moe_ffn_hidden_size, moe_first_k_dense_layers, "
            "moe_layer_freq, moe_layer_step, moe_router_bias, moe_router_enable_expert_bias, moe_router_global_batch_balance, "
            "moe_router_group_topk, moe_router_num_groups, moe_router_pre_softmax, moe_router_score_function, moe_router_topk, "
            "moe_router_topk_scaling_factor, moe_shared_expert_intermediate_size, "
            "mtp_num_layers, name, no_rope_freq, normalization, num_attention_heads, num_experts, num_layers, "
            "num_query_groups, position_embedding, q_lora_rank, qk_head_dim, qk_l2_norm, qk_layernorm, qk_pos_emb_head_dim, rope_scaling_factor, rope_scaling_high_freq_factor, rope_scaling_low_freq_factor, "
            "rope_scaling_original_max_position_embeddings, rotary_base, rotary_percent, seq_length, "
            "source, swiglu_limit, tie_embeddings, v_head_dim, vocab_size, window_attn_skip_freq, window_size (did you mean 'num_layers'?)");
  EXPECT_EQ(LoadError("empty_name.json", ModelWith("name", "\"\"")),
            "empty_name.json: /name: got \"\", expected a name, or no name key (the file's name is used)");
  // Keys starting with '_' are comments.
  EXPECT_EQ(LoadError("ok_comment.json", ModelWith("_comment", "\"a note\"")), "no error");
}

TEST(BadInput, UnknownPresetListsCloseOnes) {
  EXPECT_EQ(ErrorOf([] { LoadModel("gpt3-17b"); }),
            "unknown model preset 'gpt3-17b'; close matches: gpt3-13b, gpt3-175b; `shardcast "
            "models` lists all presets, or give a path to a JSON file");
  EXPECT_EQ(ErrorOf([] { LoadCluster("dgx-a10"); }),
            "unknown cluster preset 'dgx-a10'; close matches: dgx-a100, dgx-a100-40gb; "
            "`shardcast models` lists all presets, or give a path to a JSON file");
  EXPECT_EQ(ErrorOf([] { LoadModel("/nonexistent/m.json"); }),
            "/nonexistent/m.json: cannot open file for reading (No such file or directory)");
  // A name from the command line names its flag.
  EXPECT_EQ(ErrorOf([] { LoadModel("nope", "--model"); }),
            "command line: --model: unknown model preset 'nope'; `shardcast models` lists all presets, or give a "
            "path to a JSON file");
  EXPECT_EQ(ErrorOf([] { LoadCluster("dgx-a10", "--cluster"); }).rfind("command line: --cluster: unknown cluster", 0),
            0u);
}

TEST(BadInput, UnsupportedHuggingFaceType) {
  EXPECT_EQ(LoadError("hfbad.json", R"({"model_type": "t5", "d_model": 512})"),
            "hfbad.json: /model_type: got \"t5\", expected a supported Hugging Face model_type: "
            "llama, mistral, qwen2, qwen3, phi3, gpt2, gpt_neox, mpt, bloom, mixtral, qwen2_moe, qwen3_moe, "
            "deepseek_v2, deepseek_v3 (and kimi_k2, its architecture), glm4_moe, llama4 (or llama4_text, its text_config alone), gpt_oss");
}

// docs/inputs.md: the shape keys are required (no transformers placeholder shape); the keys with
// a stated fallback are not.
TEST(BadInput, HuggingFaceShapeKeysAreRequired) {
  EXPECT_EQ(LoadError("hfnolayers.json", R"({"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 16,
    "intermediate_size": 4096, "vocab_size": 32000, "max_position_embeddings": 4096})"),
            "hfnolayers.json: /num_hidden_layers: missing required field");
  const std::string path = WriteTemp("hfnokv.json", R"({"model_type": "llama", "num_hidden_layers": 2,
    "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 32000,
    "max_position_embeddings": 4096})");
  const Model m = LoadModel(path);
  EXPECT_EQ(m.num_query_groups, 16);  // absent num_key_value_heads: MHA
  EXPECT_EQ(m.kv_channels, 64);       // absent head_dim: hidden / heads
}

TEST(BadInput, ClusterWithUnknownGpu) {
  std::string path = WriteTemp("cl.json", R"({"gpu": "a100-sxm9", "gpus_per_node": 8,
    "intra_node": {"fabric": "nvswitch", "bandwidth_GBps_per_direction": 300},
    "inter_node": {"nics_per_node": 8, "nic_Gbps": 200}})");
  std::string msg = ErrorOf([&] { LoadCluster(path); });
  EXPECT_EQ(msg, path + ": /gpu: unknown GPU preset 'a100-sxm9'; close matches: a100-sxm4-40gb, "
                        "a100-sxm4-80gb, h100-sxm; `shardcast models` lists all presets, or give a path to "
                        "a JSON file");
}

// ---- parallel configuration ---------------------------------------------------------------

TEST(Parallel, SizesThatDoNotDivideAreReasons) {
  Model m = LoadModel("gpt3-175b");
  ParallelConfig c;
  c.tp = 8;
  c.pp = 12;
  c.dp = 1;
  c.global_batch_size = 1;
  auto r = InfeasibilityReasons(m, c, 1000, LoadCluster("dgx-a100"));
  ASSERT_EQ(r.size(), 1u) << ::testing::PrintToString(r);
  EXPECT_EQ(r[0], "tp*pp = 8*12 = 96 does not divide 1000 GPUs");
  // Fewer GPUs than one replica needs is said as such.
  r = InfeasibilityReasons(m, c, 64, LoadCluster("dgx-a100"));
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r[0], "tp*pp = 8*12 = 96 GPUs for one model replica, more than the 64 GPUs given");
  c.tp = 7;
  c.pp = 1;
  c.dp = 1;
  r = InfeasibilityReasons(m, c, 7, LoadCluster("dgx-a100"));
  ASSERT_EQ(r.size(), 1u) << ::testing::PrintToString(r);
  EXPECT_EQ(r[0], "tp = 7 does not divide num_attention_heads = 96");
}

// Megatron-LM's argument checks: the interleaved schedule with one virtual stage, a sequence
// length sequence parallelism cannot split, and one longer than a learned position table.
TEST(Parallel, MegatronArgumentRulesAreReasons) {
  const Model m = LoadModel("gpt3-175b");  // learned positions, 2048
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.dp = 1;
  c.global_batch_size = 64;
  c.schedule = Schedule::kInterleaved;
  auto r = InfeasibilityReasons(m, c, 64, LoadCluster("dgx-a100"));
  ASSERT_EQ(r.size(), 1u) << ::testing::PrintToString(r);
  EXPECT_EQ(r[0], "the interleaved schedule needs vp >= 2 virtual stages (got vp = 1; with one it is 1F1B)");
  c.schedule = Schedule::k1F1B;
  c.sequence_parallel = true;
  c.seq_length = 2044;
  r = InfeasibilityReasons(m, c, 64, LoadCluster("dgx-a100"));
  ASSERT_EQ(r.size(), 1u) << ::testing::PrintToString(r);
  EXPECT_EQ(r[0], "sequence parallelism splits the sequence over tp: seq_length = 2044 is not a multiple of tp = 8");
  c.seq_length = 4096;
  r = InfeasibilityReasons(m, c, 64, LoadCluster("dgx-a100"));
  ASSERT_EQ(r.size(), 1u) << ::testing::PrintToString(r);
  EXPECT_EQ(r[0], "seq_length = 4096 exceeds the learned position embeddings' max_position_embeddings = 2048");
  // Rotary positions have no table: a longer sequence is the user's choice.
  EXPECT_TRUE(InfeasibilityReasons(LoadModel("llama2-70b"), c, 64, LoadCluster("dgx-a100")).empty());
}

// A cluster without an inter-node network (fabric "none", or NICs with no rate) runs on one node:
// more GPUs is a reason, not a simulation with zero bandwidth (which never finished).
TEST(Parallel, GpusOnSeveralNodesNeedAnInterNodeNetwork) {
  const Model m = LoadModel("llama3-8b");
  Cluster cl = LoadCluster("dgx-h100");
  ParallelConfig c;
  c.dp = 16;
  c.global_batch_size = 16;
  EXPECT_TRUE(InfeasibilityReasons(m, c, 16, cl).empty());
  for (int variant = 0; variant < 3; ++variant) {
    Cluster off = cl;
    if (variant == 0) off.inter_fabric = "none";
    if (variant == 1) off.nic_Gbps = 0;
    if (variant == 2) off.nics_per_node = 0;
    const auto r = InfeasibilityReasons(m, c, 16, off);
    ASSERT_EQ(r.size(), 1u) << variant;
    EXPECT_NE(r[0].find("16 GPUs span 2 nodes of 8, but cluster 'dgx-h100' has no inter-node network"),
              std::string::npos)
        << r[0];
    ParallelConfig one = c;
    one.dp = 8;
    one.global_batch_size = 8;
    EXPECT_TRUE(InfeasibilityReasons(m, one, 8, off).empty()) << variant;  // one node needs no network
  }
}

TEST(Parallel, ZeroBytesPerParamMatchRajbhandari) {
  // With 2-byte gradients the ZeRO paper's 16, 4+12/d, 2+14/d, 16/d.
  const double d = 64;
  EXPECT_DOUBLE_EQ(BytesPerParam(0, 64, false).total(), 16.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(1, 64, false).total(), 4.0 + 12.0 / d);
  EXPECT_DOUBLE_EQ(BytesPerParam(2, 64, false).total(), 2.0 + 14.0 / d);
  EXPECT_DOUBLE_EQ(BytesPerParam(3, 64, false).total(), 16.0 / d);
  // Megatron-LM's fp32 main grads: 18, 6+12/d, 2+16/d, 18/d.
  EXPECT_DOUBLE_EQ(BytesPerParam(0, 64, true).total(), 18.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(1, 64, true).total(), 6.0 + 12.0 / d);
  EXPECT_DOUBLE_EQ(BytesPerParam(2, 64, true).total(), 2.0 + 16.0 / d);
  EXPECT_DOUBLE_EQ(BytesPerParam(3, 64, true).total(), 18.0 / d);
}

TEST(Parallel, DeepSpeedOptimizersStateAndGradientReduction) {
  ParallelConfig c;
  c.dp = 8;
  c.zero_stage = 1;
  // Megatron's distributed optimizer: 2 + 4 + 12/d, fp32 gradients reduce-scattered.
  EXPECT_DOUBLE_EQ(BytesPerParam(c).total(), 6.0 + 12.0 / 8);
  EXPECT_DOUBLE_EQ(GradReduceBytesPerParam(c), 4.0);
  EXPECT_FALSE(GradReduceIsAllReduce(c));
  // DeepSpeed ZeRO-1 (stage_1_and_2.py): 16-bit params and grads, 12/d master + Adam, and the
  // owner's fp32 gradient partition 4/d; 16-bit gradient buckets all-reduced (its multi-rank
  // bucket all-reduce, v0.12.4+), or before v0.12.4 reduced to their owners.
  c.optimizer_impl = OptimizerImpl::kDeepSpeedZero;
  EXPECT_DOUBLE_EQ(BytesPerParam(c).total(), 2.0 + 2.0 + 16.0 / 8);
  EXPECT_DOUBLE_EQ(GradReduceBytesPerParam(c), 2.0);
  EXPECT_TRUE(GradReduceIsAllReduce(c));
  c.ds_multi_rank_bucket_allreduce = false;
  EXPECT_FALSE(GradReduceIsAllReduce(c));
  c.zero_stage = 2;  // ZeRO-2 also shards the 16-bit gradients
  EXPECT_DOUBLE_EQ(BytesPerParam(c).total(), 2.0 + 2.0 / 8 + 16.0 / 8);
  // Without contiguous gradients both stages all-reduce each bucket (buffered_reduce_fallback);
  // stage 3 has no such path.
  c.ds_contiguous_gradients = false;
  EXPECT_TRUE(GradReduceIsAllReduce(c));
  c.zero_stage = 1;
  EXPECT_TRUE(GradReduceIsAllReduce(c));
  c.zero_stage = 3;
  EXPECT_FALSE(GradReduceIsAllReduce(c));
  c.ds_contiguous_gradients = true;
  // DeepSpeed BF16_Optimizer (bf16_optimizer.py): bf16 params 2, bf16 grads 2, fp32 grad
  // accumulation 4 (unsharded), fp32 master + Adam 12/d; fp32 gradients all-reduced.
  c.zero_stage = 1;
  c.optimizer_impl = OptimizerImpl::kDeepSpeedBf16;
  EXPECT_DOUBLE_EQ(BytesPerParam(c).weights, 2.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).grads, 6.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).optimizer, 12.0 / 8);
  EXPECT_DOUBLE_EQ(GradReduceBytesPerParam(c), 4.0);
  EXPECT_TRUE(GradReduceIsAllReduce(c));
  EXPECT_STREQ(ToString(c.optimizer_impl), "deepspeed-bf16");
}

TEST(Parallel, TorchFsdpKeepsTheFp32ShardAsTheMaster) {
  // PyTorch FSDP/FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): fp32
  // parameter shard 4/d (the master), fp32 gradient shard 4/d, Adam m and v 8/d; no 16-bit copy
  // but the gathered parameters.
  ParallelConfig c;
  c.dp = 8;
  c.optimizer_impl = OptimizerImpl::kTorchFsdp;
  const double d = 8;
  c.zero_stage = 3;  // FULL_SHARD: 16/d, against Megatron's 18/d
  EXPECT_DOUBLE_EQ(BytesPerParam(c).weights, 4.0 / d);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).grads, 4.0 / d);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).optimizer, 8.0 / d);
  EXPECT_DOUBLE_EQ(GradReduceBytesPerParam(c), 4.0);
  ParallelConfig megatron = c;
  megatron.optimizer_impl = OptimizerImpl::kMegatron;
  EXPECT_DOUBLE_EQ(BytesPerParam(megatron).total() - BytesPerParam(c).total(), 2.0 / d);
  c.zero_stage = 2;  // SHARD_GRAD_OP: the gathered bf16 parameters held from forward to backward
  EXPECT_DOUBLE_EQ(BytesPerParam(c).total(), 2.0 + 16.0 / d);
  // FSDP2 under a pipeline (ZeRO-1's reading): gathered bf16 parameters and the unsharded fp32
  // accumulated gradient through the schedule; the gradient shard exists only after the last
  // reduce-scatter unless an earlier flush reduced into it.
  c.zero_stage = 1;
  c.pp = 4;
  EXPECT_DOUBLE_EQ(BytesPerParam(c).weights, 2.0 + 4.0 / d);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).grads, 4.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).total(), BytesPerParam(1, 8, true).total());
  c.pipeline_flushes = 2;
  EXPECT_DOUBLE_EQ(BytesPerParam(c).grads, 4.0 + 4.0 / d);
  c.flush_grad_reduce = false;  // reduced once, after the last flush
  EXPECT_DOUBLE_EQ(BytesPerParam(c).grads, 4.0);
  c.fp32_main_grads = false;  // reduce_dtype bf16: bf16 accumulation, bf16 reduce-scatter
  EXPECT_DOUBLE_EQ(BytesPerParam(c).grads, 2.0);
  EXPECT_DOUBLE_EQ(GradReduceBytesPerParam(c), 2.0);
  // DDP: fp32 parameters and their bf16 autocast casts, fp32 .grad and DDP's bucket buffers
  // (gradient_as_bucket_view off), Adam's m and v; fp32 gradients all-reduced.
  c.zero_stage = 0;
  EXPECT_DOUBLE_EQ(BytesPerParam(c).weights, 4.0 + 2.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).grads, 4.0 + 4.0);
  EXPECT_DOUBLE_EQ(BytesPerParam(c).optimizer, 8.0);
  EXPECT_DOUBLE_EQ(GradReduceBytesPerParam(c), 4.0);
  c.precision = Precision::kFp32;  // no casts
  EXPECT_DOUBLE_EQ(BytesPerParam(c).weights, 4.0);
  EXPECT_STREQ(ToString(c.optimizer_impl), "fsdp");
}

TEST(Parallel, StageParametersSumToModelPlusOutputCopy) {
  Model m = LoadModel("gpt3-175b");
  double sum_tp1 = 0;
  for (int s = 0; s < 8; ++s) sum_tp1 += ParametersOfStage(m, 1, 8, s).total();
  // With pp > 1 the last stage keeps its own copy of the tied embedding (Megatron-LM).
  EXPECT_DOUBLE_EQ(sum_tp1, static_cast<double>(m.Parameters().total + 51200LL * 12288));
  EXPECT_EQ(LayersOfStage(10, 4, 0), 3);
  EXPECT_EQ(LayersOfStage(10, 4, 3), 2);
  // BLOOM: 70 layers + embedding + output = 72 slots over 12 stages: 5, 6 x 10, 5.
  EXPECT_EQ(LayersOfStage(70, 12, 0, true), 5);
  EXPECT_EQ(LayersOfStage(70, 12, 5, true), 6);
  EXPECT_EQ(LayersOfStage(70, 12, 11, true), 5);
  std::int64_t total = 0;
  for (int s = 0; s < 12; ++s) total += LayersOfStage(70, 12, s, true);
  EXPECT_EQ(total, 70);
}

}  // namespace
}  // namespace shardcast

namespace shardcast {
namespace {

TEST(HuggingFace, ExpertsUnderDenseTypesAreRefusedAndFoldersWork) {
  std::string path = testing::WriteTemp("mixtral.json", R"({"model_type": "mixtral", "num_hidden_layers": 32,
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 32768, "num_local_experts": 8})");
  EXPECT_EQ(LoadModel(path).moe.num_experts, 8);
  EXPECT_EQ(LoadModel(path).moe.top_k, 2);  // transformers' MixtralConfig default
  // One local expert is a dense MLP, but not with MixtralConfig's two experts per token.
  path = testing::WriteTemp("mixtral_one.json", R"({"model_type": "mixtral", "num_hidden_layers": 32,
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 32768, "num_local_experts": 1})");
  EXPECT_EQ(testing::InputErrorOf([&] { LoadModel(path); }),
            path + ": /num_experts_per_tok: got 2, expected 1 to num_local_experts = 1 experts per token");
  // Experts under a dense model_type: the pointer names the expert count; one expert is dense.
  // The same Mistral config with one extra key each time.
  auto mistral = [](const std::string& name, const std::string& extra) {
    return testing::WriteTemp(name, R"({"model_type": "mistral", "num_hidden_layers": 32, "hidden_size": 4096,
      "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
      "max_position_embeddings": 32768, )" + extra + "}");
  };
  path = mistral("mistral_moe.json", R"("num_local_experts": 8)");
  EXPECT_EQ(testing::InputErrorOf([&] { LoadModel(path); }),
            path + ": /num_local_experts: got 8, expected a dense model for model_type \"mistral\" (its experts "
                   "would be ignored; the mixture-of-experts types are mixtral, qwen2_moe, qwen3_moe, deepseek_v2, "
                   "deepseek_v3, glm4_moe, llama4, gpt_oss)");
  EXPECT_EQ(LoadModel(mistral("mistral_one_expert.json", R"("num_local_experts": 1)")).num_layers, 32);
  path = mistral("mistral_string_experts.json", R"("n_routed_experts": "8")");
  EXPECT_EQ(testing::InputErrorOf([&] { LoadModel(path); }),
            path + ": /n_routed_experts: got \"8\", expected a number of experts (null, 0 or 1 for a dense model)");
  // A folder holding config.json is a model; its name is the folder's.
  auto dir = shardcast::testing::TestTempDir() / "My-Llama-3-8B";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::FixturesDir() + "/hf/llama3-8b.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  Model m = LoadModel(dir.string());
  EXPECT_EQ(m.name, "My-Llama-3-8B");
  EXPECT_EQ(m.Parameters().total, LoadModel("llama3-8b").Parameters().total);
  // config.json given from inside its folder (no folder in the path) is named after the folder too.
  struct Cwd {  // back to the test's folder whatever LoadModel does
    std::filesystem::path here = std::filesystem::current_path();
    ~Cwd() { std::filesystem::current_path(here); }
  };
  std::string bare, dotted;
  {
    const Cwd cwd;
    std::filesystem::current_path(dir);
    bare = LoadModel("config.json").name;
    dotted = LoadModel("./config.json").name;
  }
  EXPECT_EQ(bare, "My-Llama-3-8B");
  EXPECT_EQ(dotted, "My-Llama-3-8B");
  // Bad KV head count names the Hugging Face key.
  std::string bad = testing::WriteTemp("badkv.json", R"({"model_type": "llama", "num_hidden_layers": 2,
    "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8, "num_key_value_heads": 5,
    "vocab_size": 1000, "max_position_embeddings": 128})");
  try {
    LoadModel(bad);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), bad + ": /num_key_value_heads: got 5, expected a divisor of num_attention_heads = 8");
  }
}

// ModelToJson writes every field ModelFromJson reads: each preset survives the round trip with
// the same parameter count and FLOPs per token.
TEST(Models, ModelJsonRoundTripsEveryPreset) {
  for (const auto& name : PresetNames(PresetKind::kModel)) {
    const Model m = LoadModel(name);
    const Json j = ModelToJson(m);
    const Model back = ModelFromJson(j, name + ".json");
    EXPECT_EQ(ModelToJson(back), j) << name;
    EXPECT_EQ(back.Parameters().total, m.Parameters().total) << name;
    EXPECT_EQ(back.Flops(m.seq_length).per_token, m.Flops(m.seq_length).per_token) << name;
    EXPECT_EQ(back.kv_channels, m.kv_channels) << name;
    EXPECT_EQ(back.dropout, m.dropout) << name;
  }
}

}  // namespace
}  // namespace shardcast
