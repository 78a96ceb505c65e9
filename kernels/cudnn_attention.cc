#include "kernels/cudnn_attention.h"

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

namespace shardcast::kernels {
namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the forward and backward graphs.
constexpr std::int64_t kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kdO = 6, kdQ = 7, kdK = 8, kdV = 9;

/// Dims (b, h, s, d) and strides of the (b, s, h, d) layout frameworks keep.
struct Layout {
  std::vector<std::int64_t> dim, stride;
};
Layout Bshd(const AttentionShape& a, int heads) {
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
std::shared_ptr<fe::graph::Graph> ForwardGraph(const AttentionShape& a) {
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

std::shared_ptr<fe::graph::Graph> BackwardGraph(const AttentionShape& a) {
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

struct CudnnAttention::Graphs {
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  Buffers buf;
  std::unordered_map<std::int64_t, void*> fwd_pack, bwd_pack;
  void* ws = nullptr;
};

CudnnAttention::~CudnnAttention() {
  if (!g_) return;
  // As NVIDIA's samples order it: the graphs (their plans) before the handle they were built
  // with, the handle before the buffers (freed with g_).
  if (g_->stream != nullptr) cudaStreamSynchronize(g_->stream);
  g_->fwd.reset();
  g_->bwd.reset();
  if (g_->handle != nullptr) fe::detail::destroy_handle(g_->handle);
}

std::unique_ptr<CudnnAttention> CudnnAttention::Create(const AttentionShape& a, cudaStream_t stream, std::string* why) {
  if (!LoadCudnn(why)) return nullptr;
  std::unique_ptr<CudnnAttention> r(new CudnnAttention());
  r->g_ = std::make_unique<Graphs>();
  Graphs& g = *r->g_;
  try {
    if (fe::detail::create_handle(&g.handle) != CUDNN_STATUS_SUCCESS) {
      g.handle = nullptr;
      *why = "cuDNN: cudnnCreate failed";
      return nullptr;
    }
    fe::detail::set_stream(g.handle, stream);
    g.stream = stream;
    g.fwd = ForwardGraph(a);
    g.bwd = BackwardGraph(a);
    const std::int64_t ws_f = Build(*g.fwd, g.handle, "forward", why);
    if (ws_f < 0) return nullptr;
    const std::int64_t ws_b = Build(*g.bwd, g.handle, "backward", why);
    if (ws_b < 0) return nullptr;
    const std::size_t tokens = static_cast<std::size_t>(a.batch) * static_cast<std::size_t>(a.seq);
    const std::size_t q_elems = tokens * static_cast<std::size_t>(a.heads) * static_cast<std::size_t>(a.head_dim);
    const std::size_t kv_elems = tokens * static_cast<std::size_t>(a.kv_heads) * static_cast<std::size_t>(a.head_dim);
    std::unordered_map<std::int64_t, void*>& p = g.bwd_pack;
    for (std::int64_t uid : {kQ, kO, kdO, kdQ}) p[uid] = g.buf.Get(2 * q_elems, why);
    for (std::int64_t uid : {kK, kV, kdK, kdV}) p[uid] = g.buf.Get(2 * kv_elems, why);
    p[kStats] = g.buf.Get(4 * tokens * static_cast<std::size_t>(a.heads), why);
    g.ws = g.buf.Get(static_cast<std::size_t>(std::max(ws_f, ws_b)), why);
    for (const auto& kv : p) {
      if (kv.second == nullptr) return nullptr;
    }
    if (g.ws == nullptr) return nullptr;
    LaunchFillNormalBf16(p[kQ], q_elems, 11, stream);
    LaunchFillNormalBf16(p[kK], kv_elems, 12, stream);
    LaunchFillNormalBf16(p[kV], kv_elems, 13, stream);
    LaunchFillNormalBf16(p[kdO], q_elems, 14, stream);
    g.fwd_pack = {{kQ, p[kQ]}, {kK, p[kK]}, {kV, p[kV]}, {kO, p[kO]}, {kStats, p[kStats]}};
    // The backward reads a real forward's output and statistics.
    if (!r->Forward(why)) return nullptr;
    const cudaError_t e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
      *why = std::string("cuDNN SDPA forward: ") + cudaGetErrorString(e);
      return nullptr;
    }
  } catch (const std::exception& e) {  // the frontend throws when a cuDNN symbol is missing
    *why = std::string("cuDNN: ") + e.what();
    return nullptr;
  }
  return r;
}

bool CudnnAttention::Forward(std::string* why) {
  fe::error_t st = g_->fwd->execute(g_->handle, g_->fwd_pack, g_->ws);
  if (!st.is_good()) *why = "cuDNN SDPA forward: " + st.get_message();
  return st.is_good();
}

bool CudnnAttention::Backward(std::string* why) {
  fe::error_t st = g_->bwd->execute(g_->handle, g_->bwd_pack, g_->ws);
  if (!st.is_good()) *why = "cuDNN SDPA backward: " + st.get_message();
  return st.is_good();
}

}  // namespace shardcast::kernels
