// execute --backend cuda: one rank's program on one GPU (see cuda_runner.h).
#include "executor/cuda_runner.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <stdexcept>
#include <tuple>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/cuda_kernels.cuh"
#include "kernels/cuda_util.cuh"
#ifdef SHARDCAST_HAVE_CUDNN
#include "kernels/cudnn_attention.h"
#endif

namespace shardcast::cuda_exec {
namespace {

using cudautil::Ck;


struct Gemm {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
};

/// A cuBLASLt bf16 plan of `op`'s shape on random normal operands (heuristic #0).
Gemm MakeGemm(cublasLtHandle_t lt, const Op& op, std::size_t ws_bytes, cudaStream_t s) {
  Gemm g;
  Ck(cudaMalloc(&g.a, 2ull * op.m * op.k), "cudaMalloc");
  Ck(cudaMalloc(&g.b, 2ull * op.k * op.n), "cudaMalloc");
  Ck(cudaMalloc(&g.c, 2ull * op.m * op.n), "cudaMalloc");
  kernels::LaunchFillNormalBf16(g.a, 1ull * op.m * op.k, 11, s);
  kernels::LaunchFillNormalBf16(g.b, 1ull * op.k * op.n, 12, s);
  Ck(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
  Ck(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16BF, op.m, op.k, op.m), "layout");
  Ck(cublasLtMatrixLayoutCreate(&g.lb, CUDA_R_16BF, op.k, op.n, op.k), "layout");
  Ck(cublasLtMatrixLayoutCreate(&g.lc, CUDA_R_16BF, op.m, op.n, op.m), "layout");
  cublasLtMatmulPreference_t pref;
  Ck(cublasLtMatmulPreferenceCreate(&pref), "preference");
  Ck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes),
     "preference attribute");
  int found = 0;
  Ck(cublasLtMatmulAlgoGetHeuristic(lt, g.desc, g.la, g.lb, g.lc, g.lc, pref, 1, &g.algo, &found), "heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  if (found == 0) throw std::runtime_error("cuBLASLt found no algorithm for a GEMM shape");
  return g;
}

/// Elements of the axpy standing in for a memory-bound op of `bytes` (12 bytes each), a multiple
/// of 4 so that the vectorized kernel runs alone, as calibrate times it.
std::size_t AxpyElems(double bytes) {
  const std::size_t n = std::max<std::size_t>(1, static_cast<std::size_t>(bytes / 12));
  return (n + 3) / 4 * 4;
}

using AttentionKey = std::tuple<int, int, int, int, int>;
AttentionKey KeyOf(const Op& op) { return {op.batch, op.heads, op.kv_heads, op.seq, op.head_dim}; }

#ifdef SHARDCAST_HAVE_CUDNN
using AttentionMap = std::map<AttentionKey, std::unique_ptr<kernels::CudnnAttention>>;
#else
using AttentionMap = std::map<AttentionKey, int>;
#endif

/// cuDNN graphs for every attention shape of `ops`. Where one cannot be built (no cuDNN, a shape
/// it does not support), every kAttention op becomes its stand-in GEMMs and `note` says why.
void PrepareAttention(std::vector<Op>* ops, cudaStream_t s, AttentionMap* att, std::string* note) {
  std::string why = "this build found no cuDNN headers";
  bool ok = true;
  for (const Op& op : *ops) {
    if (op.kind != Op::kAttention || att->count(KeyOf(op))) continue;
#ifdef SHARDCAST_HAVE_CUDNN
    auto a = kernels::CudnnAttention::Create({op.batch, op.heads, op.kv_heads, op.seq, op.head_dim}, s, &why);
    if (!a) {
      ok = false;
      break;
    }
    (*att)[KeyOf(op)] = std::move(a);
#else
    (void)s;
    ok = false;
    break;
#endif
  }
  if (ok) {
#ifdef SHARDCAST_HAVE_CUDNN
    if (!att->empty()) *note = kernels::CudnnVersion() + " SDPA";
#endif
    return;
  }
  att->clear();
  *note = "attention ran as GEMMs: " + why;
  for (Op& op : *ops) {
    if (op.kind == Op::kAttention) op.kind = Op::kGemm;
  }
}

}  // namespace

bool Built() { return true; }

bool Usable(std::string* why) { return cudautil::DeviceUsable(why); }

Result Run(const std::vector<Op>& program, int warmup, int steps, double static_bytes) {
  Ck(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t s;
  Ck(cudaStreamCreate(&s), "cudaStreamCreate");
  cublasLtHandle_t lt;
  Ck(cublasLtCreate(&lt), "cublasLtCreate");
  const std::size_t ws_bytes = 32u << 20;
  void* ws = nullptr;
  Ck(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace");
  double held = static_bytes, peak = static_bytes;
  void* state = nullptr;
  if (static_bytes > 0) Ck(cudaMalloc(&state, static_cast<std::size_t>(static_bytes)), "cudaMalloc state");
  // Attention graphs, GEMM plans and memory-bound buffers, prepared once (workspaces, not timed).
  Result r;
  std::vector<Op> ops = program;
  AttentionMap attention;
  PrepareAttention(&ops, s, &attention, &r.attention_note);
  std::map<std::tuple<int, int, int>, Gemm> gemms;
  std::size_t max_elems = 1;
  for (const auto& op : ops) {
    if (op.kind == Op::kMemory) max_elems = std::max(max_elems, AxpyElems(op.bytes));
    if (op.kind != Op::kGemm) continue;
    auto key = std::make_tuple(op.m, op.n, op.k);
    if (!gemms.count(key)) gemms.emplace(key, MakeGemm(lt, op, ws_bytes, s));
  }
  float *x = nullptr, *y = nullptr;
  Ck(cudaMalloc(&x, 4 * max_elems), "cudaMalloc");
  Ck(cudaMalloc(&y, 4 * max_elems), "cudaMalloc");
  kernels::LaunchFillNormal(x, max_elems, 13, s);
  kernels::LaunchFillNormal(y, max_elems, 14, s);
  Ck(cudaStreamSynchronize(s), "sync");

  std::vector<cudaEvent_t> ev(ops.size() + 1);
  for (auto& e : ev) Ck(cudaEventCreate(&e), "cudaEventCreate");
  std::vector<std::vector<double>> per_op(ops.size());
  const float alpha = 1.0f, beta = 0.0f;
  std::map<int, std::pair<void*, double>> saved;
  for (int step = 0; step < warmup + steps; ++step) {
    Ck(cudaEventRecord(ev[0], s), "record");
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      switch (op.kind) {
        case Op::kGemm: {
          Gemm& g = gemms.at(std::make_tuple(op.m, op.n, op.k));
          for (int rep = 0; rep < op.reps; ++rep) {
            Ck(cublasLtMatmul(lt, g.desc, &alpha, g.a, g.la, g.b, g.lb, &beta, g.c, g.lc, g.c, g.lc, &g.algo.algo, ws,
                              ws_bytes, s),
               "cublasLtMatmul");
          }
          break;
        }
        case Op::kAttention: {
#ifdef SHARDCAST_HAVE_CUDNN
          std::string why;
          kernels::CudnnAttention& a = *attention.at(KeyOf(op));
          if (!(op.backward ? a.Backward(&why) : a.Forward(&why))) throw std::runtime_error(why);
#endif
          break;
        }
        case Op::kMemory:
          kernels::LaunchAxpyVec(0.5f, x, y, AxpyElems(op.bytes), s);  // as calibrate times it
          break;
        case Op::kAlloc: {
          void* p = nullptr;
          Ck(cudaMallocAsync(&p, static_cast<std::size_t>(op.bytes) + 1, s), "cudaMallocAsync");
          saved[op.key] = {p, op.bytes};
          held += op.bytes;
          peak = std::max(peak, held);
          break;
        }
        case Op::kFree: {
          auto it = saved.find(op.key);
          if (it != saved.end()) {
            Ck(cudaFreeAsync(it->second.first, s), "cudaFreeAsync");
            held -= it->second.second;
            saved.erase(it);
          }
          break;
        }
      }
      Ck(cudaEventRecord(ev[i + 1], s), "record");
    }
    Ck(cudaEventSynchronize(ev[ops.size()]), "sync");
    if (step >= warmup) {
      float ms = 0;
      Ck(cudaEventElapsedTime(&ms, ev[0], ev[ops.size()]), "elapsed");
      r.step_s.push_back(ms * 1e-3);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        Ck(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "elapsed");
        per_op[i].push_back(ms * 1e-3);
      }
    }
  }
  r.op_secs.resize(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    auto v = per_op[i];
    std::sort(v.begin(), v.end());
    r.op_secs[i] = v.empty() ? 0 : v[v.size() / 2];
  }
  r.peak_bytes = peak;
  for (auto& e : ev) cudaEventDestroy(e);
  for (auto& [k, g] : gemms) {
    cudaFree(g.a);
    cudaFree(g.b);
    cudaFree(g.c);
    cublasLtMatrixLayoutDestroy(g.la);
    cublasLtMatrixLayoutDestroy(g.lb);
    cublasLtMatrixLayoutDestroy(g.lc);
    cublasLtMatmulDescDestroy(g.desc);
  }
  cudaFree(x);
  cudaFree(y);
  if (state) cudaFree(state);
  cudaFree(ws);
  attention.clear();  // cuDNN handles before the stream they run on
  cublasLtDestroy(lt);
  cudaStreamDestroy(s);
  return r;
}

}  // namespace shardcast::cuda_exec
