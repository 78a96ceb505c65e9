#include "calibrate/cudnn_attention.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include <cudnn_frontend.h>

#include "kernels/cuda_kernels.cuh"

// The frontend's run-time loading (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING) resolves every cuDNN
// call through this handle, which the program defines and opens.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // NOLINT(misc-definitions-in-headers): the frontend's hook
}  // namespace cudnn_frontend

namespace shardcast::cuda {
namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the forward and backward graphs.
constexpr std::int64_t kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kdO = 6, kdQ = 7, kdK = 8, kdV = 9;

/// Dims (b, h, s, d) and strides of the (b, s, h, d) layout frameworks keep.
struct Layout {
  std::vector<std::int64_t> dim, stride;
};
Layout Bshd(const AttentionSample& a, int heads) {
  const std::int64_t b = a.batch, h = heads, s = a.seq, d = a.head_dim;
  return {{b, h, s, d}, {s * h * d, d, h * d, 1}};
}

std::shared_ptr<fe::graph::Tensor_attributes> Input(fe::graph::Graph& g, const char* name, std::int64_t uid,
                                                    const Layout& l) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(l.dim).set_stride(l.stride));
}

std::shared_ptr<fe::graph::Graph> NewGraph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

/// Forward: O and the fp32 softmax statistics (log-sum-exp) the backward needs.
std::shared_ptr<fe::graph::Graph> ForwardGraph(const AttentionSample& a) {
  auto g = NewGraph();
  const Layout q = Bshd(a, a.heads), kv = Bshd(a, a.kv_heads);
  auto opt = fe::graph::SDPA_attributes()
                 .set_name("sdpa_forward")
                 .set_generate_stats(true)
                 .set_attn_scale(1.0f / std::sqrt(static_cast<float>(a.head_dim)));
  opt.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [o, stats] = g->sdpa(Input(*g, "Q", kQ, q), Input(*g, "K", kK, kv), Input(*g, "V", kV, kv), opt);
  o->set_output(true).set_uid(kO).set_dim(q.dim).set_stride(q.stride);
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> BackwardGraph(const AttentionSample& a) {
  auto g = NewGraph();
  const Layout q = Bshd(a, a.heads), kv = Bshd(a, a.kv_heads);
  const std::int64_t b = a.batch, h = a.heads, s = a.seq;
  auto stats = g->tensor(fe::graph::Tensor_attributes()
                             .set_name("Stats")
                             .set_uid(kStats)
                             .set_dim({b, h, s, 1})
                             .set_stride({h * s, s, 1, 1})
                             .set_data_type(fe::DataType_t::FLOAT));
  auto opt = fe::graph::SDPA_backward_attributes()
                 .set_name("sdpa_backward")
                 .set_attn_scale(1.0f / std::sqrt(static_cast<float>(a.head_dim)));
  opt.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  auto [dq, dk, dv] = g->sdpa_backward(Input(*g, "Q", kQ, q), Input(*g, "K", kK, kv), Input(*g, "V", kV, kv),
                                       Input(*g, "O", kO, q), Input(*g, "dO", kdO, q), stats, opt);
  dq->set_output(true).set_uid(kdQ).set_dim(q.dim).set_stride(q.stride);
  dk->set_output(true).set_uid(kdK).set_dim(kv.dim).set_stride(kv.stride);
  dv->set_output(true).set_uid(kdV).set_dim(kv.dim).set_stride(kv.stride);
  return g;
}

/// Device buffers of one configuration, freed on scope exit.
class Buffers {
 public:
  ~Buffers() {
    for (void* p : owned_) cudaFree(p);
  }
  /// `bytes` of device memory, or nullptr (out of memory; `why` set).
  void* Get(std::size_t bytes, std::string* why) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<std::size_t>(bytes, 1));
    if (e != cudaSuccess) {
      *why = std::string("cudaMalloc: ") + cudaGetErrorString(e);
      return nullptr;
    }
    owned_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> owned_;
};

/// Builds `g` (heuristic mode A, then the fallback list) and returns its workspace size, or -1
/// with `why`.
std::int64_t Build(fe::graph::Graph& g, cudnnHandle_t handle, const char* pass, std::string* why) {
  fe::error_t st = g.build(handle, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (!st.is_good()) {
    *why = std::string("cuDNN SDPA ") + pass + " graph: " + st.get_message();
    return -1;
  }
  std::int64_t ws = 0;
  st = g.get_workspace_size(ws);
  if (!st.is_good()) {
    *why = std::string("cuDNN SDPA ") + pass + " workspace: " + st.get_message();
    return -1;
  }
  return ws;
}

/// Median seconds of `reps` calls of `fn` after `warmup`, timed with events on `stream`; a
/// negative value when a call fails (`why` set by `fn`).
template <class F>
double TimeCalls(F fn, cudaStream_t stream, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) {
    if (!fn()) return -1;
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start, stream);
    const bool ok = fn();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    if (!ok) break;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    t.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (t.size() != static_cast<std::size_t>(reps) || t.empty()) return -1;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Times one configuration: false with `why` on failure.
bool TimeOne(AttentionSample* a, cudnnHandle_t handle, cudaStream_t stream, int warmup, int reps, std::string* why) {
  auto fwd = ForwardGraph(*a);
  auto bwd = BackwardGraph(*a);
  const std::int64_t ws_f = Build(*fwd, handle, "forward", why);
  if (ws_f < 0) return false;
  const std::int64_t ws_b = Build(*bwd, handle, "backward", why);
  if (ws_b < 0) return false;
  const std::size_t tokens = static_cast<std::size_t>(a->batch) * static_cast<std::size_t>(a->seq);
  const std::size_t q_elems = tokens * static_cast<std::size_t>(a->heads * a->head_dim);
  const std::size_t kv_elems = tokens * static_cast<std::size_t>(a->kv_heads * a->head_dim);
  Buffers buf;
  std::unordered_map<std::int64_t, void*> p;
  for (std::int64_t uid : {kQ, kO, kdO, kdQ}) p[uid] = buf.Get(2 * q_elems, why);
  for (std::int64_t uid : {kK, kV, kdK, kdV}) p[uid] = buf.Get(2 * kv_elems, why);
  p[kStats] = buf.Get(4 * tokens * static_cast<std::size_t>(a->heads), why);
  void* ws = buf.Get(static_cast<std::size_t>(std::max(ws_f, ws_b)), why);
  for (const auto& [uid, ptr] : p) {
    if (ptr == nullptr) return false;
  }
  if (ws == nullptr) return false;
  // Random normal inputs, never zeros (power and clocks depend on the data).
  kernels::LaunchFillNormalBf16(p[kQ], q_elems, 11, stream);
  kernels::LaunchFillNormalBf16(p[kK], kv_elems, 12, stream);
  kernels::LaunchFillNormalBf16(p[kV], kv_elems, 13, stream);
  kernels::LaunchFillNormalBf16(p[kdO], q_elems, 14, stream);
  std::unordered_map<std::int64_t, void*> fp = {{kQ, p[kQ]}, {kK, p[kK]}, {kV, p[kV]}, {kO, p[kO]}, {kStats, p[kStats]}};
  std::unordered_map<std::int64_t, void*> bp = p;
  auto run = [&](fe::graph::Graph& g, std::unordered_map<std::int64_t, void*>& pack, const char* pass) {
    fe::error_t st = g.execute(handle, pack, ws);
    if (!st.is_good()) *why = std::string("cuDNN SDPA ") + pass + ": " + st.get_message();
    return st.is_good();
  };
  a->fwd_s = TimeCalls([&] { return run(*fwd, fp, "forward"); }, stream, warmup, reps);
  if (a->fwd_s < 0) return false;
  a->bwd_s = TimeCalls([&] { return run(*bwd, bp, "backward"); }, stream, warmup, reps);
  if (a->bwd_s < 0) return false;
  const cudaError_t e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    *why = std::string("cuDNN SDPA: ") + cudaGetErrorString(e);
    return false;
  }
  return true;
}

}  // namespace

bool LoadCudnn(std::string* why) {
  if (fe::cudnn_dlhandle != nullptr) return true;
  for (const char* name : {"libcudnn.so.9", "libcudnn.so"}) {
    fe::cudnn_dlhandle = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (fe::cudnn_dlhandle != nullptr) return true;
  }
  const char* e = dlerror();
  *why = std::string("cuDNN not found (") + (e != nullptr ? e : "dlopen libcudnn.so.9 failed") + ")";
  return false;
}

std::string CudnnVersion() {
  if (fe::cudnn_dlhandle == nullptr) return "";
  const std::int64_t v = fe::detail::get_backend_version();  // MAJOR * 10000 + MINOR * 100 + PATCH (cuDNN 9)
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::vector<AttentionSample> TimeCudnnAttention(const std::vector<AttentionSample>& shapes, cudaStream_t stream,
                                                int warmup, int reps, std::string* why) {
  std::vector<AttentionSample> out;
  if (!LoadCudnn(why)) return out;
  cudnnHandle_t handle = nullptr;
  try {
    if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS) {
      *why = "cuDNN: cudnnCreate failed";
      return out;
    }
    fe::detail::set_stream(handle, stream);
    for (AttentionSample a : shapes) {
      if (!TimeOne(&a, handle, stream, warmup, reps, why)) break;
      out.push_back(a);
    }
  } catch (const std::exception& e) {  // the frontend throws when a symbol is missing
    *why = std::string("cuDNN: ") + e.what();
  }
  if (handle != nullptr) fe::detail::destroy_handle(handle);
  return out;
}

}  // namespace shardcast::cuda
