// calibrate --backend cuda: cuBLASLt GEMMs, the kernels of kernels/, and NCCL collectives over
// MPI ranks, timed with CUDA events (medians after warm-up). See docs/calibrate.md.
#include "calibrate/cuda_backend.h"
#ifdef SHARDCAST_HAVE_CUDNN
#include "kernels/cudnn_attention.h"
#endif

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <array>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include "kernels/cpu_kernels.h"
#include "kernels/cuda_kernels.cuh"
#include "kernels/cuda_util.cuh"

namespace shardcast::cuda {
namespace {

using cudautil::Ck;

void Ck(ncclResult_t e, const char* what) {
  if (e != ncclSuccess) throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(e));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median seconds per call of `fn` over `reps` calls, each timed with CUDA events.
template <class F>
double TimeEvents(F fn, int warmup, int reps, cudaStream_t s) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  Ck(cudaEventCreate(&a), "cudaEventCreate");
  Ck(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    Ck(cudaEventRecord(a, s), "cudaEventRecord");
    fn();
    Ck(cudaEventRecord(b, s), "cudaEventRecord");
    Ck(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    Ck(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return Median(t);
}

double MaxOverRanks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

/// NVML, loaded at run time from the driver's libnvidia-ml.so.1 (no header or link needed; the
/// few entry points used are declared here as NVML's API documents them): the SM clock, the
/// temperature and the power of the GPU a CUDA device is, matched by PCI bus id.
class Nvml {
 public:
  /// Opens NVML for `cuda_device`; false with `why` when it cannot be read.
  bool Open(int cuda_device, std::string* why) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (lib_ == nullptr) {
      *why = "libnvidia-ml.so.1 not found";
      return false;
    }
    using InitFn = int (*)();
    using ByBusFn = int (*)(const char*, void**);
    auto init = reinterpret_cast<InitFn>(dlsym(lib_, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<ByBusFn>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<ClockFn>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    temp_ = reinterpret_cast<ClockFn>(dlsym(lib_, "nvmlDeviceGetTemperature"));
    power_ = reinterpret_cast<PowerFn>(dlsym(lib_, "nvmlDeviceGetPowerUsage"));
    char bus[32] = {0};
    if (init == nullptr || by_bus == nullptr || clock_ == nullptr || init() != 0 ||
        cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess || by_bus(bus, &dev_) != 0) {
      *why = "NVML could not open the device";
      dev_ = nullptr;
      return false;
    }
    return true;
  }
  /// The SM clock (NVML_CLOCK_SM = 1) in MHz, 0 when unread.
  int SmClockMHz() const { return Read(clock_, 1); }
  /// The GPU temperature (NVML_TEMPERATURE_GPU = 0) in degrees C, 0 when unread.
  int TemperatureC() const { return Read(temp_, 0); }
  /// The board power in watts (nvmlDeviceGetPowerUsage reports milliwatts), 0 when unread.
  double PowerW() const {
    unsigned mw = 0;
    return dev_ != nullptr && power_ != nullptr && power_(dev_, &mw) == 0 ? mw / 1000.0 : 0.0;
  }

 private:
  using ClockFn = int (*)(void*, int, unsigned*);
  using PowerFn = int (*)(void*, unsigned*);
  int Read(ClockFn f, int kind) const {
    unsigned v = 0;
    return dev_ != nullptr && f != nullptr && f(dev_, kind, &v) == 0 ? static_cast<int>(v) : 0;
  }
  void* lib_ = nullptr;
  void* dev_ = nullptr;
  ClockFn clock_ = nullptr, temp_ = nullptr;
  PowerFn power_ = nullptr;
};

/// C[m,n] = A[m,k] B[k,n], bf16 in, fp32 accumulate, column-major, 32 MiB workspace. Before it
/// is timed, the shape runs back to back for `soak_s` seconds (steady clocks for this shape),
/// NVML read while those run.
GemmSample TimeGemm(cublasLtHandle_t lt, int m, int n, int k, void* ws, std::size_t ws_bytes, cudaStream_t s, bool quick,
                    double soak_s = 0, const Nvml* nvml = nullptr) {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  Ck(cudaMalloc(&a, 2ull * m * k), "cudaMalloc");
  Ck(cudaMalloc(&b, 2ull * k * n), "cudaMalloc");
  Ck(cudaMalloc(&c, 2ull * m * n), "cudaMalloc");
  kernels::LaunchFillNormalBf16(a, 1ull * m * k, 1, s);
  kernels::LaunchFillNormalBf16(b, 1ull * k * n, 2, s);
  cublasLtMatmulDesc_t desc;
  Ck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  cublasLtMatrixLayout_t la, lb, lc;
  Ck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, m, k, m), "layout");
  Ck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k), "layout");
  Ck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m), "layout");
  cublasLtMatmulPreference_t pref;
  Ck(cublasLtMatmulPreferenceCreate(&pref), "preference");
  Ck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes),
     "preference attribute");
  cublasLtMatmulHeuristicResult_t res[8];
  int found = 0;
  Ck(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 8, res, &found), "heuristic");
  const float alpha = 1.0f, beta = 0.0f;
  GemmSample g;
  g.m = m;
  g.n = n;
  g.k = k;
  const int reps = quick ? 10 : 30;
  if (found > 0 && soak_s > 0) {
    auto call = [&] {
      Ck(cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &res[0].algo, ws, ws_bytes, s),
         "cublasLtMatmul");
    };
    const double t = TimeEvents(call, 1, 3, s);
    const long calls = std::min(100000L, static_cast<long>(std::ceil(soak_s / std::max(t, 1e-7))));
    // Queued back to back until the soak's end (launches block once CUDA's queue is full); NVML
    // read at 80% of it, and kept only if the device is still busy then.
    const auto start = std::chrono::steady_clock::now();
    const auto at = [&](double f) { return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(f * soak_s)); };
    for (long i = 0; i < calls && std::chrono::steady_clock::now() < at(1.0); ++i) call();
    if (nvml != nullptr) {
      std::this_thread::sleep_until(at(0.8));
      const int clock = nvml->SmClockMHz(), temp = nvml->TemperatureC();
      const double power = nvml->PowerW();
      if (cudaStreamQuery(s) == cudaErrorNotReady) {
        g.sm_clock_mhz = clock;
        g.temperature_c = temp;
        g.power_w = power;
      }
    }
    Ck(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
  for (int i = 0; i < found && i < (quick ? 1 : 4); ++i) {
    const double t = TimeEvents(
        [&] {
          Ck(cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &res[i].algo, ws, ws_bytes, s),
             "cublasLtMatmul");
        },
        5, reps, s);
    if (i == 0) g.heuristic0_s = t;
    g.best_s = g.best_s == 0 ? t : std::min(g.best_s, t);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return g;
}

/// Runs each CUDA kernel on a small input and compares with the CPU reference.
std::string CheckKernels(cudaStream_t s) {
  const std::size_t rows = 4, cols = 300, n = rows * cols;
  std::vector<float> x(n), gamma(cols, 1.25f), beta(cols, -0.5f), ref(n), got(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  float *dx, *dg, *db, *dy;
  Ck(cudaMalloc(&dx, n * 4), "cudaMalloc");
  Ck(cudaMalloc(&dg, cols * 4), "cudaMalloc");
  Ck(cudaMalloc(&db, cols * 4), "cudaMalloc");
  Ck(cudaMalloc(&dy, n * 4), "cudaMalloc");
  Ck(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  Ck(cudaMemcpy(dg, gamma.data(), cols * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  Ck(cudaMemcpy(db, beta.data(), cols * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  std::string out = "ok";
  auto compare = [&](const char* name) {
    Ck(cudaStreamSynchronize(s), "sync");
    Ck(cudaMemcpy(got.data(), dy, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (std::size_t i = 0; i < n; ++i) {
      if (std::fabs(got[i] - ref[i]) > 1e-4f * (1.0f + std::fabs(ref[i]))) {
        out = std::string(name) + " differs from the CPU reference at element " + std::to_string(i);
        return;
      }
    }
  };
  kernels::LayerNormForward(x.data(), gamma.data(), beta.data(), ref.data(), rows, cols);
  kernels::LaunchLayerNormForward(dx, dg, db, dy, rows, cols, 1e-5f, s);
  compare("layernorm");
  kernels::GeluForward(x.data(), ref.data(), n);
  kernels::LaunchGeluForward(dx, dy, n, s);
  compare("gelu");
  kernels::SoftmaxRows(x.data(), ref.data(), rows, cols);
  kernels::LaunchSoftmaxRows(dx, dy, rows, cols, s);
  compare("softmax");
  // The vectorized axpy over n - 1 elements (a tail past the last whole float4): y = 1.5 x there.
  for (std::size_t i = 0; i < n; ++i) ref[i] = i + 1 < n ? 1.5f * x[i] : x[i];
  Ck(cudaMemcpyAsync(dy, dx, n * 4, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
  kernels::LaunchAxpyVec(0.5f, dx, dy, n - 1, s);
  compare("axpy");
  cudaFree(dx);
  cudaFree(dg);
  cudaFree(db);
  cudaFree(dy);
  return out;
}

/// Memory-bound: the vectorized axpy over 1.2e4 .. 1.2e9 bytes (12 per element; the largest
/// 1.1 GiB, past any cache), and a device-to-device cudaMemcpy of 1 GiB as the reference the
/// axpy's peak is judged against (the copy engine and NVIDIA's own copy kernel reach the
/// HBM's practical rate).
void MeasureMemoryBound(bool quick, cudaStream_t s, Measurements* m) {
  for (double bytes = 1.2e4; bytes <= 1.3e9; bytes *= 10) {
    const std::size_t n = static_cast<std::size_t>(bytes / 12);
    float *x, *y;
    Ck(cudaMalloc(&x, n * 4), "cudaMalloc");
    Ck(cudaMalloc(&y, n * 4), "cudaMalloc");
    kernels::LaunchFillNormal(x, n, 3, s);
    kernels::LaunchFillNormal(y, n, 4, s);
    const double t = TimeEvents([&] { kernels::LaunchAxpyVec(0.5f, x, y, n, s); }, 5, quick ? 10 : 30, s);
    m->memory.push_back({static_cast<double>(n) * 12.0, MaxOverRanks(t)});
    cudaFree(x);
    cudaFree(y);
  }
  const std::size_t copy_bytes = std::size_t{1} << 30;
  void *src, *dst;
  Ck(cudaMalloc(&src, copy_bytes), "cudaMalloc");
  Ck(cudaMalloc(&dst, copy_bytes), "cudaMalloc");
  Ck(cudaMemsetAsync(src, 1, copy_bytes, s), "cudaMemsetAsync");
  const double t = TimeEvents([&] { Ck(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); },
                              3, quick ? 10 : 30, s);
  m->memcpy_d2d_GBps = 2.0 * static_cast<double>(copy_bytes) / MaxOverRanks(t) / 1e9;  // read + write
  cudaFree(src);
  cudaFree(dst);
}

/// Fused attention: cuDNN's SDPA at 1K-32K tokens (32K tokens per call: batch 32K / seq), causal,
/// with `heads`. Where cuDNN cannot run, `attention_note` says why and nothing is timed.
void MeasureAttention(bool quick, const AttentionHeads& heads, cudaStream_t s, Measurements* m) {
#ifdef SHARDCAST_HAVE_CUDNN
  // The model's head dim at every length; head dims 64, 128 and 192 (the same hidden width,
  // the same GQA ratio) at 2K tokens with --quick, at every length otherwise.
  std::vector<AttentionSample> shapes;
  const int ratio = std::max(1, heads.heads / std::max(1, heads.kv_heads));
  for (int d : {heads.head_dim, 64, 128, 192}) {
    if (d != heads.head_dim && std::any_of(shapes.begin(), shapes.end(), [&](const AttentionSample& x) {
          return x.head_dim == d;
        })) {
      continue;
    }
    const bool main = d == heads.head_dim && shapes.empty();
    for (int seq = 1024; seq <= 32768; seq *= 2) {
      if (!main && quick && seq != 2048) continue;
      AttentionSample a;
      a.batch = std::max(1, 32768 / seq);
      a.seq = seq;
      a.kv_heads = main ? heads.kv_heads
                        : std::max(1, static_cast<int>(std::lround(double(heads.kv_heads) * heads.head_dim / d)));
      a.heads = main ? heads.heads : a.kv_heads * ratio;
      a.head_dim = d;
      shapes.push_back(a);
    }
  }
  m->attention_head_dim = heads.head_dim;
  std::string why;
  for (AttentionSample a : shapes) {
    const auto att = kernels::CudnnAttention::Create({a.batch, a.heads, a.kv_heads, a.seq, a.head_dim}, s, &why);
    if (!att) break;
    bool ok = true;
    auto call = [&](bool fwd) {
      ok = ok && (fwd ? att->Forward(&why) : att->Backward(&why));
    };
    a.fwd_s = TimeEvents([&] { call(true); }, quick ? 2 : 3, quick ? 5 : 20, s);
    a.bwd_s = TimeEvents([&] { call(false); }, quick ? 2 : 3, quick ? 5 : 20, s);
    if (!ok) break;
    m->attention.push_back(a);
  }
  // Every rank's figure is the slowest rank's (a synchronous step waits for it); ranks that
  // timed fewer lengths keep the common prefix.
  int timed = static_cast<int>(m->attention.size()), fewest = timed;
  MPI_Allreduce(&timed, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  m->attention.resize(static_cast<std::size_t>(fewest));
  if (fewest < timed) why = "another rank timed only " + std::to_string(fewest) + " lengths";
  for (auto& a : m->attention) {
    a.fwd_s = MaxOverRanks(a.fwd_s);
    a.bwd_s = MaxOverRanks(a.bwd_s);
  }
  if (m->attention.empty()) {
    m->attention_note = "attention not measured: " + (why.empty() ? std::string("another rank could not run cuDNN") : why);
  } else {
    std::string dims;
    for (const auto& a : m->attention) {
      if (dims.find(" " + std::to_string(a.head_dim) + ",") == std::string::npos) dims += " " + std::to_string(a.head_dim) + ",";
    }
    m->attention_note = kernels::CudnnVersion() + " SDPA, causal bf16, " + std::to_string(heads.heads) + " heads / " +
                        std::to_string(heads.kv_heads) + " KV of " + std::to_string(heads.head_dim) + " at 1K-32K tokens; head dims" +
                        dims.substr(0, dims.size() - 1) + (why.empty() ? "" : " (stopped: " + why + ")");
  }
#else
  (void)quick;
  (void)heads;
  (void)s;
  m->attention_note = "attention not measured: this build found no cuDNN headers";
#endif
}

}  // namespace

bool BuiltWithCuda() { return true; }

std::string VerifyKernels() {
  cudaStream_t s;
  Ck(cudaStreamCreate(&s), "cudaStreamCreate");
  std::string r = CheckKernels(s);
  cudaStreamDestroy(s);
  return r;
}

bool Usable(std::string* why) { return cudautil::DeviceUsable(why); }

Measurements Measure(bool quick, bool progress, const std::vector<std::array<int, 3>>& extra_shapes,
                     const AttentionHeads& heads) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  int ndev = 0;
  Ck(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
  Ck(cudaSetDevice(local_rank % ndev), "cudaSetDevice");
  Measurements m;
  m.ranks = size;
  m.ranks_per_node = local_size;
  m.nodes = size / std::max(1, local_size);
  cudaDeviceProp prop{};
  Ck(cudaGetDeviceProperties(&prop, local_rank % ndev), "cudaGetDeviceProperties");
  m.device_name = prop.name;
  m.memory_bytes = static_cast<double>(prop.totalGlobalMem);
  m.sm_count = prop.multiProcessorCount;
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  m.driver_version = std::to_string(drv);
  m.runtime_version = std::to_string(rt);
  int nccl = 0;
  ncclGetVersion(&nccl);
  m.nccl_version = std::to_string(nccl);
  cudaStream_t s;
  Ck(cudaStreamCreate(&s), "cudaStreamCreate");
  m.kernel_check = CheckKernels(s);

  // GEMMs: a log grid with off-by-one shapes (tile and wave effects, hardware.md 4.2).
  cublasLtHandle_t lt;
  Ck(cublasLtCreate(&lt), "cublasLtCreate");
  const std::size_t ws_bytes = 32u << 20;  // 32 MiB (cuBLAS guidance for Hopper and later)
  void* ws = nullptr;
  Ck(cudaMalloc(&ws, ws_bytes), "cudaMalloc workspace");
  std::vector<int> dims = quick ? std::vector<int>{1024, 4096, 8192} : std::vector<int>{256, 1024, 2048, 4096, 8192, 16384};
  std::vector<std::array<int, 3>> shapes;
  for (int d : dims) shapes.push_back({d, d, d});
  shapes.push_back({4097, 4096, 4096});
  shapes.push_back({8192, 1024, 8192});
  shapes.push_back({16384, 3072, 4096});
  for (const auto& e : extra_shapes) {
    if (std::find(shapes.begin(), shapes.end(), e) == shapes.end()) shapes.push_back(e);
  }
  // Sustained clocks: the largest square GEMM back to back first (the GPU reaches its steady
  // power and temperature), then each shape soaks briefly before it is timed.
  Nvml nvml;
  const bool have_nvml = nvml.Open(local_rank % ndev, &m.nvml_note);
  m.gemm_soak_s = quick ? 5.0 : 20.0;
  TimeGemm(lt, 8192, 8192, 8192, ws, ws_bytes, s, true, m.gemm_soak_s);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    GemmSample g = TimeGemm(lt, shapes[i][0], shapes[i][1], shapes[i][2], ws, ws_bytes, s, quick, quick ? 0.25 : 1.0,
                            have_nvml ? &nvml : nullptr);
    g.heuristic0_s = MaxOverRanks(g.heuristic0_s);
    g.best_s = MaxOverRanks(g.best_s);
    m.gemm.push_back(g);
    if (progress && rank == 0) std::fprintf(stderr, "calibrate: gemm %zu/%zu\n", i + 1, shapes.size());
  }
  MeasureMemoryBound(quick, s, &m);
  MeasureAttention(quick, heads, s, &m);
  if (progress && rank == 0) std::fprintf(stderr, "calibrate: attention: %s\n", m.attention_note.c_str());
  // Overlap: a GEMM alone and beside a large NCCL all-reduce on another stream (when ranks > 1).
  ncclComm_t comm = nullptr;
  if (size > 1) {
    ncclUniqueId id;
    if (rank == 0) Ck(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    Ck(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
    const std::vector<std::pair<int, const char*>> ops = {
        {0, "all_reduce"}, {1, "all_gather"}, {2, "reduce_scatter"}, {3, "alltoall"}, {4, "sendrecv"}};
    for (const auto& entry : ops) {
      const int op = entry.first;
      const char* name = entry.second;
      for (double bytes = 8; bytes <= (quick ? (1 << 26) : (1ull << 30)); bytes *= (quick ? 16 : 4)) {
        const std::size_t total = std::max<std::size_t>(static_cast<std::size_t>(bytes / 2), static_cast<std::size_t>(size));
        // Elements per peer for AG/RS/A2A (nccl-tests' size = per-peer count x n), else per rank.
        const bool per_peer = op == 1 || op == 2 || op == 3;
        const std::size_t per = per_peer ? total / static_cast<std::size_t>(size) : total;
        const std::size_t big = per * static_cast<std::size_t>(size);
        void *send, *recv;
        Ck(cudaMalloc(&send, 2 * (op == 2 || op == 3 ? big : per)), "cudaMalloc");
        Ck(cudaMalloc(&recv, 2 * (op == 1 || op == 3 ? big : per)), "cudaMalloc");
        auto run = [&] {
          if (op == 0) Ck(ncclAllReduce(send, recv, per, ncclBfloat16, ncclSum, comm, s), "ncclAllReduce");
          if (op == 1) Ck(ncclAllGather(send, recv, per, ncclBfloat16, comm, s), "ncclAllGather");
          if (op == 2) Ck(ncclReduceScatter(send, recv, per, ncclBfloat16, ncclSum, comm, s), "ncclReduceScatter");
          if (op == 3) {
            Ck(ncclGroupStart(), "ncclGroupStart");
            for (int peer = 0; peer < size; ++peer) {
              Ck(ncclSend(static_cast<char*>(send) + 2 * per * peer, per, ncclBfloat16, peer, comm, s), "ncclSend");
              Ck(ncclRecv(static_cast<char*>(recv) + 2 * per * peer, per, ncclBfloat16, peer, comm, s), "ncclRecv");
            }
            Ck(ncclGroupEnd(), "ncclGroupEnd");
          }
          if (op == 4) {  // ring shift, as nccl-tests' sendrecv_perf
            Ck(ncclGroupStart(), "ncclGroupStart");
            Ck(ncclSend(send, per, ncclBfloat16, (rank + 1) % size, comm, s), "ncclSend");
            Ck(ncclRecv(recv, per, ncclBfloat16, (rank + size - 1) % size, comm, s), "ncclRecv");
            Ck(ncclGroupEnd(), "ncclGroupEnd");
          }
        };
        const double t = TimeEvents(run, 5, quick ? 10 : 20, s);
        const double size_col = per_peer ? 2.0 * big : 2.0 * per;  // nccl-tests' size
        m.collectives.push_back({op, size_col, MaxOverRanks(t)});
        cudaFree(send);
        cudaFree(recv);
      }
      if (progress && rank == 0) std::fprintf(stderr, "calibrate: nccl %s done\n", name);
    }
  }
  {
    GemmSample alone = TimeGemm(lt, 8192, 8192, 8192, ws, ws_bytes, s, true);
    m.gemm_alone_s = MaxOverRanks(alone.heuristic0_s);
    m.gemm_with_comm_s = m.gemm_alone_s;
    if (comm) {
      cudaStream_t cs;
      Ck(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "stream");
      const std::size_t n = 256u << 20;  // 512 MiB of bf16
      void *send, *recv;
      Ck(cudaMalloc(&send, 2 * n), "cudaMalloc");
      Ck(cudaMalloc(&recv, 2 * n), "cudaMalloc");
      for (int i = 0; i < 4; ++i) Ck(ncclAllReduce(send, recv, n, ncclBfloat16, ncclSum, comm, cs), "ncclAllReduce");
      GemmSample with = TimeGemm(lt, 8192, 8192, 8192, ws, ws_bytes, s, true);
      Ck(cudaStreamSynchronize(cs), "sync");
      m.gemm_with_comm_s = MaxOverRanks(with.heuristic0_s);
      cudaFree(send);
      cudaFree(recv);
      cudaStreamDestroy(cs);
    }
  }
  if (comm) ncclCommDestroy(comm);
  cudaFree(ws);
  cublasLtDestroy(lt);
  cudaStreamDestroy(s);
  MPI_Comm_free(&local);
  return m;
}

}  // namespace shardcast::cuda
